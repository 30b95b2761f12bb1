"""The clock of a worker's local deadlines (lease renewals, the conservative lease deadline,
stage timeouts, a lease's lifetime): the system's monotonic clock, or one a test moves
(`tenure.testing.clock.FakeClock`). The database's clock still decides every lease."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds, and a wait for an event that ends when this clock says."""

    def monotonic(self) -> float:
        """Seconds since some fixed moment; never goes back."""
        ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait until `event` is set (True) or `seconds` of this clock pass (False)."""
        ...


class SystemClock:
    """`time.monotonic()` and `Event.wait`."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(seconds)


SYSTEM_CLOCK = SystemClock()
