"""Group commit: the results of many handler threads go to the database in one statement.

A handler thread hands its result over and waits. The committer thread takes everything that
arrived while the previous statement ran and publishes it with one `complete_many`: under load
each statement carries many jobs, and an idle worker adds no delay (nothing waits to fill a
batch). Every job still gets its own answer: published, `LeaseLost`, or `OwnershipUnknown`.
"""

from __future__ import annotations

import threading
from typing import Any

from tenure.errors import OwnershipUnknown, TenureError
from tenure.ledger import Ledger
from tenure.types import JSON, Lease

# Results per statement: bounds the statement's size, not the wait.
_MAX_BATCH = 500
# Statements at once: while one commits (its fsync), the next batch is already on its way.
_STATEMENTS_IN_FLIGHT = 1


class _Pending:
    __slots__ = ("done", "error", "lease", "result")

    def __init__(self, lease: Lease, result: JSON) -> None:
        self.lease = lease
        self.result = result
        self.error: BaseException | None = None
        self.done = threading.Event()


class Committer:
    """`complete(lease, result)` from any thread; one statement per batch on its own thread."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._pending: list[_Pending] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._run, name=f"tenure-commit-{n}", daemon=True)
            for n in range(_STATEMENTS_IN_FLIGHT)
        ]
        self.batches = 0

    def start(self) -> None:
        """Start the committer threads."""
        for thread in self._threads:
            thread.start()

    def complete(self, lease: Lease, result: JSON) -> None:
        """Publish `result` for `lease`, raising what `Ledger.complete` would raise."""
        item = _Pending(lease, result)
        with self._cond:
            queued = not self._stopping
            if queued:
                self._pending.append(item)
                self._cond.notify()
        if not queued:
            self._ledger.complete(lease, result)
            return
        item.done.wait()
        if item.error is not None:
            raise item.error

    def stop(self) -> None:
        """Publish what is waiting, then stop; later completes write directly."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending:
                    return
                batch = self._pending[:_MAX_BATCH]
                del self._pending[:_MAX_BATCH]
            self._publish(batch)

    def _publish(self, batch: list[_Pending]) -> None:
        self.batches += 1
        try:
            answers: dict[str, Any] = self._ledger.complete_many(
                [(item.lease, item.result) for item in batch]
            )
        except OwnershipUnknown as exc:
            for item in batch:
                # One exception object per waiting thread: each raises and extends its own.
                item.error = OwnershipUnknown(str(exc))
                item.done.set()
            return
        except BaseException as exc:  # every waiter must learn the outcome, then we go on
            for item in batch:
                item.error = exc if isinstance(exc, TenureError) else TenureError(repr(exc))
                item.done.set()
            return
        for item in batch:
            item.error = answers.get(item.lease.job_id)
            item.done.set()
