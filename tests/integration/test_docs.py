"""The code blocks of the README and of every page in `docs/` run as written, one test per
block, so that the documentation cannot drift from the code.

Python blocks run in order, page by page, each page in one fresh folder (after the first-job
tutorial's `tenure submit`, so that there is a `tenure.db` with a job in it), sharing one
namespace per page as a reader's session would, with stubs only for the functions a block names
as the user's own (`acl`, `charge_card`, …) and a local file for a placeholder URL. A block
that needs an optional extra is marked by the line `<!-- requires: MODULE -->` above it and is
skipped where that module is not installed. Every `tenure` line of the shell blocks is parsed
by the real command line, and the quick ones run; the other shell lines are named in `_OTHERS`
with where they run instead.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import tenure
from tenure.schedules import Schedule
from tests.support.cli import tenure_cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_BLOCK = re.compile(r"(?:<!-- requires: ([\w.]+) -->\n)?```(\w*)\n(.*?)```", re.S)
# Placeholders in the pages for the user's own infrastructure, and what the test uses.
PLACEHOLDERS = {'"postgresql://…/payments"': '"sqlite:///receiver.db"'}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    code: str
    requires: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(language: str) -> list[Block]:
    found: list[Block] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            if match.group(2) == language:
                line = text.count("\n", 0, match.start(2)) + 1
                found.append(Block(page, line, language, match.group(3), match.group(1)))
    return found


def user_stubs(folder: Path) -> dict[str, Any]:
    """What the blocks take for granted: the user's own functions and values, and an `app`
    and `ledger` on the folder's database where a block uses them without making them."""
    sent: list[Any] = []

    def charge_card(amount: int) -> dict[str, Any]:
        sent.append(amount)
        return {"charged": amount}

    app = tenure.App(f"sqlite:///{folder / 'tenure.db'}")
    return {
        "tenure": tenure,
        "app": app,
        "ledger": app.ledger,
        "acl": SimpleNamespace(allows=lambda tenant, doc: True),
        "charge_card": charge_card,
        "amount": 129,
        "job_id": "00000000-0000-4000-8000-000000000017",
        "token": 2,
        "idempotency_key": "tool-job:00000000-0000-4000-8000-000000000017:charge",
        "_sent": sent,
    }


@dataclass
class Session:
    """One page's reading session: its folder, its namespace, the blocks run so far."""

    folder: Path
    namespace: dict[str, Any]
    ran: list[Block] = field(default_factory=list)

    def close(self) -> None:
        for name in ("app", "ledger", "guard"):
            closing = getattr(self.namespace.get(name), "close", None)
            if closing is not None:
                closing()


_SESSIONS: dict[Path, Session] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_sessions() -> Any:
    yield
    for session in _SESSIONS.values():
        session.close()
    _SESSIONS.clear()


def _session(page: Path, tmp_path_factory: pytest.TempPathFactory) -> Session:
    if page not in _SESSIONS:
        folder = tmp_path_factory.mktemp(page.stem)
        quick_start = tenure_cli(
            "submit", "ocr", "--payload", '{"doc": "a.pdf"}', "--key", "doc-17:ocr", cwd=folder
        )
        assert quick_start.returncode == 0, quick_start.stderr
        _SESSIONS[page] = Session(folder, user_stubs(folder))
    return _SESSIONS[page]


# What a page's blocks must have done once they all ran (beyond not raising).
PAGE_CHECKS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "docs/how-to/fence-a-receiver.md": lambda ns: ns["receipt"] == {"charged": 129},
    "docs/tutorials/runs-that-wait.md": lambda ns: (
        ns["_sent"] == [4200] and ns["done"].result == {"receipt": {"charged": 4200}}
    ),
}


