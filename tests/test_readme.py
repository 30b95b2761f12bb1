"""The README's Python code blocks run as written, in order, in one fresh folder (after the
quick start's commands), with stubs only for the functions a block names as the user's own
(`render`, `mailer`, `acl`, `charge_card`, …) and a local file for a placeholder URL. A sample
that drifts from the code (a NameError, a refused class, a claim of the wrong job) fails here.

The shell blocks are not run here: `../shared/fresh-check` runs the install, demo and test
commands, and `tests/test_cli.py` the commands one by one.
"""

from __future__ import annotations

import re
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
        "render": lambda payload: {"pdf": "…"},
        "mailer": SimpleNamespace(send=lambda pdf, idempotency_key, fence: "m-1"),
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
        assert namespace["_sent"] == [129]
    finally:
        namespace["app"].close()
        for name in ("ledger", "guard"):
            closing = getattr(namespace.get(name), "close", None)
            if closing is not None:
                closing()
