"""The JSON shapes of the HTTP API (they are the OpenAPI document's schemas)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field

from tenure.evidence import MAX_PRINCIPAL_LENGTH
from tenure.options import SUBMIT_OPTION_NAMES, SubmitOptions
from tenure.types import JobState
from tenure.validation import (
    INT32_MAX,
    INT32_MIN,
    MAX_NAME_LENGTH,
    MAX_READABLE_DEPTH,
    json_depth_exceeds,
)
from tenure.wait_state import WaitState


def readable(value: Any) -> Any:
    """A stored JSON value, or in its place a note when it nests too deep to be served (older
    versions accepted such values): one job must not break a listing."""
    if json_depth_exceeds(value, MAX_READABLE_DEPTH):
        return {"tenure_unreadable": f"nested more than {MAX_READABLE_DEPTH} levels deep"}
    return value


StoredJson = Annotated[Any, AfterValidator(readable)]


class SubmitRequest(BaseModel):
    """A job to run. `tenant` is for the admin key only; a tenant key submits to its own."""

    # strict: "3" or true is not a number of attempts; JSON's own types only.
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    payload: Any = Field(
        default_factory=dict,
        description="any JSON value, at most 1 MiB encoded; {} when left out (as `tenure submit`)",
    )
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_LENGTH)
    max_attempts: int | None = Field(default=None, ge=1, le=INT32_MAX)
    priority: int = Field(default=0, ge=INT32_MIN, le=INT32_MAX, description="higher runs first")
    tenant: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_LENGTH)
    labels: dict[str, str] | None = Field(
        default=None,
        description="label keys the kind's job class leaves to the submitter (at most 8, "
        "values of 1 to 64 printable characters)",
    )
    principal: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PRINCIPAL_LENGTH,
        description="whom the job acts for (e.g. user:42), as the app's permission functions "
        "understand it; no control characters",
    )
    budget: dict[str, float] | None = Field(
        default=None,
        description='what the run may spend, in the app\'s units (e.g. {"usd": 5, "calls": 50}): '
        "1 to 16 lowercase unit names, amounts from 0 to 1e15; its handlers report spend with "
        "ctx.report_cost",
    )

    def options(self, **decided: Any) -> SubmitOptions:
        """The body's submit options (each field of both, by its name), with what the request
        decided besides the body (the tenant, the key, the trace) over them."""
        named = {name: getattr(self, name) for name in SUBMIT_OPTION_NAMES & self.model_fields_set}
        return SubmitOptions(**{**named, **decided})


class JobRef(BaseModel):
    """A job's id and state: the answer to submit, cancel and requeue."""

    id: str
    state: JobState


def _wait_document(wait: object) -> object:
    """A job's typed wait as the document the database keeps (the wire's shape)."""
    return dict(wait.document) if isinstance(wait, WaitState) else wait


class JobOut(BaseModel):
    """A job as stored, read at one moment."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: str
    tenant: str
    state: JobState
    owner_id: str | None
    lease_until: datetime | None
    # The wire keeps its name: `Job.token` in Python.
    fencing_token: int = Field(validation_alias=AliasChoices("token", "fencing_token"))
    heartbeat_at: datetime | None
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    payload: StoredJson
    payload_sha256: str
    step: int
    checkpoint: StoredJson
    result: StoredJson
    error: StoredJson
    run_after: datetime
    priority: int
    created_at: datetime
    updated_at: datetime
    parent_id: str | None = None
    wait: Annotated[dict[str, Any] | None, BeforeValidator(_wait_document)] = None
    variant: str | None = None
    labels: dict[str, str] | None = None
    traceparent: str | None = None
    principal: str | None = None
    version: int | None = None


class EvidenceOut(BaseModel):
    """One reference a job recorded (never content): `ref` holds the fields of a
    DocumentRef (`type` document), CodeResult (code) or MediaRef (media)."""

    seq: int
    type: str
    ref: dict[str, Any]
    retriever: str | None
    token: int
    attempt: int
    at: datetime


class EvidenceList(BaseModel):
    """A job's evidence, in the order recorded."""

    evidence: list[EvidenceOut]


