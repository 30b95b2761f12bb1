"""Frozen value types shared by the ledger, the stores and the runtime."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# CancelReason lives with JobCancelled (errors imports nothing of tenure); named here too.
from tenure.errors import CancelReason as CancelReason  # noqa: PLC0414 (a re-export)
from tenure.errors import renamed
from tenure.evidence import Evidence
from tenure.wait_state import WaitState

JSON = Any
"""A JSON value: dict, list, str, int, float, bool or None."""


class JobState(enum.StrEnum):
    """Where a job is in its life. The last three are terminal."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for succeeded, failed and cancelled."""
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class EventType(enum.StrEnum):
    """What an event of a job's flight recorder (the events table) says happened."""

    JOB_SUBMITTED = "job_submitted"
    JOB_CLAIMED = "job_claimed"
    LEASE_EXPIRED = "lease_expired"
    HEARTBEAT_LOST = "heartbeat_lost"
    OWNERSHIP_UNKNOWN = "ownership_unknown"
    STEP_STARTED = "step_started"
    STEP_DONE = "step_done"
    STEP_SAVED = "step_saved"
    STEP_IN_DOUBT = "step_in_doubt"
    STEP_FAILED = "step_failed"
    TOOL_REQUEST_STARTED = "tool_request_started"
    TOOL_OUTCOME_UNKNOWN = "tool_outcome_unknown"
    RESULT_REJECTED = "result_rejected"
    JOB_SUCCEEDED = "job_succeeded"
    JOB_FAILED = "job_failed"
    JOB_RETRY_SCHEDULED = "job_retry_scheduled"
    JOB_RELEASED = "job_released"
    JOB_CANCELLED = "job_cancelled"
    JOB_REQUEUED = "job_requeued"
    RESUME_REFUSED = "resume_refused"
    CHECKPOINT_MIGRATED = "checkpoint_migrated"
    JOB_WAITING = "job_waiting"
    SIGNAL_RECEIVED = "signal_received"
    CHILD_SPAWNED = "child_spawned"
    JOB_RESUMED = "job_resumed"
    EVIDENCE_RETRIEVED = "evidence_retrieved"
    EFFECT_REFUSED = "effect_refused"
    """A receiver refused the effect's command: a stale fence, or a second holder of one."""
    SCHEDULE_FIRED = "schedule_fired"
    """The job is a schedule's slot (or an operator's run now): the slot's time."""
    SCHEDULE_MISSED = "schedule_missed"
    """Slots of the job's schedule were missed before it (how many, and since when)."""
    BUDGET_RAISED = "budget_raised"
    """An operator raised the budget of the job's run: the units added, the held jobs released."""


