"""A job's life as lanes: one per claim, drawn from the events the ledger already keeps.

The dashboard, `GET /v1/jobs/{id}/timeline` and `tenure events ID --timeline` all draw what
`build_timeline` returns (docs/how-to/timeline.md documents its JSON). Nothing here reads the
database or writes anything: it is a pure view of a job and its events, ids, tokens and sizes
only (an event's detail never holds content).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

from tenure.types import Event, EventType, Job, JobState, StageKind


class LaneEnd(enum.StrEnum):
    """How a claim's lease ended."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRIED = "retried"
    RELEASED = "released"
    WAITING = "waiting"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    FAILOVER = "failover"
    UNKNOWN = "unknown"


class SpanStatus(enum.StrEnum):
    """A stage as one holder left it."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    IN_DOUBT = "in_doubt"
    REFUSED = "refused"
    """An effect its receiver refused (a stale fence, a second holder): it did not happen."""


# Events that end the lane of the token they carry, and how.
_ENDS = {
    EventType.JOB_SUCCEEDED: LaneEnd.SUCCEEDED,
    EventType.JOB_FAILED: LaneEnd.FAILED,
    EventType.JOB_RETRY_SCHEDULED: LaneEnd.RETRIED,
    EventType.JOB_RELEASED: LaneEnd.RELEASED,
    EventType.JOB_WAITING: LaneEnd.WAITING,
}
_STARTS = {EventType.STEP_STARTED: StageKind.STEP, EventType.TOOL_REQUEST_STARTED: StageKind.EFFECT}
# What happens to the job from outside any claim (an operator, a caller), whatever token the
# job had then.
_JOB_LEVEL = {EventType.JOB_SUBMITTED, EventType.SIGNAL_RECEIVED, EventType.JOB_REQUEUED}
# A holder's own writes while it held the lease: each shows it was alive then.
_HEARD = {
    EventType.STEP_STARTED,
    EventType.STEP_DONE,
    EventType.STEP_FAILED,
    EventType.STEP_SAVED,
    EventType.STEP_IN_DOUBT,
    EventType.TOOL_REQUEST_STARTED,
    EventType.CHILD_SPAWNED,
    EventType.EVIDENCE_RETRIEVED,
}
_FINISHES = {EventType.STEP_DONE: SpanStatus.DONE, EventType.STEP_FAILED: SpanStatus.FAILED}


@dataclass(slots=True)
class StageSpan:
    """A stage one holder started: its status as that holder left it."""

    position: int
    name: str
    kind: StageKind
    status: SpanStatus
    started_at: datetime
    ended_at: datetime | None = None
    in_doubt_from: int | None = None
    """The token of the earlier holder whose start of this stage this holder found in doubt."""
    in_doubt: bool = False
    """This holder started it knowing an earlier start was in doubt (it reconciles)."""
    key: str | None = None
    """An effect's idempotency key (what it sends); None for a step."""


@dataclass(frozen=True, slots=True)
class EffectSpan:
    """An effect stage seen as what it sent: its fence (its lane's token) and key."""

    position: int
    name: str
    fence: int
    key: str | None
    status: SpanStatus
    started_at: datetime
    ended_at: datetime | None = None
    in_doubt: bool = False


@dataclass(frozen=True, slots=True)
class Mark:
    """An event drawn where it happened (a rejected write, a refused effect, a signal...)."""

    at: datetime
    type: EventType
    token: int | None
    owner: str | None
    detail: dict[str, Any]


@dataclass(slots=True)
class Lane:
    """One claim: who held the lease, under which token, from when to when, and what it did."""

    token: int
    owner: str | None
    attempt: int | None
    claimed_at: datetime
    lease_until: datetime | None
    ended_at: datetime | None = None
    ended_by: LaneEnd = LaneEnd.UNKNOWN
    timeline: int | None = None
    renewals: list[datetime] = field(default_factory=list)
    claim_seen: bool = True
    """False when no event of the claim survives (a failover or a restore lost it) and the
    lane is drawn from what its holder wrote later."""
    last_heard_at: datetime | None = None
    """The last moment the holder was heard from before its lease ended: its claim, a renewal
    the database kept, or a stage it recorded."""
    stages: list[StageSpan] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)

    @property
    def effects(self) -> list[EffectSpan]:
        """The lane's effect stages with the fence they were sent under (its token)."""
        return [
            EffectSpan(
                s.position,
                s.name,
                self.token,
                s.key,
                s.status,
                s.started_at,
                s.ended_at,
                s.in_doubt,
            )
            for s in self.stages
            if s.kind is StageKind.EFFECT
        ]

    def stage_at(self, position: int) -> StageSpan | None:
        return next((s for s in reversed(self.stages) if s.position == position), None)

    def end(self, at: datetime, how: LaneEnd) -> None:
        if self.ended_at is None and self.ended_by is LaneEnd.UNKNOWN:
            self.ended_at, self.ended_by = at, how


