"""Group commit: the results of many handler threads go to the database in one statement.

A handler thread hands its result over and goes on. A committer thread takes everything that
arrived while the previous statement ran and publishes it with one statement: under load each
statement carries many jobs, and an idle worker adds no delay (nothing waits to fill a batch).
Every job still gets its own answer, as a call on the committer's thread: published,
`LeaseLost`, or `OwnershipUnknown`.

When the worker has free slots, the same statement also claims its next jobs
(`LeasePort.complete_and_claim`): a busy worker then makes one round trip per batch, not two.
On PostgreSQL two committer threads each take what waits when they are free: while one
statement runs, the next batch goes out on the other's connection (SQLite runs one: its writes
take turns on one lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import OwnershipUnknown, TenureError
from tenure.port import LeasePort
from tenure.runtime.supervisor import Supervisor
from tenure.types import JSON, Lease

# Results per statement: bounds the statement's size, not the wait.
_MAX_BATCH = 500
# Statements in flight at once where the database runs writes in parallel. With one, the
# worker waits for each round trip while both the database and the worker have CPU to spare; a
# second fills that gap (measured in issue 20: one process drained 25% faster, with larger
# batches); a third added nothing. On SQLite writes take turns on one lock: there a second
# committer only puts the busiest process in the queue twice (its share grew, others starved).
_PARALLEL_COMMITTERS = 2


@dataclass(frozen=True)
class ClaimSpec:
    """Slots a claim may fill (already reserved), and for which kinds and lease."""

    owner_id: str
    kinds: Sequence[str]
    lease_seconds: float
    limit: int
    variants: Mapping[str, Sequence[str]] | None = None
    rescue: bool = True


class Claimer(Protocol):
    """The worker's side: reserve free slots for a claim, then start what it returned."""

    def claims_with_results(self) -> bool: ...

    def reserve_claim(self) -> ClaimSpec | None: ...

    def claimed(self, spec: ClaimSpec, leases: list[Lease], sent_at: float) -> None: ...


Answer = Callable[[BaseException | None], None]


class _Pending:
    """One result on its way, and whom to tell what became of it (once)."""

    __slots__ = ("answer", "finished", "lease", "result")

    def __init__(self, lease: Lease, result: JSON, answer: Answer) -> None:
        self.lease = lease
        self.result = result
        self.answer = answer
        self.finished = False

    def finish(self, error: BaseException | None) -> None:
        if not self.finished:
            self.finished = True
            self.answer(error)


class Committer:
    """`complete(lease, result)` from any thread; one statement per batch on its own thread."""

    def __init__(
        self,
        port: LeasePort,
        supervisor: Supervisor,
        claimer: Claimer | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._port = port
        self._clock = clock
        self._supervisor = supervisor
        self._claimer = claimer
        self._pending: list[_Pending] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._in_flight = 0
        self._idle = threading.Event()  # nothing waits and no statement runs
        self._idle.set()
        self._threads: list[threading.Thread] = []
        self.batches = 0

    def start(self) -> None:
        """Start the committer threads (idempotent)."""
        committers = _PARALLEL_COMMITTERS if self._port.parallel_writes else 1
        if not self._threads:
            self._threads = [self._supervisor.spawn("commit", self._run) for _ in range(committers)]

    @property
    def claims_soon(self) -> bool:
        """True while results wait or a statement runs: the next statement will claim too."""
        return (
            self._claimer is not None
            and (self._in_flight > 0 or bool(self._pending))
            and self._claimer.claims_with_results()
        )

    def wait_idle(self, timeout: float) -> None:
        """Wait until nothing waits and no statement runs (or `timeout` passes)."""
        self._idle.wait(timeout)

    def hand_over(self, lease: Lease, result: JSON, answer: Answer) -> bool:
        """Queue `result` for `lease` for the next statement and return at once. `answer` is
        called once, on the committer's thread, with None (published) or the error
        `Ledger.complete` would have raised: it must be quick. False when the committer is
        stopping: nothing was queued, write it yourself."""
        with self._cond:
            if self._stopping:
                return False
            self._pending.append(_Pending(lease, result, answer))
            if self._idle.is_set():
                self._idle.clear()
            self._cond.notify()
        return True

    def complete(self, lease: Lease, result: JSON) -> None:
        """Publish `result` for `lease` and wait, raising what `Ledger.complete` would raise."""
        answered = threading.Lock()  # a plain lock the answer releases: cheaper than an Event
        answered.acquire()
        answers: list[BaseException | None] = []

        def answer(error: BaseException | None) -> None:
            answers.append(error)
            answered.release()

        if not self.hand_over(lease, result, answer):
            self._port.complete(lease, result)
            return
        answered.acquire()
        if answers[0] is not None:
            raise answers[0]

    def stop(self) -> None:
        """Publish what is waiting, then stop; later completes write directly."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()

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
                    self._in_flight += 1
                    self.batches += 1
                try:
                    self._publish(batch)
                finally:
                    with self._cond:
                        self._in_flight -= 1
                        if not self._in_flight and not self._pending:
                            self._idle.set()
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
        outcomes = [(item.lease, item.result) for item in batch]
        spec: ClaimSpec | None = None
        leases: list[Lease] = []
        sent_at = self._clock.monotonic()
        try:
            if self._claimer is not None and not self._stopping:
                spec = self._claimer.reserve_claim()
            if spec is None:
                answers = self._port.complete_many(outcomes)
            else:
                answers, leases = self._port.complete_and_claim(
                    outcomes,
                    spec.owner_id,
                    limit=spec.limit,
                    kinds=spec.kinds,
                    lease_seconds=spec.lease_seconds,
                    variants=spec.variants,
                    rescue=spec.rescue,
                    rescue_shared=True,
                )
        except OwnershipUnknown as exc:
            for item in batch:
                # One exception object per waiting thread: each raises and extends its own.
                item.finish(OwnershipUnknown(str(exc)))
        except BaseException as exc:  # every waiter must learn the outcome, then we go on
            for item in batch:
                item.finish(exc if isinstance(exc, TenureError) else TenureError(repr(exc)))
        else:
            _answer_all(batch, answers)
        finally:
            # After the answers: a claimer that raises here has not kept anyone waiting.
            if spec is not None and self._claimer is not None:
                self._claimer.claimed(spec, leases, sent_at)


def _answer_all(batch: list[_Pending], answers: Mapping[str, TenureError | None]) -> None:
    """Give every item its answer; an answer that raises is raised once all were given."""
    failure: BaseException | None = None
    for item in batch:
        try:
            item.finish(answers.get(item.lease.job_id))
        except BaseException as exc:  # the supervisor stops the worker; the rest still hear
            failure = failure or exc
    if failure is not None:
        raise failure
