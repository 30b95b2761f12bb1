"""A run of repeated failures of one side task (the claim loop against a database that
refuses it): logged once when it starts, summed up while it lasts, said when it ends, with an
exponential backoff between tries instead of a warning per try."""

from __future__ import annotations

import logging

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.logs import emit

log = logging.getLogger("tenure.worker")
SUMMARY_SECONDS = 30.0
FIRST_BACKOFF, LAST_BACKOFF = 0.05, 5.0


class FailureRun:
    """`failed()` after each failed try returns how long to wait before the next one."""

    def __init__(self, what: str, worker: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.what, self.worker, self.clock = what, worker, clock
        self.count = 0
        self._since = 0.0
        self._last_summary = 0.0

    def failed(self, error_type: str, reason: str | None = None) -> float:
        """Count a failed try (its first is logged, with `reason` when given: a message of
        tenure's naming the database, never content); return the wait before the next."""
        now = self.clock.monotonic()
        self.count += 1
        if self.count == 1:
            self._since = self._last_summary = now
            said = {} if reason is None else {"reason": reason}
            emit(
                log,
                logging.WARNING,
                f"{self.what}_failed",
                worker=self.worker,
                error_type=error_type,
                **said,
            )
        elif now - self._last_summary >= SUMMARY_SECONDS:
            self._last_summary = now
            emit(
                log,
                logging.WARNING,
                f"{self.what}_failing",
                worker=self.worker,
                error_type=error_type,
                failures=self.count,
                for_seconds=round(now - self._since, 1),
            )
        return float(min(LAST_BACKOFF, FIRST_BACKOFF * 2 ** min(self.count - 1, 16)))

    def succeeded(self) -> None:
        if self.count:
            emit(
                log,
                logging.INFO,
                f"{self.what}_recovered",
                worker=self.worker,
                failures=self.count,
                after_seconds=round(self.clock.monotonic() - self._since, 1),
            )
            self.count = 0
