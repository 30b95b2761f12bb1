"""Group commit: the results of many handler threads go to the database in one statement.

A handler thread hands its result over and waits. The committer thread takes everything that
arrived while the previous statement ran and publishes it with one statement: under load each
statement carries many jobs, and an idle worker adds no delay (nothing waits to fill a batch).
Every job still gets its own answer: published, `LeaseLost`, or `OwnershipUnknown`.

When the worker has free slots, the same statement also claims its next jobs
(`Ledger.complete_and_claim`): a busy worker then makes one round trip per batch, not two.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tenure.errors import OwnershipUnknown, TenureError
from tenure.ledger import Ledger
from tenure.runtime.supervisor import Supervisor
from tenure.types import JSON, Lease

# Results per statement: bounds the statement's size, not the wait.
_MAX_BATCH = 500


@dataclass(frozen=True)
class ClaimSpec:
    """Slots a claim may fill (already reserved), and for which kinds and lease."""

    owner_id: str
    kinds: Sequence[str]
    lease_seconds: float
    limit: int
    variants: Mapping[str, Sequence[str]] | None = None


class Claimer(Protocol):
    """The worker's side: reserve free slots for a claim, then start what it returned."""

    def reserve_claim(self) -> ClaimSpec | None: ...

    def claimed(self, spec: ClaimSpec, leases: list[Lease], sent_at: float) -> None: ...


class _Pending:
    """One result on its way, and its answer. The waiting handler thread blocks on a plain
    lock that the committer releases: cheaper per job than an Event (a Condition each)."""

    __slots__ = ("_answered", "error", "finished", "lease", "result")

    def __init__(self, lease: Lease, result: JSON) -> None:
        self.lease = lease
        self.result = result
        self.error: BaseException | None = None
        self.finished = False
        self._answered = threading.Lock()
        self._answered.acquire()

    def finish(self, error: BaseException | None) -> None:
        self.error, self.finished = error, True
        self._answered.release()

    def wait(self) -> None:
        self._answered.acquire()


class Committer:
    """`complete(lease, result)` from any thread; one statement per batch on its own thread."""

    def __init__(
        self, ledger: Ledger, supervisor: Supervisor, claimer: Claimer | None = None
    ) -> None:
        self._ledger = ledger
        self._supervisor = supervisor
        self._claimer = claimer
        self._pending: list[_Pending] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._in_flight = False
        self._thread: threading.Thread | None = None
        self.batches = 0

    def start(self) -> None:
        """Start the committer thread (idempotent)."""
        if self._thread is None:
            self._thread = self._supervisor.spawn("commit", self._run)

    @property
    def claims_soon(self) -> bool:
        """True while results wait or a statement runs: the next statement will claim too."""
        return self._claimer is not None and (self._in_flight or bool(self._pending))

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
        item.wait()
        if item.error is not None:
            raise item.error

    def stop(self) -> None:
        """Publish what is waiting, then stop; later completes write directly."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        batch: list[_Pending] = []
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._stopping:
                        self._cond.wait()
                    if not self._pending:
                        return
                    batch = self._pending[:_MAX_BATCH]
                    del self._pending[:_MAX_BATCH]
                    self._in_flight = True
                try:
                    self._publish(batch)
                finally:
                    self._in_flight = False
        except BaseException:
            # Dying (the supervisor stops the worker): no waiting handler may wait forever.
            # Later completes write directly; these are told to write theirs again.
            with self._cond:
                self._stopping = True
                left, self._pending = [*batch, *self._pending], []
            for item in left:
                if not item.finished:
                    item.finish(
                        OwnershipUnknown(
                            "the committer stopped before this result was written; write it again"
                        )
                    )
            raise

    def _publish(self, batch: list[_Pending]) -> None:
        self.batches += 1
        outcomes = [(item.lease, item.result) for item in batch]
        spec: ClaimSpec | None = None
        leases: list[Lease] = []
        sent_at = time.monotonic()
        try:
            if self._claimer is not None and not self._stopping:
                spec = self._claimer.reserve_claim()
            if spec is None:
                answers = self._ledger.complete_many(outcomes)
            else:
                answers, leases = self._ledger.complete_and_claim(
                    outcomes,
                    spec.owner_id,
                    limit=spec.limit,
                    kinds=spec.kinds,
                    lease_seconds=spec.lease_seconds,
                    variants=spec.variants,
                )
        except OwnershipUnknown as exc:
            for item in batch:
                # One exception object per waiting thread: each raises and extends its own.
                item.finish(OwnershipUnknown(str(exc)))
        except BaseException as exc:  # every waiter must learn the outcome, then we go on
            for item in batch:
                item.finish(exc if isinstance(exc, TenureError) else TenureError(repr(exc)))
        else:
            for item in batch:
                item.finish(answers.get(item.lease.job_id))
        finally:
            # After the answers: a claimer that raises here has not kept anyone waiting.
            if spec is not None and self._claimer is not None:
                self._claimer.claimed(spec, leases, sent_at)
