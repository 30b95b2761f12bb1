"""A job's life over HTTP: its lease timeline and its run tree (docs/how-to/timeline.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import AfterValidator, BaseModel, Field

from tenure.runtree import read_tree
from tenure.service.api import visible_job
from tenure.service.auth import Caller, ledger_of
from tenure.service.errors import documented
from tenure.service.models import StoredJson, readable
from tenure.timeline import build_timeline

router = APIRouter(prefix="/v1", tags=["jobs"])
_AUTH = (401, 422, 503)


class TimelineJob(BaseModel):
    id: str
    kind: str
    tenant: str
    state: str
    attempt: int
    max_attempts: int
    token: int
    owner: str | None
    parent_id: str | None
    principal: str | None
    created_at: datetime
    ended_at: datetime | None


class StageSpanOut(BaseModel):
    position: int
    name: str
    kind: str
    status: str = Field(description="done, failed, in_doubt or running")
    started_at: datetime
    ended_at: datetime | None
    in_doubt_from: int | None = Field(
        description="the token of the earlier holder whose start this holder found in doubt"
    )


class EffectSpanOut(BaseModel):
    position: int
    name: str
    fence: int
    key: str | None
    status: str
    started_at: datetime
    ended_at: datetime | None
    in_doubt: bool


class MarkOut(BaseModel):
    at: datetime
    type: str
    token: int | None
    owner: str | None
    detail: Annotated[dict[str, Any], AfterValidator(readable)]


class LaneOut(BaseModel):
    token: int
    owner: str | None
    attempt: int | None
    claimed_at: datetime
    lease_until: datetime | None
    ended_at: datetime | None
    ended_by: str = Field(
        description="running, succeeded, failed, retried, released, waiting, cancelled, "
        "expired, failover or unknown"
    )
    timeline: int | None = Field(description="the PostgreSQL WAL timeline of its claim")
    renewals: list[datetime]
    last_heard_at: datetime | None = Field(
        description="the last moment its holder was heard from before the lease ended"
    )
    claim_seen: bool = Field(
        description="false when no event of the claim survives (a failover lost it)"
    )
    stages: list[StageSpanOut]
    effects: list[EffectSpanOut]
    marks: list[MarkOut]


class WaitSpanOut(BaseModel):
    waited_for: str | None = Field(alias="for", serialization_alias="for")
    name: str | None
    position: int | None
    started_at: datetime = Field(alias="from", serialization_alias="from")
    ended_at: datetime | None = Field(alias="to", serialization_alias="to")


class RuleOut(BaseModel):
    kind: str
    at: datetime
    from_timeline: int
    to_timeline: int


class TimelineOut(BaseModel):
    """A job's lanes (one per claim), waits, failover rules and other marks."""

    job: TimelineJob
    now: datetime
    start: datetime
    end: datetime
    lanes: list[LaneOut]
    waits: list[WaitSpanOut]
    rules: list[RuleOut]
    marks: list[MarkOut]


class CostOut(BaseModel):
    tokens: int
    usd: float


class RunNodeOut(BaseModel):
    id: str
    kind: str
    state: str
    token: int
    attempt: int
    max_attempts: int
    principal: str | None
    wait: StoredJson
    cost: CostOut | None
    created_at: datetime
    updated_at: datetime
    children: list[RunNodeOut]


class BudgetOut(BaseModel):
    """What the focus job's run may still spend, per unit (the least remainder of its own
    budget and its ancestors'), and whether it is spent."""

    remaining: dict[str, float]
    exhausted: bool


class RunTreeOut(BaseModel):
    """The run tree the job belongs to, from its root; `focus` is the job asked for;
    `budget` what the focus job's run has left (null: no budget)."""

    root: RunNodeOut
    focus: str
    truncated: bool
    budget: BudgetOut | None = None


@router.get(
    "/jobs/{job_id}/timeline",
    response_model=TimelineOut,
    response_model_by_alias=True,
    responses=documented(*_AUTH, 404),
)
def job_timeline(job_id: str, request: Request, caller: Caller) -> Any:
    """The job's lease timeline: one lane per claim, drawn from its events (nothing written)."""
    ledger = ledger_of(request)
    job = visible_job(ledger, caller, job_id)
    timeline = build_timeline(job, ledger.events(job.id), ledger.now())
    return TimelineOut.model_validate(timeline.to_dict())


@router.get("/jobs/{job_id}/tree", response_model=RunTreeOut, responses=documented(*_AUTH, 404))
def job_tree(job_id: str, request: Request, caller: Caller) -> RunTreeOut:
    """The run tree the job belongs to: its root ancestor and every child below (at most 6
    levels and 500 jobs; `truncated` says when more exist)."""
    ledger = ledger_of(request)
    job = visible_job(ledger, caller, job_id)
    tree = read_tree(ledger, job.id, visible=caller.may_read)
    left = ledger.operations.budget(job.id)
    budget = None if left is None else {"remaining": left.remaining, "exhausted": left.exhausted}
    return RunTreeOut.model_validate({**tree.to_dict(), "budget": budget})
