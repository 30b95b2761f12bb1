"""The tables behind `tenure.testing.MemoryPort`: jobs, stages, signals, events, effects,
waits, evidence and costs, and the transitions the port's calls share (submit, claim, complete,
cancel, a child's end waking its parent). Every method here runs with the port's lock held;
what must run after it is released (callbacks, stage hooks) goes on the `later` list."""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from tenure.budgets import Budget
from tenure.clock import Clock
from tenure.errors import IdempotencyConflict, JobNotFound, LeaseLost, TenureError
from tenure.evidence import DocumentRef, Evidence
from tenure.ids import new_claim_id, new_job_id
from tenure.types import JSON, Effect, Event, EventType, Job, JobState, Lease, Stage
from tenure.validation import check_name, encode_json
from tenure.wait_state import WaitFor, WaitState
from tenure.waits import (
    WaitRequest,
)

_CHILD_IDS = uuid.UUID("0b6f7b52-4a43-5c3e-9a8e-6d1f2e3c4b5a")
OPEN = frozenset({JobState.QUEUED, JobState.RUNNING, JobState.WAITING})


@dataclass(slots=True)
class JobRow:
    """One job as this port keeps it (a `Job` is read from it)."""

    id: str
    seq: int
    kind: str
    tenant: str
    max_attempts: int
    payload: JSON
    payload_sha256: str
    priority: int
    run_after: datetime
    created_at: datetime
    idempotency_key: str | None = None
    parent_id: str | None = None
    principal: str | None = None
    version: int | None = None
    labels: dict[str, str] | None = None
    state: JobState = JobState.QUEUED
    owner_id: str | None = None
    lease_until: datetime | None = None
    token: int = 0
    heartbeat_at: datetime | None = None
    attempt: int = 0
    step: int = 0
    checkpoint: JSON = None
    result: JSON = None
    error: JSON = None
    wait: WaitState | None = None
    updated_at: datetime | None = None
    stages: dict[int, Stage] = field(default_factory=dict)
    signals: dict[str, tuple[JSON, str]] = field(default_factory=dict)


def stored_json(value: JSON, what: str, limit: int) -> tuple[JSON, str]:
    """The value as stored (a copy, through its canonical JSON) and its SHA-256."""
    encoded = encode_json(value, what, limit)
    return json.loads(encoded.text), encoded.sha256


def event_detail(fields: Mapping[str, Any]) -> dict[str, Any]:
    """An event's detail as the ledger stores it: JSON (anything else as its text)."""
    return dict(json.loads(json.dumps(dict(fields), sort_keys=True, default=str)))