class SignalOut(BaseModel):
    """A signal's answer: `stored` is false for a repeat of the first (same payload), which
    changes nothing."""

    id: str
    signal: str
    stored: bool
    state: JobState


class JobPage(BaseModel):
    """A page of jobs, newest first; pass `next` as `after` for the next page. `now` is the
    database's clock when the page was read (lease countdowns are relative to it)."""

    jobs: list[JobOut]
    next: str | None
    now: datetime


class EventOut(BaseModel):
    """One entry of a job's flight recorder."""

    model_config = ConfigDict(from_attributes=True)

    seq: int
    job_id: str
    type: str
    at: datetime
    token: int | None
    owner_id: str | None
    detail: Annotated[dict[str, Any], AfterValidator(readable)]
    version: int | None = None
    idempotency_key: str | None = None
    timeline: int | None = Field(
        default=None, description="the PostgreSQL WAL timeline it was written on (null: SQLite)"
    )


class EventList(BaseModel):
    """A job's events, oldest first."""

    events: list[EventOut]


class StageOut(BaseModel):
    """One recorded step or effect of a job."""

    model_config = ConfigDict(from_attributes=True)

    position: int
    name: str
    kind: str
    status: str
    token: int
    result: StoredJson


class StageList(BaseModel):
    """A job's stages in handler order."""

    stages: list[StageOut]


class ErrorBody(BaseModel):
    """What went wrong: a stable `code` and a sentence for people."""

    code: str
    message: str
    details: list[dict[str, Any]] | None = None


class ErrorOut(BaseModel):
    """Every 4xx and 5xx answer."""

    error: ErrorBody


class Health(BaseModel):
    """The process answers."""

    status: str


class Readiness(BaseModel):
    """A database round trip and the queue's figures (ages in seconds, by the database clock)."""

    status: str
    reason: str | None = None
    database_time: datetime | None = None
    queued: int | None = None
    running: int | None = None
    expired_leases: int | None = None
    oldest_queued_age_seconds: float | None = None


class VariantFiguresOut(BaseModel):
    """One side of a rollout's comparison: the jobs of one variant since the rollout started
    (durations from submit to end; cost as handlers reported it with `ctx.report_cost`)."""

    model_config = ConfigDict(from_attributes=True)

    variant: str
    jobs: int
    succeeded: int
    failed: int
    cancelled: int
    unfinished: int
    retries: int
    failure_rate: float | None
    p50_ms: float | None
    p95_ms: float | None
    tokens: int
    usd: float
    in_doubt: int


class RolloutOut(BaseModel):
    """A kind's rollout and its comparison. For a tenant key the figures are that tenant's
    jobs, and `tenants` names no other tenant."""

    kind: str
    variant: str
    tenants: list[str] | None
    percent: float
    max_failure_rate: float | None
    max_cost_ratio: float | None
    min_jobs: int
    on_trip: str
    state: str
    started_at: datetime
    tripped_at: datetime | None
    trip: dict[str, Any] | None
    candidate: VariantFiguresOut
    stable: VariantFiguresOut
    cost_ratio: float | None = Field(description="usd per job, candidate over stable")


class RolloutList(BaseModel):
    """The rollouts a key may see, by kind."""

    rollouts: list[RolloutOut]


class MeOut(BaseModel):
    """The presented key: `tenant` null for the admin key; `principal` what a tenant key is
    bound to (null: a service key, which may name any principal of its tenant)."""

    tenant: str | None
    admin: bool
    key_id: str | None
    principal: str | None


class KeyOut(BaseModel):
    """An API key without its secret, with the principal it is bound to."""

    key_id: str
    tenant: str
    principal: str | None
    created_at: datetime
    revoked: bool


class KeyList(BaseModel):
    keys: list[KeyOut]


class ScheduleOut(BaseModel):
    """A scheduled kind: its schedule in words, its next and last slot, and its counts."""

    kind: str
    description: str
    paused: bool
    next_slot: datetime | None
    last_slot: datetime | None
    last_fired_at: datetime | None
    fired: int
    missed: int


class ScheduleList(BaseModel):
    schedules: list[ScheduleOut]