@dataclass(slots=True)
class WaitSpan:
    """A time the job waited without a lease (a signal, children, a timer)."""

    waited_for: str | None
    name: str | None
    position: int | None
    started_at: datetime
    ended_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    """A database failover between two events: the WAL timeline changed. A higher timeline is a
    promotion (`failover`); a lower one is another server's history (`restore`: a dump loaded
    into a new cluster, an upgrade into one). A base backup started as it is keeps its
    timeline: no rule shows it."""

    at: datetime
    from_timeline: int
    to_timeline: int

    @property
    def kind(self) -> str:
        return "failover" if self.to_timeline > self.from_timeline else "restore"


@dataclass(slots=True)
class Timeline:
    """A job's life, ready to draw."""

    job: Job
    now: datetime
    lanes: list[Lane]
    waits: list[WaitSpan]
    rules: list[Rule]
    marks: list[Mark]

    @property
    def start(self) -> datetime:
        return self.job.created_at

    @property
    def end(self) -> datetime:
        """The last moment worth drawing: the job's end (or now), or a later event."""
        last = self.job.updated_at if self.job.terminal else self.now
        ends = [lane.ended_at for lane in self.lanes if lane.ended_at is not None]
        return max([last, *(m.at for lane in self.lanes for m in lane.marks), *ends])

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON shape (docs/how-to/timeline.md), times as ISO 8601 strings."""
        job = self.job
        drawn: dict[str, Any] = _jsonable(
            {
                "job": {
                    "id": job.id,
                    "kind": job.kind,
                    "tenant": job.tenant,
                    "state": job.state,
                    "attempt": job.attempt,
                    "max_attempts": job.max_attempts,
                    "token": job.token,
                    "owner": job.owner_id,
                    "parent_id": job.parent_id,
                    "principal": job.principal,
                    "created_at": job.created_at,
                    "ended_at": job.updated_at if job.terminal else None,
                },
                "now": self.now,
                "start": self.start,
                "end": self.end,
                "lanes": [_lane_dict(lane) for lane in self.lanes],
                "waits": [_wait_dict(wait) for wait in self.waits],
                "rules": [{"kind": rule.kind, **asdict(rule)} for rule in self.rules],
                "marks": [asdict(mark) for mark in self.marks],
            }
        )
        return drawn


def _lane_dict(lane: Lane) -> dict[str, Any]:
    return {**asdict(lane), "effects": [asdict(effect) for effect in lane.effects]}


def _wait_dict(wait: WaitSpan) -> dict[str, Any]:
    return {
        "for": wait.waited_for,
        "name": wait.name,
        "position": wait.position,
        "from": wait.started_at,
        "to": wait.ended_at,
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Builder:
    def __init__(self, job: Job, now: datetime) -> None:
        self.job = job
        self.now = now
        self.lanes: list[Lane] = []
        self.by_token: dict[int, Lane] = {}
        self.waits: list[WaitSpan] = []
        self.rules: list[Rule] = []
        self.marks: list[Mark] = []
        self.timeline: int | None = None
        # Stage positions a new holder found in doubt, with the token that had started them.
        self.doubted: dict[int, int] = {}

    def lane(self, token: int | None) -> Lane | None:
        return None if token is None else self.by_token.get(token)

    def add(self, event: Event) -> None:
        self.watch_timeline(event)
        lane = self.lane(event.token)
        if event.type is EventType.JOB_CLAIMED and event.token is not None:
            self.claimed(event)
        elif event.type is EventType.JOB_RESUMED:
            self.close_wait(event.at)
        elif event.type is EventType.JOB_CANCELLED:
            # It carries the bumped token and the holder's name (none for a job not running).
            held = [lane for lane in self.lanes if lane.claim_seen and lane.ended_at is None]
            if held and event.owner_id is not None and held[-1].owner == event.owner_id:
                held[-1].end(event.at, LaneEnd.CANCELLED)
            self.close_wait(event.at)
            self.marks.append(_mark(event))
        elif event.type in _JOB_LEVEL or not event.token:
            self.marks.append(_mark(event))
        else:
            self.on_lane(lane or self.unclaimed(event), event)

    def on_lane(self, lane: Lane, event: Event) -> None:
        """An event of the holder of `lane`'s token."""
        detail = event.detail
        if lane.ended_at is None and event.type in _HEARD:
            lane.last_heard_at = event.at
        if event.type is EventType.LEASE_EXPIRED:
            heard = _time(detail.get("heartbeat_at"))
            if heard is not None and heard > lane.claimed_at:
                lane.renewals.append(heard)
            lane.last_heard_at = max(
                lane.last_heard_at or lane.claimed_at, heard or lane.claimed_at
            )
            lane.lease_until = _time(detail.get("lease_until")) or _expiry(lane, heard, event.at)
            lane.end(lane.lease_until, LaneEnd.EXPIRED)
        elif event.type in _ENDS:
            lane.end(event.at, _ENDS[event.type])
            if event.type is EventType.JOB_WAITING:
                position = _int(detail.get("position"))
                names = detail.get("names")
                name = ",".join(map(str, names)) if isinstance(names, list) else detail.get("name")
                wait = WaitSpan(detail.get("for"), name, position, event.at)
                self.waits.append(wait)
        elif event.type in _STARTS:
            self.started(lane, event, _STARTS[event.type])
        elif event.type in _FINISHES:
            self.set_status(lane, detail.get("position"), _FINISHES[event.type], event.at)
        else:
            if event.type is EventType.STEP_IN_DOUBT:
                self.found_in_doubt(detail)
            elif event.type is EventType.EFFECT_REFUSED:
                self.set_status(lane, detail.get("position"), SpanStatus.REFUSED, event.at)
            elif event.type is EventType.TOOL_OUTCOME_UNKNOWN:
                # Its detail names the effect (`effect`), not its position.
                named = [s for s in lane.stages if s.name == detail.get("effect")]
                where = detail.get("position", named[-1].position if named else None)
                self.set_status(lane, where, SpanStatus.IN_DOUBT, None)
            lane.marks.append(_mark(event))

    def watch_timeline(self, event: Event) -> None:
        if event.timeline is None:
            return
        if self.timeline is not None and event.timeline != self.timeline:
            self.rules.append(Rule(event.at, self.timeline, event.timeline))
        self.timeline = event.timeline

    def claimed(self, event: Event) -> None:
        assert event.token is not None
        lane = Lane(
            token=event.token,
            owner=event.owner_id,
            attempt=_int(event.detail.get("attempt")),
            claimed_at=event.at,
            lease_until=_time(event.detail.get("lease_until")),
            timeline=event.timeline,
            last_heard_at=event.at,
        )
        self.lanes.append(lane)
        self.by_token[event.token] = lane

    def unclaimed(self, event: Event) -> Lane:
        """A lane for a token whose claim the database has no event of: a failover (or a
        restore) lost it, while its holder went on and wrote later."""
        assert event.token is not None
        lane = Lane(event.token, event.owner_id, None, event.at, None, claim_seen=False)
        self.lanes.append(lane)
        self.lanes.sort(key=lambda held: held.token)
        self.by_token[event.token] = lane
        return lane

    def close_wait(self, at: datetime) -> None:
        for wait in self.waits:
            if wait.ended_at is None:
                wait.ended_at = at

    def started(self, lane: Lane, event: Event, kind: StageKind) -> None:
        position, name = _int(event.detail.get("position")), event.detail.get("name")
        if position is None or not isinstance(name, str):
            lane.marks.append(_mark(event))
            return
        in_doubt = event.detail.get("in_doubt") is True
        earlier = self.doubted.pop(position, None) if in_doubt else None
        key = event.idempotency_key if kind is StageKind.EFFECT else None
        status = SpanStatus.RUNNING
        lane.stages.append(
            StageSpan(position, name, kind, status, event.at, None, earlier, in_doubt, key)
        )

    def found_in_doubt(self, detail: dict[str, Any]) -> None:
        position, started = _int(detail.get("position")), _int(detail.get("started_token"))
        if position is None:
            return
        if started is not None:
            self.doubted[position] = started
            earlier = self.lane(started)
            if earlier is not None:
                self.set_status(earlier, position, SpanStatus.IN_DOUBT, None)

    def set_status(
        self, lane: Lane, position: Any, status: SpanStatus, at: datetime | None
    ) -> None:
        where = _int(position)
        span = None if where is None else lane.stage_at(where)
        if span is not None:
            span.status = status
            span.ended_at = at if at is not None else span.ended_at

    def finish(self) -> Timeline:
        for index, lane in enumerate(self.lanes):
            following = self.lanes[index + 1] if index + 1 < len(self.lanes) else None
            if lane.ended_at is None and lane.ended_by is LaneEnd.UNKNOWN:
                self.settle(lane, following)
            for span in lane.stages:
                if span.status is SpanStatus.RUNNING and lane.ended_by is not LaneEnd.RUNNING:
                    span.status = SpanStatus.IN_DOUBT
        return Timeline(self.job, self.now, self.lanes, self.waits, self.rules, self.marks)

    def settle(self, lane: Lane, following: Lane | None) -> None:
        """A lane no event ended: still held, cut by a failover, or ended unseen."""
        job = self.job
        if not lane.claim_seen:
            lane.ended_at = lane.claimed_at
            lane.ended_by = LaneEnd.FAILOVER if self.rules else LaneEnd.UNKNOWN
            return
        if following is None and job.state is JobState.RUNNING and job.token == lane.token:
            lane.lease_until = job.lease_until or lane.lease_until
            if job.heartbeat_at is not None and job.heartbeat_at > lane.claimed_at:
                lane.renewals.append(job.heartbeat_at)
                lane.last_heard_at = max(lane.last_heard_at or job.heartbeat_at, job.heartbeat_at)
            if lane.lease_until is not None and lane.lease_until <= self.now:
                # Expired, and no claim has taken the job yet (none may come for its kind).
                lane.ended_at, lane.ended_by = lane.lease_until, LaneEnd.EXPIRED
            else:
                lane.ended_by = LaneEnd.RUNNING
            return
        cut = next(
            (
                rule
                for rule in self.rules
                if rule.at >= lane.claimed_at
                and (following is None or rule.at <= following.claimed_at)
            ),
            None,
        )
        if cut is not None:
            lane.ended_at, lane.ended_by = cut.at, LaneEnd.FAILOVER
        elif following is not None:
            lane.ended_at = following.claimed_at
        elif job.terminal:
            lane.ended_at = job.updated_at


def _expiry(lane: Lane, heard: datetime | None, noticed: datetime) -> datetime:
    """When a lease whose end its `lease_expired` event does not say ran out: its last heartbeat
    plus the length of its first lease (a worker renews by its class's lease), never after the
    moment a claim noticed it."""
    if lane.lease_until is None:
        return noticed
    return min(noticed, (heard or lane.claimed_at) + (lane.lease_until - lane.claimed_at))


def _mark(event: Event) -> Mark:
    return Mark(event.at, event.type, event.token, event.owner_id, dict(event.detail))


def build_timeline(job: Job, events: Sequence[Event], now: datetime) -> Timeline:
    """The lanes, waits, failover rules and marks of `job`, from its events (oldest first)."""
    builder = _Builder(job, now)
    for event in events:
        builder.add(event)
    return builder.finish()


class TimelineSource(Protocol):
    """What reading a timeline needs of the ledger."""

    def get(self, job_id: str) -> Job: ...

    def events(self, job_id: str) -> list[Event]: ...

    def now(self) -> datetime: ...


def read_timeline(source: TimelineSource, job_id: str) -> Timeline:
    """The timeline of the job `job_id`, read now."""
    job = source.get(job_id)
    return build_timeline(job, source.events(job.id), source.now())