@dataclass(frozen=True, slots=True)
class Job:
    """A job as stored, read at one moment."""

    id: str
    kind: str
    tenant: str
    state: JobState
    owner_id: str | None
    lease_until: datetime | None
    token: int
    """The job's fencing token: raised by every claim, carried by every write and effect of
    the attempt that holds it (`Lease.token`, `Effect.token`; `fencing_token` on the wire)."""
    heartbeat_at: datetime | None
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    payload: JSON
    payload_sha256: str
    step: int
    checkpoint: JSON
    result: JSON
    error: JSON
    run_after: datetime
    priority: int
    created_at: datetime
    updated_at: datetime
    parent_id: str | None = None
    wait: WaitState | None = None
    """What a `waiting` job waits for (a signal, child jobs or a timer, with its deadline by
    the database's clock); kept after the wait until the next one."""
    variant: str | None = None
    """The rollout variant the job was given at submit (None: the stable one)."""
    labels: dict[str, str] | None = None
    """The labels its submit set (keys its job class leaves to the submitter; the class's
    fixed labels are the class's, not stored per job)."""
    traceparent: str | None = None
    """The W3C trace context it was submitted in: its attempts are spans of that trace."""
    principal: str | None = None
    """Whom the job acts for (`user:42`), as its submit said; a child's is its parent's or a
    narrower one. Shown, never interpreted by tenure: the app's permission functions are."""
    version: int | None = None
    """The version of its job class when it was submitted (as the app's classes declared it;
    None when no app had declared the kind)."""
    evidence: tuple[Evidence, ...] = ()
    """The references it recorded (`ctx.evidence`, `ctx.retrieve`), in order: read by
    `ledger.get`, empty in listings."""

    @property
    def terminal(self) -> bool:
        """True once the job is succeeded, failed or cancelled."""
        return self.state.terminal

    @property
    def fencing_token(self) -> int:
        """Deprecated name of `token` (removed in 0.3)."""
        renamed("Job.fencing_token", "Job.token")
        return self.token


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to act for one job, granted by one claim.

    `token` is the job's fencing token at the claim: every write for the job and every effect it
    sends carries it, and a higher token always wins. It is at least the database clock in
    microseconds at the claim, so it never repeats even where the database lost its recent
    history (invariant 16). `claim` is this claim's identity, unique per claim, sent with the
    token to receivers (`X-Execution-Claim`).
    """

    job_id: str
    kind: str
    tenant: str
    owner_id: str
    token: int
    attempt: int
    max_attempts: int
    lease_seconds: float
    claimed_at: datetime
    lease_until: datetime
    payload: JSON = field(repr=False)
    step: int = 0
    checkpoint: JSON = field(default=None, repr=False)
    wait: WaitState | None = None
    variant: str | None = None
    labels: dict[str, str] | None = None
    traceparent: str | None = None
    principal: str | None = None
    claim: str = ""
    fresh: bool = False
    """True when no claim or cancel of the job came before this one: nothing is recorded yet."""
    budgeted: bool = False
    """True when the job or an ancestor has a budget (`tenure.budgets`): its start, spawns and
    reported costs read the run's chain; other jobs never do."""


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a job's flight recorder. `detail` never holds payload content."""

    seq: int
    job_id: str
    type: EventType
    at: datetime
    token: int | None
    owner_id: str | None
    detail: dict[str, Any]
    version: int | None = None
    """The job class's version the job was submitted under (`Job.version`)."""
    idempotency_key: str | None = None
    """The job's idempotency key; on an effect's events, the effect's key."""
    timeline: int | None = None
    """The PostgreSQL WAL timeline the event was written on (a failover starts a new one);
    None on SQLite and for events written before schema version 15."""


class StageKind(enum.StrEnum):
    """A step is safe to re-run; an effect acts on the world and is fenced and keyed; a wait
    (a signal, child jobs, a timer) suspends the job without a lease."""

    STEP = "step"
    EFFECT = "effect"
    WAIT = "wait"


class StageStatus(enum.StrEnum):
    """`started` without a result at recovery means the stage is in doubt."""

    STARTED = "started"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class Stage:
    """One recorded step or effect of a job, in handler order."""

    position: int
    name: str
    kind: StageKind
    status: StageStatus
    token: int
    result: JSON = field(repr=False)


@dataclass(frozen=True, slots=True)
class ExtendResult:
    """What a batched renewal did: new lease ends for the leases kept, ids of those lost."""

    renewed: dict[str, datetime]
    lost: list[str]


@dataclass(frozen=True, slots=True)
class PurgeBatch:
    """One bounded purge transaction: what it looked at and what it deleted."""

    last_seq: int
    scanned: int
    reached_new: bool
    jobs: int
    stages: int
    effects: int
    events: int
    kept_for_keys: int


@dataclass(slots=True)
class PurgeReport:
    """What `Ledger.purge` removed, summed over its batches."""

    jobs: int = 0
    stages: int = 0
    effects: int = 0
    events: int = 0
    kept_for_keys: int = 0
    batches: int = 0
    retrievals: int = 0


@dataclass(frozen=True, slots=True)
class Effect:
    """Handed to an effect's function: send `key` and `token` with the request.

    `key` is `tool-job:{job_id}:{name}`, the same on every attempt; `token` is the job's current
    fencing token; `in_doubt` is True when an earlier attempt started this effect and never
    recorded its result (ask the receiver, or resend with the same key). `job_id` is the scope
    a receiver keeps the highest fence for (`tenure.fence.headers(fx)` sends all of them).
    """

    name: str
    key: str
    token: int
    in_doubt: bool
    job_id: str
    traceparent: str | None = None
    """The effect's span, for the receiver to continue the trace (None without tracing)."""
    claim: str | None = None
    """The identity of the claim that holds `token` (`Lease.claim`): a receiver binds the
    token it accepts to it and refuses a second holder of the same token."""

    @property
    def fence(self) -> int:
        """Deprecated name of `token` (removed in 0.3)."""
        renamed("Effect.fence", "Effect.token")
        return self.token