class JobTables:
    """The port's state and its shared transitions (the lock held by the caller)."""

    def budget(self, job_id: str) -> Budget | None:
        """No budgets in memory (they are the database's): a handler test's run is unlimited."""
        del job_id
        return None

    def __init__(self, clock: Clock, max_payload_bytes: int, default_max_attempts: int) -> None:
        self.clock = clock
        self._max_payload_bytes = max_payload_bytes
        self._default_max_attempts = default_max_attempts
        self._lock = threading.Lock()
        self._rows: dict[str, JobRow] = {}
        self._keys: dict[tuple[str, str], str] = {}
        self._events: list[Event] = []
        self._effects: dict[str, list[Effect]] = {}
        self._waits: dict[str, list[WaitRequest]] = {}
        self._evidence: dict[str, dict[str, Evidence]] = {}
        self._costs: dict[tuple[str, int], tuple[int, float]] = {}
        self._cache: dict[tuple[str, str], tuple[list[DocumentRef], datetime]] = {}
        self._listeners: list[tuple[Callable[[str], None], Callable[[str, int], None] | None]] = []
        self._hooks: list[tuple[str, str | None, Callable[[str], None]]] = []
        self._seq = 0

    def now(self) -> datetime:
        """This port's "database clock": the injected clock's wall time, in UTC."""
        return datetime.fromtimestamp(self.clock.wall(), UTC)

    # -- inside (the lock held) ----------------------------------------------------------------

    @contextlib.contextmanager
    def _tx(self) -> Iterator[list[Callable[[], None]]]:
        """The lock; what the body defers (callbacks, stage hooks) runs once it is released."""
        later: list[Callable[[], None]] = []
        with self._lock:
            yield later
        for call in later:
            call()

    def _row(self, job_id: str) -> JobRow:
        row = self._rows.get(job_id)
        if row is None:
            raise JobNotFound(f"no job has the id {job_id}")
        return row

    def _job(self, row: JobRow) -> Job:
        return Job(
            id=row.id, kind=row.kind, tenant=row.tenant, state=row.state, owner_id=row.owner_id,
            lease_until=row.lease_until, token=row.token, heartbeat_at=row.heartbeat_at,
            attempt=row.attempt, max_attempts=row.max_attempts,
            idempotency_key=row.idempotency_key, payload=copy.deepcopy(row.payload),
            payload_sha256=row.payload_sha256, step=row.step,
            checkpoint=copy.deepcopy(row.checkpoint), result=copy.deepcopy(row.result),
            error=copy.deepcopy(row.error), run_after=row.run_after, priority=row.priority,
            created_at=row.created_at, updated_at=row.updated_at or row.created_at,
            parent_id=row.parent_id, wait=row.wait, labels=row.labels, principal=row.principal,
            version=row.version, evidence=tuple(self._evidence.get(row.id, {}).values()),
        )  # fmt: skip

    def _children(self, job_id: str) -> list[JobRow]:
        rows = [row for row in self._rows.values() if row.parent_id == job_id]
        return sorted(rows, key=lambda row: row.seq)

    def _event(
        self,
        row: JobRow,
        type: EventType,
        token: int | None,
        owner_id: str | None,
        *,
        key: str | None = None,
        **detail: Any,
    ) -> None:
        self._seq += 1
        key = key if key is not None else row.idempotency_key
        event = Event(
            self._seq, row.id, type, self.now(), token, owner_id, event_detail(detail),
            row.version, key,
        )  # fmt: skip
        self._events.append(event)

    def _held(self, lease: Lease) -> JobRow | None:
        """The job's row if `lease` still holds it (running, same owner and token, not past
        its end by this port's clock)."""
        row = self._rows.get(lease.job_id)
        if (
            row is None
            or row.state is not JobState.RUNNING
            or (row.owner_id, row.token) != (lease.owner_id, lease.token)
            or row.lease_until is None
            or row.lease_until <= self.now()
        ):
            return None
        return row

    def _guard(self, lease: Lease, operation: str) -> JobRow:
        row = self._held(lease)
        if row is None:
            self._lost(lease, operation)
        return row

    def _lost(self, lease: Lease, operation: str, **detail: Any) -> NoReturn:
        if self._reject(lease, EventType.RESULT_REJECTED, operation, **detail):
            why = f"token {lease.token} no longer holds the lease"
        else:
            why = "the job is gone"
        raise LeaseLost(f"job {lease.job_id}: {why}; the {operation} was rejected")

    def _reject(self, lease: Lease, event: EventType, operation: str, **detail: Any) -> bool:
        row = self._rows.get(lease.job_id)
        if row is not None:
            self._event(
                row, event, lease.token, lease.owner_id,
                operation=operation, reason="zero_rows", **detail,
            )  # fmt: skip
        return row is not None

    def _hooked(self, later: list[Callable[[], None]], job_id: str, name: str) -> None:
        for hook in list(self._hooks):
            stage, only, action = hook
            if stage == name and only in (None, job_id):
                self._hooks.remove(hook)
                later.append(functools.partial(action, job_id))

    def _claimable(self, later: list[Callable[[], None]], kind: str) -> None:
        for callback, _ in self._listeners:
            later.append(functools.partial(callback, kind))

    def _submit(
        self,
        later: list[Callable[[], None]],
        kind: str,
        payload: JSON,
        tenant: str,
        max_attempts: int | None,
        priority: int,
        principal: str | None,
        key: str | None,
        delay: float,
        version: int | None,
        labels: Mapping[str, str] | None,
        parent_id: str | None,
    ) -> tuple[str, bool]:
        kind, tenant = check_name(kind, "kind"), check_name(tenant, "tenant")
        value, digest = stored_json(payload, "payload", self._max_payload_bytes)
        if key is not None and (tenant, key) in self._keys:
            existing = self._rows[self._keys[(tenant, key)]]
            if (existing.kind, existing.payload_sha256) != (kind, digest):
                raise IdempotencyConflict(f"the idempotency key {key!r} belongs to another job")
            return existing.id, False
        job_id = new_job_id(self.clock)
        if parent_id is not None and key is not None:
            job_id = str(uuid.uuid5(_CHILD_IDS, f"{tenant}\x00{key}"))
        now = self.now()
        self._seq += 1
        attempts = self._default_max_attempts if max_attempts is None else max_attempts
        row = JobRow(
            id=job_id, seq=self._seq, kind=kind, tenant=tenant, max_attempts=attempts,
            payload=value, payload_sha256=digest, priority=priority,
            run_after=now + timedelta(seconds=delay), created_at=now, idempotency_key=key,
            parent_id=parent_id, principal=principal, version=version,
            labels=None if labels is None else dict(labels),
        )  # fmt: skip
        self._rows[job_id] = row
        if key is not None:
            self._keys[(tenant, key)] = job_id
        parent = {} if parent_id is None else {"parent_id": parent_id}
        self._event(
            row, EventType.JOB_SUBMITTED, None, None,
            kind=kind, payload_sha256=digest, priority=priority, **parent,
        )  # fmt: skip
        self._claimable(later, kind)
        return job_id, True

    def _claim(
        self,
        later: list[Callable[[], None]],
        owner_id: str,
        limit: int,
        kinds: Sequence[str] | None,
        lease_seconds: float,
        kind_limits: Mapping[str, int] | None,
        variants: Mapping[str, Sequence[str]] | None,
    ) -> list[Lease]:
        now = self.now()
        wanted = None if kinds is None else set(kinds)
        pinned = {kind: set(names) for kind, names in (variants or {}).items()}
        rows = [
            row
            for row in self._rows.values()
            if (wanted is None or row.kind in wanted)
            and (row.kind not in pinned or "stable" in pinned[row.kind])
        ]
        for row in rows:  # expired leases of a last attempt end the job (`lease_expired`)
            if _expired(row, now) and row.attempt >= row.max_attempts:
                row.state, row.lease_until, row.updated_at = JobState.FAILED, None, now
                row.error = {"code": "lease_expired", "message": "the lease of the last "
                             "allowed attempt expired"}  # fmt: skip
                was = row.token, row.owner_id
                self._event(row, EventType.LEASE_EXPIRED, *was, attempt=row.attempt, then="failed")
                self._event(row, EventType.JOB_FAILED, *was, code="lease_expired")
                self._ended(later, row)
        running = Counter(row.kind for row in self._rows.values() if _holds(row, now))
        due = [
            row
            for row in rows
            if _expired(row, now)
            or (row.state in (JobState.QUEUED, JobState.WAITING) and row.run_after <= now)
        ]
        leases: list[Lease] = []
        for row in sorted(due, key=lambda row: (-row.priority, row.seq)):
            cap = (kind_limits or {}).get(row.kind)
            if len(leases) >= limit or (cap is not None and running[row.kind] >= cap):
                continue
            running[row.kind] += 1
            leases.append(self._take(row, owner_id, lease_seconds, now))
        return leases

    def _take(self, row: JobRow, owner_id: str, lease_seconds: float, now: datetime) -> Lease:
        fresh = row.token == 0
        if row.state is JobState.RUNNING:
            self._event(
                row, EventType.LEASE_EXPIRED, row.token, row.owner_id,
                attempt=row.attempt, then="reclaimed",
            )  # fmt: skip
        row.token = max(row.token + 1, int(now.timestamp() * 1_000_000) + 1)
        if row.state is JobState.WAITING and row.wait is not None:
            self._event(
                row, EventType.JOB_RESUMED, row.token, owner_id,
                waited_for=row.wait.wait_for.value, position=row.wait.position,
            )  # fmt: skip
        row.state, row.owner_id, row.attempt = JobState.RUNNING, owner_id, row.attempt + 1
        row.lease_until = now + timedelta(seconds=lease_seconds)
        row.heartbeat_at = row.updated_at = now
        self._event(
            row, EventType.JOB_CLAIMED, row.token, owner_id,
            attempt=row.attempt, lease_until=row.lease_until.isoformat(),
        )  # fmt: skip
        return Lease(
            job_id=row.id, kind=row.kind, tenant=row.tenant, owner_id=owner_id, token=row.token,
            attempt=row.attempt, max_attempts=row.max_attempts, lease_seconds=lease_seconds,
            claimed_at=now, lease_until=row.lease_until, payload=copy.deepcopy(row.payload),
            step=row.step, checkpoint=copy.deepcopy(row.checkpoint), wait=row.wait,
            labels=row.labels, principal=row.principal, claim=new_claim_id(), fresh=fresh,
        )  # fmt: skip

    def _complete(
        self, later: list[Callable[[], None]], outcomes: Sequence[tuple[Lease, JSON]]
    ) -> dict[str, TenureError | None]:
        answers: dict[str, TenureError | None] = {}
        for lease, result in outcomes:
            try:
                encoded = encode_json(result, "result", self._max_payload_bytes)
                row = self._guard(lease, "complete")
            except TenureError as exc:
                answers[lease.job_id] = exc
                continue
            row.state, row.result = JobState.SUCCEEDED, json.loads(encoded.text)
            row.lease_until, row.updated_at = None, self.now()
            self._event(
                row, EventType.JOB_SUCCEEDED, lease.token, lease.owner_id,
                result_bytes=encoded.size, result_sha256=encoded.sha256,
            )  # fmt: skip
            self._ended(later, row)
            answers[lease.job_id] = None
        return answers

    def _ended(self, later: list[Callable[[], None]], row: JobRow) -> None:
        """The job ended: a parent waiting for it is woken."""
        parent = self._rows.get(row.parent_id or "")
        wait = None if parent is None else parent.wait
        if (
            parent is not None
            and parent.state is JobState.WAITING
            and wait is not None
            and wait.wait_for is WaitFor.JOBS
            and row.id in wait.jobs
        ):
            parent.run_after = self.now()
            self._claimable(later, parent.kind)

    def _cancel_tree(
        self, later: list[Callable[[], None]], row: JobRow, by_parent: str | None = None
    ) -> None:
        now = self.now()
        was = row.state
        row.state, row.lease_until, row.updated_at = JobState.CANCELLED, None, now
        row.token = max(row.token + 1, int(now.timestamp() * 1_000_000) + 1)
        extra = {} if by_parent is None else {"by_parent": by_parent}
        self._event(row, EventType.JOB_CANCELLED, row.token, row.owner_id, was=was.value, **extra)
        token = row.token
        for _, on_cancelled in self._listeners:
            if on_cancelled is not None:
                later.append(functools.partial(on_cancelled, row.id, token))
        if by_parent is None:
            self._ended(later, row)
        for child in self._children(row.id):
            if child.state in OPEN:
                self._cancel_tree(later, child, by_parent=row.id)


def _expired(row: JobRow, now: datetime) -> bool:
    return row.state is JobState.RUNNING and row.lease_until is not None and row.lease_until <= now


def _holds(row: JobRow, now: datetime) -> bool:
    return row.state is JobState.RUNNING and row.lease_until is not None and row.lease_until > now
