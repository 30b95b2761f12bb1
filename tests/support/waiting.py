"""Polls with deadlines (never bare sleeps standing in for synchronisation)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Literal, TypeVar

import tenure

T = TypeVar("T")


def poll(
    check: Callable[[], T | Literal[False] | None], timeout: float = 10.0, what: str = "condition"
) -> T:
    """Call `check` until it returns something truthy, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    pause = 0.002
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def until_db_time_passes(ledger: tenure.Ledger, moment: datetime, timeout: float = 10.0) -> None:
    """Wait until the database's own clock is past `moment` (a lease end, a run_after)."""
    poll(lambda: ledger.now() > moment, timeout, f"database time to pass {moment.isoformat()}")
