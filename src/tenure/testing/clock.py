"""A clock that moves only when a test says: a worker given one (`Worker(app, clock=clock)`)
meets its stage timeouts, lease lifetimes and renewals when the test calls `advance`, however
long they are, and never because the machine was slow. A module that pauses on it (`sleep`)
moves it on by the pause at once: a wait for an hour-long deadline takes no real time."""

from __future__ import annotations

import threading

# How often (real seconds) a wait looks whether its event was set: the event's setter does not
# know this clock's condition.
_RECHECK = 0.005


class FakeClock:
    """Monotonic seconds that stand still until `advance(seconds)` (or a `sleep`); the wall
    clock moves with them from `wall_start`."""

    def __init__(self, start: float = 1_000.0, *, wall_start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall_start - start
        self._moved = threading.Condition()

    def monotonic(self) -> float:
        with self._moved:
            return self._now

    def wall(self) -> float:
        with self._moved:
            return self._now + self._wall_offset

    def sleep(self, seconds: float) -> None:
        """The pause passes at once: the clock moves on by `seconds` (waking every wait whose
        time has come), as if the caller had slept that long."""
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Move the clock on by `seconds` and wake every wait whose time has come."""
        if seconds < 0:
            raise ValueError("a monotonic clock never goes back")
        with self._moved:
            self._now += seconds
            self._moved.notify_all()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        with self._moved:
            deadline = self._now + seconds
            while not event.is_set() and self._now < deadline:
                self._moved.wait(_RECHECK)
        return event.is_set()