class RolloutState(enum.StrEnum):
    """Whether a rollout's breaker has tripped (it trips once; a stop deletes the rollout)."""

    ACTIVE = "active"
    TRIPPED = "tripped"


class OnTrip(enum.StrEnum):
    """What a tripped rollout does with the new jobs the candidate would have had."""

    STABLE = "stable"
    """They get the stable variant."""
    HOLD = "hold"
    """They wait (held) for an operator's `tenure rollout release`."""


class WorkerCount(enum.StrEnum):
    """A worker's counter (its lease keeper's): `Worker.stats`, and the metric
    `tenure_worker_<name>`, by kind and labels for those of jobs (`per_job`)."""

    CLAIMED = "claimed"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # its last attempt
    RETRIED = "retried"  # failed, with attempts left
    RELEASED = "released"  # given back at a shutdown
    HEARTBEATS = "heartbeats"  # leases renewed
    EXTENSION_FAILURES = "extension_failures"  # leases whose renewal failed
    LEASES_LOST = "leases_lost"
    LEASES_UNCONFIRMED = "leases_unconfirmed"
    STAGE_TIMEOUTS = "stage_timeouts"
    MAX_LEASE_LIFETIME = "max_lease_lifetime"
    CANCELS_HEARD = "cancels_heard"
    STEPS_IN_DOUBT = "steps_in_doubt"
    RESULTS_REJECTED = "results_rejected"
    RENEWAL_BATCHES = "renewal_batches"
    """Renewal statements sent: the worker's alone, not any job's."""

    @property
    def per_job(self) -> bool:
        """True for a count of what happened to jobs (kept by kind and labels too)."""
        return self is not WorkerCount.RENEWAL_BATCHES


@dataclass(frozen=True, slots=True)
class Rollout:
    """A kind's rollout: new jobs of the kind get `variant` (for `tenants`, or everyone when
    None; `percent` of them, by a stable share of the job id); the breaker trips it once."""

    kind: str
    variant: str
    tenants: list[str] | None
    percent: float
    max_failure_rate: float | None
    max_cost_ratio: float | None
    min_jobs: int
    on_trip: OnTrip
    state: RolloutState
    started_at: datetime
    tripped_at: datetime | None = None
    trip: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RolloutJob:
    """One job of a rollout's kind, as its comparison reads it."""

    variant: str | None
    state: JobState
    attempt: int
    created_at: datetime
    updated_at: datetime
    tokens: int
    usd: float
    in_doubt: int


# -- read models: the figures operations and metrics read -----------------------------------


@dataclass(frozen=True, slots=True)
class TenantRecord:
    """A tenant and how many of its keys are live."""

    name: str
    created_at: datetime
    active_keys: int
    revoked_keys: int


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """An API key as operators see it: never its secret. `principal` is what the key is bound
    to (`user:42`, or `user:42/` for it and every principal under it); None: a service key,
    which may name any principal of its tenant."""

    key_id: str
    tenant: str
    principal: str | None
    created_at: datetime
    revoked: bool


@dataclass(frozen=True, slots=True)
class QueueFigure:
    """Jobs of one kind (and tenant, when asked) in one state, with their lease figures.

    Ages are seconds by the database's clock; None where no job of the group has one.
    """

    kind: str
    tenant: str | None
    labels: dict[str, str] | None
    state: JobState
    jobs: int
    expired_leases: int
    oldest_heartbeat_age: float | None
    least_lease_remaining: float | None
    oldest_due_age: float | None


@dataclass(frozen=True, slots=True)
class EventTotals:
    """How many recovery events the jobs of one kind (and tenant) have recorded."""

    kind: str
    tenant: str | None
    labels: dict[str, str] | None
    leases_expired: int
    jobs_reclaimed: int
    extension_failures: int
    results_rejected: int
    steps_in_doubt: int
    ownership_unknown: int


@dataclass(frozen=True, slots=True)
class OverdueStages:
    """Steps and effects running past their stage timeout, of one kind (and tenant, labels)."""

    kind: str
    tenant: str | None
    labels: dict[str, str] | None
    stages: int
    most_overdue_seconds: float


@dataclass(frozen=True, slots=True)
class RetrievalTotals:
    """One retriever's lookups since the events began: cache hits, misses (a search ran), and
    refs its recheck dropped."""

    retriever: str
    hits: int
    misses: int
    dropped: int