def _run(block: Block, session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(session.folder)
    code = block.code
    for placeholder, value in PLACEHOLDERS.items():
        code = code.replace(placeholder, value)
    namespace = session.namespace
    exec(compile(code, block.name, "exec"), namespace)  # noqa: S102
    if "job_id = ledger.submit" in code:
        own = namespace["ledger"].get(namespace["job_id"])
        assert own.state is tenure.JobState.SUCCEEDED, block.name
    session.ran.append(block)


PYTHON = blocks("python")


def _installed(block: Block) -> bool:
    """Whether the extra a block needs (if any) is installed."""
    return block.requires is None or importlib.util.find_spec(block.requires) is not None


def test_the_pages_have_python_blocks() -> None:
    """The extraction finds the blocks (an empty list would make the next test pass vacuously)."""
    assert len(PYTHON) >= 15
    assert {b.page.name for b in PYTHON} >= {"README.md", "first-job.md", "runs-that-wait.md"}


@pytest.mark.parametrize("block", PYTHON, ids=[b.name for b in PYTHON])
def test_a_python_block_runs_as_written(
    block: Block, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block runs, after the blocks before it on its page, in its page's session; the last
    block of a page leaves what the page promises."""
    if not _installed(block):
        pytest.skip(f"needs {block.requires} (an optional extra)")
    session = _session(block.page, tmp_path_factory)
    # A block before it that needs a missing extra is skipped there, and here too.
    earlier = [b for b in PYTHON if b.page == block.page and b.line < block.line and _installed(b)]
    for before in earlier:
        if before not in session.ran:
            _run(before, session, monkeypatch)
    _run(block, session, monkeypatch)
    page = str(block.page.relative_to(ROOT))
    last = [b for b in PYTHON if b.page == block.page][-1]
    if block == last and page in PAGE_CHECKS:
        assert PAGE_CHECKS[page](session.namespace), page


# Shell lines of the pages that are not `tenure` commands, and why this test leaves them to
# others: installs and the test commands run in `../shared/fresh-check` and CI; `curl` needs a
# running `tenure serve` (tests/integration/test_service_ops.py runs one); `python` lines start
# the user's module or a benchmark (CI runs `bench/run.py --quick`); `export` sets the shell's
# database; `mkdocs` builds this site (CI builds it strictly); the PostgreSQL fleet's own tools
# run in tests/faults/test_failover.py, tests/faults/test_ha.py and
# tests/integration/test_pooler.py.
_OTHERS = (
    "pip ",
    "pytest ",
    "curl ",
    "python ",
    "export ",
    "-H ",
    "TENURE_ADMIN_KEY_SHA256=",
    "mkdocs ",
    "TENURE_SCREENSHOT_DIR=",
    "patroni ",
    "pgbouncer ",
    "pg_",
    "etcd ",
    "psql ",
)
# `tenure` commands that run for long (or for ever): their arguments are parsed, not run here.
_LONG = ("worker", "serve", "mcp", "demo", "chaos", "replay", "eval")


def shell_commands(block: Block) -> list[tuple[int, str]]:
    """(line number, command) of every `tenure` command in a ```bash block, with continuation
    lines joined and comments dropped."""
    commands: list[tuple[int, str]] = []
    joined = block.code.replace("\\\n", " ")
    for offset, raw in enumerate(joined.splitlines()):
        line = raw.split("  #", 1)[0].strip().rstrip("&").strip()
        if line.startswith("tenure "):
            commands.append((block.line + 1 + offset, line))
        elif line and not line.startswith(_OTHERS) and not line.startswith("#"):
            raise AssertionError(
                f"{block.name}, line {block.line + 1 + offset}: no rule for {line!r}"
            )
    return commands


def _arguments(command: str, job_id: str) -> list[str]:
    """The command's arguments with the pages' placeholders filled in."""
    words = shlex.split(command)[1:]
    filled = {"ID": job_id, "JOB_ID": job_id, "[--db": None, "URL]": None}
    return [value for word in words if (value := filled.get(word, word)) is not None]


BASH = blocks("bash")


def test_the_pages_have_shell_blocks() -> None:
    assert sum(len(shell_commands(b)) for b in BASH) >= 15


@pytest.mark.parametrize("block", BASH, ids=[b.name for b in BASH])
def test_every_tenure_command_of_a_shell_block_parses_and_the_quick_ones_run(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each `tenure …` line is accepted by the command line as written (a renamed flag or
    command fails here); the quick ones run for real, in order, in one fresh folder, on the
    default database, and succeed."""
    from tenure.cli import build_parser

    monkeypatch.chdir(tmp_path)
    commands = shell_commands(block)
    submitted = tenure_cli("submit", "ocr", "--payload", "{}")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    with tenure.connect("sqlite:///tenure.db") as ledger:  # what the `browse` app declares
        ledger.operations.declare_labels(
            {"browse": {"tool": "browser", "provider": "acme-web", "model": None}}
        )
        # What a worker running the schedules page's app declares at start.
        ledger.operations.schedules.declare("nightly_export", Schedule(tenure.Every(3600)))
    parser = build_parser()
    for line, command in commands:
        arguments = _arguments(command, job_id)
        try:
            parser.parse_args(arguments)
        except SystemExit as exc:
            raise AssertionError(
                f"{block.page.name} line {line}: `{command}` does not parse"
            ) from exc
        if arguments[0] in _LONG or "--help" in arguments:
            continue
        ran = tenure_cli(*arguments)
        assert ran.returncode == 0, f"{block.page.name} line {line}: `{command}`: {ran.stderr}"
