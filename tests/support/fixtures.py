"""Fixtures shared by the test modules (registered in conftest.py)."""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.demo.bank import Bank, BankServer
from tenure.fence import FenceGuard, ledger_tokens
from tests.support.waiting import poll


@pytest.fixture
def make_app(db_url: str) -> Iterator[Callable[[], tenure.App]]:
    """Apps on the test's database; each is closed at the end of the test."""
    apps: list[tenure.App] = []

    def make() -> tenure.App:
        app = tenure.App(db_url)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


@contextmanager
def fenced_bank(
    folder: Path, current_token: Callable[[str], int] | None = None
) -> Iterator[BankServer]:
    """A fenced receiver on loopback in the test's process (it outlives every worker), on its
    own SQLite file; `current_token` as for `FenceGuard`."""
    guard = FenceGuard(f"sqlite:///{folder / 'receiver.db'}", current_token=current_token)
    receiver = BankServer(Bank(guard))
    try:
        yield receiver
    finally:
        receiver.close()
        guard.close()


@pytest.fixture
def bank(ledger: tenure.Ledger, tmp_path: Path) -> Iterator[BankServer]:
    """A fenced receiver that can read the ledger: a job's token now is its bar too."""
    with fenced_bank(tmp_path, ledger_tokens(ledger)) as receiver:
        yield receiver


def applied(bank: BankServer) -> Counter[str]:
    """How many times the bank applied each effect key."""
    return Counter(e.key for e in bank.bank.events if e.what == "applied")


def repeated_answer(text: str) -> Any:
    """The tool's answer a scripted model repeated ("done: <the tool's output>")."""
    return json.loads(text.removeprefix("done: "))


def kill_in_effect_then_start_another(
    workers: Any, db_url: str, folder: Path, doomed: Any, env: dict[str, str]
) -> None:
    """Once worker `doomed` is inside its effect (after the bank applied it), SIGKILL it and
    start worker B."""
    poll(lambda: list(folder.glob(f"at-in_effect-{doomed.pid}")), 30, "A inside the effect")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    workers.start(db_url, "B", env=env)
