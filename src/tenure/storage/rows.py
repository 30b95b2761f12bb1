"""Row → domain type conversion shared by both stores (each hands in its own time reader)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from tenure.ids import new_claim_id
from tenure.storage.base import (
    ApiKeyRecord,
    FenceRecord,
    FenceStatus,
    NewSignal,
    StageStart,
)
from tenure.types import (
    Event,
    EventTotals,
    EventType,
    Job,
    JobState,
    Lease,
    OverdueStages,
    QueueFigure,
    Stage,
    StageKind,
    StageStatus,
    TenantRecord,
)
from tenure.wait_state import WaitState


class Row(Protocol):
    """A driver row addressable by column name (sqlite3.Row, psycopg's dict rows)."""

    def __getitem__(self, key: str, /) -> Any: ...


@dataclass(frozen=True, slots=True)
class Decoder:
    """How a dialect's driver hands back times and JSON columns."""

    time: Callable[[Any], datetime]
    json: Callable[[Any], Any]


def json_text(value: Any) -> Any:
    """A JSON column stored as text (SQLite); NULL stays None."""
    return None if value is None else json.loads(value)


def json_value(value: Any) -> Any:
    """A JSON column the driver already decoded (PostgreSQL jsonb), with its objects' keys in
    sorted order: jsonb keeps them shortest first, and SQLite's canonical text has them
    sorted, so that a value reads the same, key order included, on both."""
    if isinstance(value, dict):
        return {key: json_value(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [json_value(item) for item in value]
    return value


def held_by(lease: Lease) -> dict[str, Any]:
    """The parameters every lease-guarded statement names its lease by."""
    return {"job_id": lease.job_id, "owner_id": lease.owner_id, "token": lease.token}


def signal_params(signal: NewSignal) -> dict[str, Any]:
    """The parameters of a signal's statements (its event's detail aside)."""
    return {
        "job_id": signal.job_id,
        "name": signal.name,
        "payload": signal.payload_json,
        "payload_sha256": signal.payload_sha256,
    }


def stage_params(stage: StageStart) -> dict[str, Any]:
    """The parameters of a stage's write-ahead record (its event's detail aside)."""
    return {
        "position": stage.position,
        "name": stage.name,
        "kind": stage.kind.value,
        "effect_key": stage.effect_key,
        "timeout_seconds": stage.timeout_seconds,
    }


def started_event(stage: StageStart) -> EventType:
    """The event a started stage writes."""
    if stage.kind is StageKind.EFFECT:
        return EventType.TOOL_REQUEST_STARTED
    return EventType.STEP_STARTED


def job_from_row(row: Row, decode: Decoder) -> Job:
    """A `Job` from a row of the `get`/`list` queries."""

    def maybe_time(value: Any) -> datetime | None:
        return None if value is None else decode.time(value)

    return Job(
        id=str(row["id"]),
        kind=row["kind"],
        tenant=row["tenant"],
        state=JobState(row["state"]),
        owner_id=row["owner_id"],
        lease_until=maybe_time(row["lease_until"]),
        token=int(row["fencing_token"]),
        heartbeat_at=maybe_time(row["heartbeat_at"]),
        attempt=int(row["attempt"]),
        max_attempts=int(row["max_attempts"]),
        idempotency_key=row["idempotency_key"],
        payload=decode.json(row["payload"]),
        payload_sha256=row["payload_sha256"],
        step=int(row["step"]),
        checkpoint=decode.json(row["checkpoint"]),
        result=decode.json(row["result"]),
        error=decode.json(row["error"]),
        run_after=decode.time(row["run_after"]),
        priority=int(row["priority"]),
        created_at=decode.time(row["created_at"]),
        updated_at=decode.time(row["updated_at"]),
        parent_id=None if row["parent_id"] is None else str(row["parent_id"]),
        wait=WaitState.parse(decode.json(row["wait"])),
        variant=row["variant"],
        labels=decode.json(row["labels"]),
        traceparent=row["traceparent"],
        principal=row["principal"],
        version=None if row["version"] is None else int(row["version"]),
    )


def lease_from_row(row: Row, owner_id: str, lease_seconds: float, decode: Decoder) -> Lease:
    """A `Lease` from a row the claim query returned."""
    return Lease(
        job_id=str(row["id"]),
        kind=row["kind"],
        tenant=row["tenant"],
        owner_id=owner_id,
        token=int(row["fencing_token"]),
        attempt=int(row["attempt"]),
        max_attempts=int(row["max_attempts"]),
        lease_seconds=lease_seconds,
        claimed_at=decode.time(row["claimed_at"]),
        lease_until=decode.time(row["lease_until"]),
        payload=decode.json(row["payload"]),
        step=int(row["step"]),
        checkpoint=decode.json(row["checkpoint"]),
        wait=WaitState.parse(decode.json(row["wait"])),
        variant=row["variant"],
        labels=decode.json(row["labels"]),
        traceparent=row["traceparent"],
        principal=row["principal"],
        budgeted=bool(row["budgeted"]),
        claim=new_claim_id(),
        fresh=row["was_token"] == 0,
    )


def event_from_row(row: Row, decode: Decoder) -> Event:
    """An `Event` from a row of the `events` query."""
    return Event(
        seq=int(row["seq"]),
        job_id=str(row["job_id"]),
        type=EventType(row["type"]),
        at=decode.time(row["at"]),
        token=None if row["token"] is None else int(row["token"]),
        owner_id=row["owner_id"],
        detail=decode.json(row["detail"]) or {},
        version=None if row["version"] is None else int(row["version"]),
        idempotency_key=row["idempotency_key"],
        timeline=None if row["timeline"] is None else int(row["timeline"]),
    )


def stage_from_row(row: Row, decode: Decoder) -> Stage:
    """A `Stage` from a row of the `stages` query."""
    return Stage(
        position=int(row["position"]),
        name=row["name"],
        kind=StageKind(row["kind"]),
        status=StageStatus(row["status"]),
        token=int(row["token"]),
        result=decode.json(row["result"]),
    )


def fence_record_from_row(row: Row, decode: Decoder) -> FenceRecord:
    """A `FenceRecord` from a row of the `fence_get`/`fence_lookup` queries."""
    return FenceRecord(
        status=FenceStatus(row["status"]),
        token=int(row["fence"]),
        result=decode.json(row["result"]),
        age_seconds=float(row["age"]),
    )


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def queue_figure_from_row(row: Row) -> QueueFigure:
    """A `QueueFigure` from a row of the `queue_figures` query."""
    return QueueFigure(
        kind=row["kind"],
        tenant=row["tenant"],
        labels=_labels(row["labels"]),
        state=JobState(row["state"]),
        jobs=int(row["jobs"]),
        expired_leases=int(row["expired"]),
        oldest_heartbeat_age=_seconds(row["heartbeat_age"]),
        least_lease_remaining=_seconds(row["lease_remaining"]),
        oldest_due_age=_seconds(row["due_age"]),
    )


def event_totals_from_row(row: Row) -> EventTotals:
    """An `EventTotals` from a row of the `event_totals` query."""
    return EventTotals(
        kind=row["kind"],
        tenant=row["tenant"],
        labels=_labels(row["labels"]),
        leases_expired=int(row["leases_expired"]),
        jobs_reclaimed=int(row["jobs_reclaimed"]),
        extension_failures=int(row["extension_failures"]),
        results_rejected=int(row["results_rejected"]),
        steps_in_doubt=int(row["steps_in_doubt"]),
        ownership_unknown=int(row["ownership_unknown"]),
    )


def api_key_from_row(row: Row, decode: Decoder) -> ApiKeyRecord:
    """An `ApiKeyRecord` from a row of the `api_key` query."""
    return ApiKeyRecord(
        key_id=row["key_id"],
        tenant=row["tenant"],
        key_sha256=row["key_sha256"],
        principal=row["principal"],
        created_at=decode.time(row["created_at"]),
        revoked=bool(row["revoked"]),
    )


def tenant_from_row(row: Row, decode: Decoder) -> TenantRecord:
    """A `TenantRecord` from a row of the `tenants` query."""
    return TenantRecord(
        name=row["name"],
        created_at=decode.time(row["created_at"]),
        active_keys=int(row["active_keys"]),
        revoked_keys=int(row["revoked_keys"]),
    )


def overdue_from_row(row: Row) -> OverdueStages:
    """An `OverdueStages` from a row of the `overdue_stages` query."""
    return OverdueStages(
        kind=row["kind"],
        tenant=row["tenant"],
        labels=_labels(row["labels"]),
        stages=int(row["stages"]),
        most_overdue_seconds=float(row["most_overdue"]),
    )


def _labels(value: Any) -> dict[str, str] | None:
    """A labels column: JSON text on SQLite, already decoded on PostgreSQL."""
    if value is None or isinstance(value, dict):
        return value
    decoded: dict[str, str] = json.loads(value)
    return decoded


def expiry_detail(
    lease_until: Any, heartbeat_at: Any, read: Callable[[Any], datetime]
) -> dict[str, str]:
    """An expired lease's last known end and last heartbeat (as stored; absent when unknown),
    for its `lease_expired` event: a job's timeline draws where the heartbeats stopped."""
    known = {"lease_until": lease_until, "heartbeat_at": heartbeat_at}
    return {name: read(value).isoformat() for name, value in known.items() if value is not None}
