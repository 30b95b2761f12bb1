"""The Store protocol: one method per ledger operation, implemented once per dialect.

A store speaks in domain types (`Job`, `Lease`, `Event`) and in JSON text it is handed; it never
raises a driver exception: connection trouble becomes `StoreUnavailable`, a constraint
violation `StoreConflict`, a statement the database cannot run `StoreBug` (each dialect's
`classify`). It reports a lost lease as a falsy result and leaves the raising of `LeaseLost` to
the ledger. `storage.sql.SqlStore` implements the half that both SQL dialects share.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from tenure.rates import RateClaim
from tenure.storage.budgets import BudgetStore
from tenure.storage.evidence import EvidenceStore
from tenure.storage.migrate import Track
from tenure.storage.recorder import EventRecorder
from tenure.storage.schedules import ScheduleStore
from tenure.storage.waits import SignalOutcome
from tenure.types import (
    JSON,
    Event,
    EventTotals,
    Job,
    JobState,
    Lease,
    OverdueStages,
    PurgeBatch,
    QueueFigure,
    Rollout,
    RolloutJob,
    Stage,
    StageKind,
    TenantRecord,
)
from tenure.waits import WaitOutcome, WaitRequest


@dataclass(frozen=True, slots=True)
class NewJob:
    """A validated job to insert; JSON fields are canonical text."""

    id: str
    kind: str
    tenant: str
    max_attempts: int
    idempotency_key: str | None
    payload_json: str
    payload_sha256: str
    run_at: datetime | None
    delay_seconds: float
    priority: int
    detail_json: str
    parent_id: str | None = None
    variant: str | None = None
    held: bool = False  # a tripped rollout's: `waiting` for the signal `release`
    labels_json: str | None = None  # what the submit set, canonical JSON
    traceparent: str | None = None
    principal: str | None = None
    budget_json: str | None = None  # its own budget (`tenure.budgets`), canonical JSON


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """A claim: for `owner_id`, of `kinds` (None: every kind), with a lease of `lease_seconds`,
    up to `limit` jobs (0: none); `only_ids` narrows it to jobs a limited claim chose.
    `pinned` ("kind@variant", "stable" for no variant): of a kind named there, only those
    variants are claimed (a code rollout's workers); other kinds, any variant.
    `rescue`: also take expired leases (and fail those of a last attempt). A worker asks for
    it once a second (`tenure.runtime.worker.RESCUE_INTERVAL`), not with every claim: on
    PostgreSQL the search reads every running row of the kinds, and while the MVCC horizon
    is held, every dead version of one too. SQLite always looks (its index on lease ends
    has no dead versions to step over). `rescue_shared`: the search takes turns among the
    claimers of the same kinds and variants, a fleet's workers: on PostgreSQL a rescue claim
    searches only when no other one did within a turn (0.8 s, by the database's clock), and
    a search that found an expired lease gives its turn back at once. The reading of the queue
    from its head (what a claimer's floor skips) takes the same turns: off its turn, a shared
    rescue starts at its floor, as a plain claim does; on it, one that came back full with a
    job its floor skips gives the turn back at once too."""

    owner_id: str
    kinds: Sequence[str] | None
    lease_seconds: float
    limit: int
    only_ids: Sequence[str] | None = None
    pinned: Sequence[str] = ()
    rescue: bool = True
    rescue_shared: bool = False

    @property
    def pinned_kinds(self) -> list[str]:
        return sorted({entry.rsplit("@", 1)[0] for entry in self.pinned})


# A statement that only publishes: no kinds, no room.
NO_CLAIM = ClaimRequest(owner_id="", kinds=(), lease_seconds=1.0, limit=0)


@dataclass(frozen=True, slots=True)
class Publish:
    """Results to publish, each only while its lease holds (canonical JSON texts, in order)."""

    leases: Sequence[Lease]
    results_json: Sequence[str]
    details_json: Sequence[str]


NOTHING_TO_PUBLISH = Publish(leases=(), results_json=(), details_json=())


@dataclass(frozen=True, slots=True)
class KeyedJob:
    """The job already holding an idempotency key."""

    id: str
    kind: str
    payload_sha256: str


class FenceStatus(enum.StrEnum):
    """A receiver's command for one key: running (or its receiver died), or done (stored)."""

    RUNNING = "running"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class FenceRecord:
    """What a receiver holds for one idempotency key."""

    status: FenceStatus
    token: int
    result: JSON
    age_seconds: float


@dataclass(frozen=True, slots=True)
class PrincipalFilter:
    """Jobs acting for `principal`, and with `prefix` for every principal starting with it."""

    principal: str
    prefix: str | None


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """A stored API key: its tenant, the SHA-256 of its secret, the principal it is bound to
    (None: a service key), when it was issued, whether it was revoked."""

    key_id: str
    tenant: str
    key_sha256: str
    principal: str | None
    created_at: datetime
    revoked: bool


@dataclass(frozen=True, slots=True)
class StageStart:
    """A step's or effect's write-ahead record: its place, name and kind, an effect's key,
    the event's detail, and the class's stage timeout (None: none)."""

    position: int
    name: str
    kind: StageKind
    effect_key: str | None
    detail_json: str
    timeout_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """A failed attempt: its error document, the delay before a retry (None: no retry), the
    event's detail, and a floor for the job's token (a receiver's highest: the next claim is
    above it; 0 for none)."""

    error_json: str
    retry_delay: float | None
    detail_json: str
    token_floor: int = 0


@dataclass(frozen=True, slots=True)
class NewSignal:
    """A signal to store once per job and name."""

    job_id: str
    name: str
    payload_json: str
    payload_sha256: str
    detail_json: str


@dataclass(frozen=True, slots=True)
class PurgeStep:
    """One bounded step of a purge: the next `scan` jobs after submission sequence `after`;
    ended jobs older than `older_than` seconds go, keyed ones only past `keep_keys`."""

    after: int
    scan: int
    older_than: float
    keep_keys: float


@dataclass(frozen=True, slots=True)
class FenceHighest:
    """A scope's highest accepted fence and the claim that sent it (None: not known)."""

    token: int
    holder: str | None


class FenceTx(Protocol):
    """The steps of one fence decision, inside a transaction holding the scope's lock."""

    def highest(self, scope: str) -> FenceHighest:
        """Lock the scope (creating it at 0) and return its highest accepted fence."""
        ...

    def get(self, scope: str, key: str) -> FenceRecord | None:
        """The record of `key` in `scope`, locked."""
        ...

    def begin(self, key: str, scope: str, token: int) -> None:
        """Mark `key` as running under `fence`."""
        ...

    def raise_highest(self, scope: str, token: int, holder: str | None) -> None:
        """highest := max(highest, fence); the holder is `holder` when the fence is higher, and
        bound to it when equal and none was known."""
        ...


class DatabaseStore(Protocol):
    """The database itself: where it is, its clock, its schema, its connections."""

    # Whether two writing statements can run at once (PostgreSQL), or take turns on one lock
    # (SQLite): a worker sends its results on two connections only where they can overlap.
    parallel_writes: bool

    @property
    def where(self) -> str:
        """The database in words for messages (a SQLite file's absolute path; PostgreSQL's
        hosts and database), never a password."""
        ...

    def write_refusal(self) -> str | None:
        """Why the database refuses writes now though it answers reads (a full disk), or
        None; /readyz reports it."""
        ...

    def migrate(self, only: Track | None = None) -> list[int]:
        """Apply missing migrations (with `only`, those of one track) under a lock; return the
        versions applied now."""
        ...

    def now(self) -> datetime:
        """The database's clock."""
        ...

    def close(self) -> None:
        """Release every connection. Idempotent."""
        ...


class JobStore(EventRecorder, Protocol):
    """Jobs: submitted, read, listed, their events and the wake-ups of their ends."""

    def submit(self, job: NewJob) -> bool:
        """Insert the job and its `job_submitted` event; False if its key was already used."""
        ...

    def find_by_key(self, tenant: str, idempotency_key: str) -> KeyedJob | None:
        """The job holding `idempotency_key` for `tenant`, if any."""
        ...

    def submit_many(self, jobs: Sequence[NewJob]) -> int:
        """Insert jobs sharing kind, tenant, attempts, priority and schedule, none with a key,
        with their events, atomically; return how many."""
        ...

    def listen(
        self,
        callback: Callable[[str], None],
        on_cancelled: Callable[[str, int], None] | None = None,
    ) -> Callable[[], None]:
        """Call `callback(kind)` when jobs of `kind` ('' for any) may have become claimable,
        and `on_cancelled(job_id, token)` when a job is cancelled (its token after the
        cancel); return the function that stops listening. Best effort: workers poll and
        renew as well."""
        ...

    def listen_ended(
        self,
        callback: Callable[[list[str]], None],
        on_listening: Callable[[bool], None] | None = None,
    ) -> Callable[[], None]:
        """Call `callback(job_ids)` when jobs end (succeed, fail for good, are cancelled);
        return the function that stops listening. `on_listening(True)` whenever the ends of
        every process are heard from then on, `(False)` when that stops. Best effort: waiters
        sweep as well (`ended_among`)."""
        ...

    def ended_among(self, job_ids: Sequence[str]) -> set[str]:
        """Which of `job_ids` have ended (one statement: the waiters' sweep)."""
        ...

    def get(self, job_id: str) -> Job | None:
        """The job, or None."""
        ...

    def list_jobs(
        self,
        state: JobState | None,
        kind: str | None,
        tenant: str | None,
        limit: int,
        after: str | None,
        principals: PrincipalFilter | None = None,
    ) -> list[Job]:
        """Jobs newest first, filtered, starting after the job `after`."""
        ...

    def events(self, job_id: str) -> list[Event]:
        """The job's events in order."""
        ...

    def children(self, job_id: str) -> list[Job]:
        """The jobs this job spawned, in submission order."""
        ...


class LeaseStore(Protocol):
    """Leases: claim, renew, publish, fail, release; cancel and requeue bump or reset them."""

    def claim(self, request: ClaimRequest) -> list[Lease]:
        """Settle expired leases and take up to `limit` claimable jobs, atomically."""
        ...

    def extend_many(self, leases: Sequence[Lease], seconds: Sequence[float]) -> dict[str, datetime]:
        """Renew the leases still held; return the new lease end of each renewed job id."""
        ...

    def save_step(self, lease: Lease, step: int, checkpoint_json: str, detail_json: str) -> bool:
        """Advance the cursor and store the checkpoint, if the lease still holds."""
        ...

    def limited_claim(
        self,
        request: ClaimRequest,
        kind_limits: Mapping[str, int],
        rates: RateClaim | None = None,
    ) -> list[Lease]:
        """`claim`, keeping each tenant (its stored limit) and kind (`kind_limits`) within its
        concurrency limit and each rate key (`rates`) within its rate, serialised against other
        such claims; `rates.next_in` tells when a key held back allows its next claim."""
        ...

    def hold_rate_key(self, key: str, seconds: float) -> None:
        """No claim of the rate key for `seconds` from the database's now."""
        ...

    def release_if_raised(self, job_id: str, seen: Sequence[tuple[str, str, float]]) -> bool:
        """After a job was held for its run's budget: if its chain's ceilings differ from
        those `seen` (`Budget.ceilings`) and the run has room, the jobs held from this one
        down are due now (True); a raise in flight is waited for."""
        ...

    def exchange(self, publish: Publish, request: ClaimRequest) -> tuple[set[str], list[Lease]]:
        """Mark succeeded each job whose lease still holds (with its result and event), then
        claim as `request` says, atomically: (completed ids, new leases)."""
        ...

    def fail(self, lease: Lease, failure: AttemptFailure) -> JobState | None:
        """Fail the attempt: queued again after `retry_delay` if attempts remain, else failed.

        None when the lease no longer holds.
        """
        ...

    def release(self, lease: Lease, delay: float = 0.0, detail_json: str = "{}") -> bool:
        """Give the job back without spending the attempt, if the lease still holds: due again
        in `delay` seconds; `detail_json` is its `job_released` event's detail."""
        ...

    def cancel(self, job_id: str) -> bool:
        """Cancel a queued or running job and bump its token in one write; False otherwise."""
        ...

    def requeue(self, job_id: str) -> bool:
        """Make a failed or cancelled job claimable again; False otherwise."""
        ...


class StageStore(Protocol):
    """Stages: the write-ahead records of steps and effects."""

    def stages(self, job_id: str) -> list[Stage]:
        """The job's recorded steps and effects, by position."""
        ...

    def stage_start(self, lease: Lease, stage: StageStart) -> bool:
        """Write-ahead: record the stage (and effect) as started, if the lease still holds."""
        ...

    def stage_raised(self, lease: Lease, position: int, detail_json: str) -> bool:
        """A step's function raised: forget its `started` record (it is not in doubt) and
        write `step_failed`, if the lease still holds."""
        ...

    def stage_done(
        self,
        lease: Lease,
        position: int,
        result_json: str,
        detail_json: str,
        checkpoint_json: str | None = None,
    ) -> bool:
        """Record the stage's result and advance the cursor in one write, if the lease holds."""
        ...

    def overdue_stages(self, by_tenant: bool) -> list[OverdueStages]:
        """Steps and effects of running jobs still started past their stage timeout."""
        ...


class WaitStore(Protocol):
    """Runs that wait: the guarded wait and the signals that wake it."""

    def wait(self, lease: Lease, request: WaitRequest) -> WaitOutcome | None:
        """Settle or suspend a wait in one transaction (see `storage.waits`); None if the
        lease no longer holds."""
        ...

    def signal(self, signal: NewSignal) -> SignalOutcome:
        """Store a job's signal once per name, wake the job if it waits for it."""
        ...


class TenantStore(Protocol):
    """Tenants, their API keys and limits, and the labels job classes declare."""

    def tenant_limits(self) -> dict[str, int]:
        """Every tenant's concurrency limit."""
        ...

    def set_tenant_limit(self, tenant: str, limit: int | None) -> None:
        """Set, or with None remove, a tenant's concurrency limit."""
        ...

    def declare_labels(self, kinds_json: str) -> None:
        """Store the labels each job class declares (a JSON object of kind -> labels)."""
        ...

    def declared_labels(self) -> dict[str, dict[str, str | None]]:
        """What each kind's job class declared, by kind."""
        ...

    def create_tenant(self, name: str, key_id: str, key_sha256: str) -> bool:
        """Create the tenant with its first key; False if the tenant exists (nothing written)."""
        ...

    def add_api_key(
        self, tenant: str, key_id: str, key_sha256: str, principal: str | None = None
    ) -> bool:
        """Give an existing tenant another key (bound to `principal`, or a service key);
        False if there is no such tenant."""
        ...

    def api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id, revoked or not."""
        ...

    def api_keys(self, tenant: str | None) -> list[ApiKeyRecord]:
        """The keys of `tenant` (None: of every tenant), revoked ones included."""
        ...

    def revoke_api_keys(self, tenant: str, key_id: str | None) -> int:
        """Revoke the tenant's live keys (or the one named); return how many were revoked."""
        ...

    def tenants(self) -> list[TenantRecord]:
        """Every tenant, by name."""
        ...


class RetentionStore(Protocol):
    """Retention: what a purge would delete, and one bounded step of it."""

    def purge_preview(self, older_than: float, keep_keys: float) -> tuple[int, int]:
        """How many jobs a purge with these ages would delete now, and keep for their keys."""
        ...

    def purge_batch(self, step: PurgeStep) -> PurgeBatch:
        """Look at the next `scan` jobs after submission number `after`; delete the terminal
        ones older than `older_than` seconds (keyed ones: older than `keep_keys` as well)
        with their events, stages and effects, in one transaction."""
        ...


class MetricsStore(Protocol):
    """The figures /metrics and `tenure status` read."""

    def count_by_state(self, kind: str | None, tenant: str | None) -> dict[JobState, int]:
        """How many jobs are in each state."""
        ...

    def queue_figures(self, by_tenant: bool) -> list[QueueFigure]:
        """Job counts and lease figures per kind (and tenant) and state, at one database time."""
        ...

    def event_totals(self, by_tenant: bool) -> list[EventTotals]:
        """Recovery event counts per kind (and tenant)."""
        ...


class RolloutStore(BudgetStore, Protocol):
    """Rollouts and the cost their jobs report (`report_cost`, with the budgets it charges)."""

    def start_rollout(self, rollout: Rollout) -> bool:
        """Store the kind's rollout; False if the kind has one (nothing written)."""
        ...

    def rollouts(self) -> list[Rollout]:
        """Every rollout, by kind."""
        ...

    def stop_rollout(self, kind: str) -> bool:
        """Remove the kind's rollout; False if it had none."""
        ...

    def trip_rollout(self, kind: str, trip_json: str) -> bool:
        """Trip the kind's active rollout; True for the one call that did it."""
        ...

    def job_cost(self, job_id: str) -> tuple[int, float] | None:
        """Tokens and dollars the job's attempts reported, summed (None: no such job)."""
        ...

    def rollout_jobs(self, kind: str, tenant: str | None = None) -> list[RolloutJob]:
        """The kind's jobs created since its rollout started (of `tenant`, or of all), with
        their costs and steps in doubt."""
        ...


class FenceStore(DatabaseStore, Protocol):
    """The fence receiver (`FenceGuard`): all it needs of a database."""

    def fence_transaction(self) -> AbstractContextManager[FenceTx]:
        """One transaction for a fence decision (check and record together)."""
        ...

    def fence_finish(self, scope: str, key: str, token: int, result_json: str) -> bool:
        """Store the result of a running key; False if it is no longer ours."""
        ...

    def fence_forget(self, scope: str, key: str, token: int) -> None:
        """Drop a running key whose function failed: nothing is stored."""
        ...

    def fence_lookup(self, key: str, scope: str | None) -> FenceRecord | None:
        """The record of `key` in `scope` (None: the newest in any scope), without locking."""
        ...


class Store(
    JobStore,
    LeaseStore,
    StageStore,
    WaitStore,
    TenantStore,
    RetentionStore,
    MetricsStore,
    RolloutStore,
    FenceStore,
    EvidenceStore,
    ScheduleStore,
    Protocol,
):
    """What the ledger needs from a database: every aggregate's part. See the module
    docstring."""
