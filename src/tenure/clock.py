"""The clock of every local deadline, pause and timestamp (a worker's lease renewals, the
conservative lease deadline, stage timeouts, a lease's lifetime; a client's waits and retry
pauses; the test harnesses' waits for a real server or process): the system's clocks, or one a
test moves (`tenure.testing.clock.FakeClock`). The database's clock still decides every lease.

Each module that keeps time takes a `clock: Clock = SYSTEM_CLOCK` and calls it; only this module
and `tenure.testing.clock` read `time` themselves (tests/unit/test_clock_injection.py checks)."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds, the wall clock, a pause, and a wait for an event that ends when this
    clock says."""

    def monotonic(self) -> float:
        """Seconds since some fixed moment; never goes back."""
        ...

    def wall(self) -> float:
        """Seconds since the Unix epoch (may jump): for timestamps compared with other
        processes' or the database's, never for a deadline."""
        ...

    def sleep(self, seconds: float) -> None:
        """Pause the calling thread for `seconds` of this clock."""
        ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait until `event` is set (True) or `seconds` of this clock pass (False)."""
        ...


class SystemClock:
    """`time.monotonic()`, `time.time()`, `time.sleep()` and `Event.wait`."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(seconds)


SYSTEM_CLOCK = SystemClock()
