"""Runs that wait: signals, child jobs, and the guarded wait that settles or suspends a job."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Mapping
from typing import Protocol

from tenure.budgets import Budget, BudgetExhausted, check_units
from tenure.errors import (
    IdempotencyConflict,
    InvalidArgument,
    SignalConflict,
    TerminalJob,
)
from tenure.ledger.core import LedgerCore, Part, event_detail
from tenure.ledger.leases import Leases
from tenure.ledger.reading import Reading
from tenure.ledger.submission import Submission
from tenure.logs import emit
from tenure.options import SubmitOptions
from tenure.storage.base import JobStore, NewSignal, RolloutStore, WaitStore
from tenure.storage.waits import SignalOutcome
from tenure.types import JSON, EventType, Job, JobState, Lease
from tenure.validation import check_job_id, check_name, encode_json
from tenure.waits import HELD_SIGNAL, WaitOutcome, WaitRequest

log = logging.getLogger("tenure")


def child_key(parent_id: str, name: str) -> str:
    """The idempotency key of a parent's child: the same on every attempt of the parent."""
    return f"tenure-child:{parent_id}:{name}"


class WaitParts(WaitStore, JobStore, RolloutStore, Protocol):
    """What `Waits` uses of the store: waits, signals, the jobs (children) waited for, and
    the budgets a spawn stays within."""


class Waits(Part[WaitParts]):
    """`signal`, `children`, and what a waiting handler's context asks of the ledger."""

    def __init__(
        self,
        core: LedgerCore,
        store: WaitParts,
        submission: Submission,
        leases: Leases,
        reading: Reading,
    ) -> None:
        super().__init__(core, store)
        self.submission = submission
        self.leases = leases
        self.reading = reading

    def signal(self, job_id: str, name: str, payload: JSON = None) -> bool:
        """Send the job a signal: stored once per job and name, the first wins.

        True when this call stored it; False for a repeat with the same payload (answered as
        the first, also once the job has ended). Raises `SignalConflict` for a different
        payload under a stored name (ended or not), `TerminalJob` for a new name sent to a job
        that has ended,
        `JobNotFound` for an unknown id. A signal may
        arrive before the job waits for it; a job waiting for it is woken.
        """
        job_id = check_job_id(job_id)
        name = check_name(name, "signal name")
        encoded = encode_json(payload, "signal payload", self.core.max_payload_bytes)
        detail = event_detail(name=name, payload_sha256=encoded.sha256, payload_bytes=encoded.size)
        outcome = self.store.signal(NewSignal(job_id, name, encoded.text, encoded.sha256, detail))
        if outcome is SignalOutcome.NO_JOB:
            job = self.reading.get(job_id)
            raise TerminalJob(f"job {job_id} is already {job.state.value}; it takes no signals")
        if outcome is SignalOutcome.CONFLICT:
            raise SignalConflict(
                f"job {job_id} already has a signal {name!r} with a different payload: the "
                "first signal of a name wins; send a new name for a new decision"
            )
        emit(log, logging.INFO, "signal_received", job=job_id, signal=name, outcome=outcome)
        return outcome is SignalOutcome.STORED

    def release_held(self, kind: str) -> int:
        """Send `release` to every job of `kind` a tripped `hold` rollout holds: they run (as
        stable). Returns how many were released."""
        kind = check_name(kind, "kind")
        released, after = 0, None
        while True:
            page = self.store.list_jobs(JobState.WAITING, kind, None, 500, after)
            for job in page:
                state = job.wait
                if state is not None and state.held and state.signal == HELD_SIGNAL:
                    released += self.signal(job.id, HELD_SIGNAL, None)
            if len(page) < 500:
                return released
            after = page[-1].id

    def children(self, job_id: str) -> builtins.list[Job]:
        """The jobs this job spawned (`ctx.spawn`), in submission order."""
        job_id = check_job_id(job_id)
        return self.reading.of_known_job(job_id, self.store.children(job_id))

    def spawn(
        self,
        lease: Lease,
        name: str,
        kind: str,
        payload: JSON,
        *,
        max_attempts: int | None = None,
        priority: int | None = None,
        principal: str | None = None,
        budget: Mapping[str, float] | None = None,
    ) -> tuple[str, bool]:
        """Submit the lease's job's child `name` once: its key is stable across the parent's
        attempts, its tenant the parent's, its principal the parent's unless `principal` (one
        the caller checked is no wider), its `budget` at most what the run has left (a run
        with nothing left spawns no more: `BudgetExhausted`). Returns its id and whether it
        is new."""
        requested = None if budget is None else check_units(budget)
        left = Budget.of(self.store.budget(lease.job_id)) if lease.budgeted else None
        if left is not None and left.exhausted:
            raise BudgetExhausted("the run's budget is spent: it spawns no more")
        if left is not None:
            requested = left.clamp(requested)
        try:
            options = SubmitOptions(
                idempotency_key=child_key(lease.job_id, name),
                tenant=lease.tenant,
                max_attempts=max_attempts,
                priority=0 if priority is None else priority,
                principal=lease.principal if principal is None else principal,
                budget=requested,
            )
            child_id, new = self.submission.submit_or_find(
                kind, payload, options, parent_id=lease.job_id
            )
        except IdempotencyConflict:
            raise InvalidArgument(
                f"child {name!r} of job {lease.job_id} was spawned before with another kind "
                "or payload: a spawn must keep its name, kind and payload across attempts"
            ) from None
        if new:
            self.leases.record(lease, EventType.CHILD_SPAWNED, child=child_id, kind=kind, name=name)
        return child_id, new

    def wait_on(self, lease: Lease, request: WaitRequest) -> WaitOutcome:
        """Settle the wait if its condition holds (or its deadline passed), else suspend the
        job, while the lease holds: `LeaseLost` otherwise."""
        outcome = self.leases.guard(lease, "wait", lambda: self.store.wait(lease, request))
        if outcome is None:
            self.leases.lost(lease, "wait")
        return outcome
