"""The README's code blocks run as written, so that the README cannot drift from the code.

Python blocks run in order in one fresh folder (after the quick start's commands), with stubs
only for the functions a block names as the user's own (`render`, `mailer`, `acl`,
`charge_card`, …) and a local file for a placeholder URL. Every `tenure` line of the shell
blocks is parsed by the real command line, and the quick ones run; the other shell lines are
named in `_OTHERS` with where they run instead.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import tenure
from tests.support.cli import tenure_cli

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)
# Placeholders in the README for the user's own infrastructure, and what the test uses.
PLACEHOLDERS = {'"postgresql://…/payments"': '"sqlite:///receiver.db"'}


def python_blocks() -> list[tuple[int, str]]:
    """(line number, code) of every ```python block, in order."""
    text = README.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(2))
        for match in _BLOCK.finditer(text)
        if match.group(1) == "python"
    ]


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


def test_the_readme_has_python_blocks() -> None:
    """The extraction finds the blocks (an empty list would make the next test pass vacuously)."""
    assert len(python_blocks()) >= 5


def test_every_python_block_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a folder where the quick start ran, each block runs in order, sharing one namespace
    as a reader's session would; the ledger sample ends with its own job succeeded."""
    monkeypatch.chdir(tmp_path)
    quick_start = tenure_cli(
        "submit", "ocr", "--payload", '{"doc": "a.pdf"}', "--key", "doc-17:ocr"
    )
    assert quick_start.returncode == 0, quick_start.stderr
    namespace = user_stubs(tmp_path)
    try:
        for line, block in python_blocks():
            code = block
            for placeholder, value in PLACEHOLDERS.items():
                code = code.replace(placeholder, value)
            exec(compile(code, f"README.md, block at line {line}", "exec"), namespace)  # noqa: S102
            if "job_id = ledger.submit" in code:
                own = namespace["ledger"].get(namespace["job_id"])
                assert own.state is tenure.JobState.SUCCEEDED, f"block at line {line}"
        assert namespace["receipt"] == {"charged": 129}
        # The receiver section's charge, and the refund of "Runs that wait" (once, though the
        # refund suspended twice and replayed its steps).
        assert sorted(namespace["_sent"]) == [129, 4200]
        assert namespace["done"].result == {"receipt": {"charged": 4200}}
    finally:
        namespace["app"].close()
        for name in ("ledger", "guard"):
            closing = getattr(namespace.get(name), "close", None)
            if closing is not None:
                closing()


# Shell lines of the README that are not `tenure` commands, and why this test leaves them to
# others: installs and the test command run in `../shared/fresh-check` and CI; `curl` needs a
# running `tenure serve` (tests/test_service_ops.py runs one); `python` lines start the user's
# module or the benchmark (CI runs `bench/run.py --quick`); `export` sets the shell's database.
_OTHERS = ("pip ", "curl ", "python ", "export ", "-H ", "TENURE_ADMIN_KEY_SHA256=")
# `tenure` commands that run for long (or for ever): their arguments are parsed, not run here.
_LONG = ("worker", "serve", "mcp", "demo", "chaos", "replay", "eval")


def shell_commands() -> list[tuple[int, str]]:
    """(line number, command) of every `tenure` command in the README's ```bash blocks, with
    continuation lines joined and comments dropped."""
    text = README.read_text(encoding="utf-8")
    commands: list[tuple[int, str]] = []
    for match in _BLOCK.finditer(text):
        if match.group(1) != "bash":
            continue
        start = text.count("\n", 0, match.start()) + 2
        joined = match.group(2).replace("\\\n", " ")
        for offset, raw in enumerate(joined.splitlines()):
            line = raw.split("  #", 1)[0].strip().rstrip("&").strip()
            if line.startswith("tenure "):
                commands.append((start + offset, line))
            elif line and not line.startswith(_OTHERS) and not line.startswith("#"):
                raise AssertionError(f"README line {start + offset}: no rule for {line!r}")
    return commands


def _arguments(command: str, job_id: str) -> list[str]:
    """The command's arguments with the README's placeholders filled in."""
    words = shlex.split(command)[1:]
    filled = {"ID": job_id, "JOB_ID": job_id, "[--db": None, "URL]": None}
    return [value for word in words if (value := filled.get(word, word)) is not None]


def test_every_tenure_command_in_the_readme_parses_and_the_quick_ones_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each `tenure …` line of the README is accepted by the command line as written (a
    renamed flag or command fails here); the quick ones run for real, in order, in one fresh
    folder, on the README's own default database, and succeed."""
    from tenure.cli import build_parser

    monkeypatch.chdir(tmp_path)
    commands = shell_commands()
    assert len(commands) >= 15
    submitted = tenure_cli("submit", "ocr", "--payload", "{}")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    with tenure.connect("sqlite:///tenure.db") as ledger:  # what the README's `browse` app declares
        ledger.declare_labels(
            {"browse": {"tool": "browser", "provider": "acme-web", "model": None}}
        )
    parser = build_parser()
    for line, command in commands:
        arguments = _arguments(command, job_id)
        try:
            parser.parse_args(arguments)
        except SystemExit as exc:
            raise AssertionError(f"README line {line}: `{command}` does not parse") from exc
        if arguments[0] in _LONG or "--help" in arguments:
            continue
        ran = tenure_cli(*arguments)
        assert ran.returncode == 0, f"README line {line}: `{command}`: {ran.stderr}"
