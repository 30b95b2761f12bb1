"""What both SQL stores share: reads, one-statement writes, the limited claim and the fence
transaction, written once over a small dialect seam.

A dialect (a subclass) says how to run a named query outside a transaction (`_read_rows`,
`_write_rows`), how to open one transaction (`_transaction`, which yields a `Tx`), how a list of
strings is bound (`_array`), how a claim runs inside a transaction (`_exchange_in`), and which
errors of its driver mean an outage (see `classify` of each dialect). Everything else of
the `Store` protocol that is not here is a write whose statements differ between dialects.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any

from tenure.rates import RateClaim
from tenure.storage.base import (
    NOTHING_TO_PUBLISH,
    ApiKeyRecord,
    ClaimRequest,
    FenceHighest,
    FenceRecord,
    KeyedJob,
    PrincipalFilter,
    Store,
)
from tenure.storage.limits import WINDOW_PER_SLOT, LimitPlan, RateBook
from tenure.storage.rows import (
    Decoder,
    Row,
    api_key_from_row,
    event_from_row,
    event_totals_from_row,
    fence_record_from_row,
    held_by,
    job_from_row,
    overdue_from_row,
    queue_figure_from_row,
    stage_from_row,
    tenant_from_row,
)
from tenure.storage.seam import Params, Tx
from tenure.storage.sql_budgets import SqlBudgets
from tenure.storage.sql_evidence import SqlEvidence, evidence_of_job
from tenure.storage.sql_schedules import SqlSchedules
from tenure.types import (
    JSON,
    Event,
    EventTotals,
    EventType,
    Job,
    JobState,
    Lease,
    OnTrip,
    OverdueStages,
    QueueFigure,
    Rollout,
    RolloutJob,
    RolloutState,
    Stage,
    TenantRecord,
)
from tenure.wait_state import WaitFor
from tenure.waits import (
    ChildEnd,
    WaitOutcome,
    WaitRequest,
    decide,
    record_of,
    wait_document,
    waited_event,
)


class SqlStore(SqlEvidence, SqlSchedules, SqlBudgets, Store, ABC):
    """The dialect-independent half of a `Store`. See the module docstring."""

    decode: Decoder

    # -- the dialect seam --------------------------------------------------------------------

    @abstractmethod
    def _read_rows(self, name: str, params: Params | None = None) -> Sequence[Row]:
        """Run a named read query on its own."""

    @abstractmethod
    def _write_rows(self, name: str, params: Params | None = None) -> Sequence[Row]:
        """Run a named one-statement write in its own transaction."""

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Tx]:
        """One transaction, serialised against other writers where the dialect needs it."""

    @abstractmethod
    def _array(self, values: Sequence[str] | None) -> Any:
        """A list of strings as the dialect binds it (None stays None)."""

    @abstractmethod
    def _exchange_in(self, tx: Tx, request: ClaimRequest) -> list[Lease]:
        """Settle expired leases and claim as `request` says, inside `tx`."""

    def _time_param(self, when: datetime) -> Any:
        """A time as the dialect binds it."""
        return when

    def _write_steps(self, tx: Tx, name: str, params: Params) -> Sequence[Row]:
        """A write that is one statement here (a dialect without data-modifying CTEs runs
        its further statements after it)."""
        return tx.rows(name, params)

    def _limited_claim_lock(self, tx: Tx) -> None:
        """Serialise limited claims (a dialect whose transactions already are need nothing)."""
        del tx

    # -- claims ------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The database's clock."""
        return self.decode.time(self._read_rows("now")[0]["now"])

    def claim(self, request: ClaimRequest) -> list[Lease]:
        """Settle expired leases and take up to `request.limit` claimable jobs, atomically."""
        return self.exchange(NOTHING_TO_PUBLISH, request)[1]

    def limited_claim(
        self,
        request: ClaimRequest,
        kind_limits: Mapping[str, int],
        rates: RateClaim | None = None,
    ) -> list[Lease]:
        """A claim within the tenants' and kinds' concurrency limits and the kinds' rate limits
        (see storage.limits)."""
        with self._transaction() as tx:
            self._limited_claim_lock(tx)
            tenant_limits = {
                row["name"]: int(row["max_running"]) for row in tx.rows("tenant_limits")
            }
            plan = LimitPlan.of(tenant_limits, kind_limits, tx.rows("limited_claim__running"))
            book = None
            full_kinds = plan.full_kinds
            if rates is not None and rates.rules:
                now = float(tx.rows("limited_claim__clock")[0]["now"])
                book = RateBook(
                    rates,
                    now,
                    lambda keys: tx.rows("limited_claim__rates", {"keys": self._array(keys)}),
                )
                full_kinds = sorted({*full_kinds, *book.full_kinds(request.kinds or rates.rules)})
            window = tx.rows(
                "limited_claim__window",
                {
                    "kinds": self._array(request.kinds),
                    "pinned": self._array(request.pinned),
                    "pinned_kinds": self._array(request.pinned_kinds),
                    "full_tenants": self._array(plan.full_tenants),
                    "full_kinds": self._array(full_kinds),
                    "keyed_kinds": self._array(rates.keyed_kinds() if rates else []),
                    "window": request.limit * WINDOW_PER_SLOT,
                },
            )
            if book is None:
                chosen = plan.choose(window, request.limit)
            else:
                keys = book.keys(window, self.decode.json)
                chosen = plan.choose(
                    book.in_turns(window, keys),
                    request.limit,
                    lambda row: book.take(keys.get(str(row["id"])), row["tenant"]),
                )
                if moved := book.written():
                    tx.rows("limited_claim__rates_moved", {"moved": json.dumps(moved)})
                book.finish()
            # Even with nothing to take, the claim settles expired last attempts (and so wakes
            # the parents that wait for them), as every claim does.
            return self._exchange_in(tx, replace(request, limit=len(chosen), only_ids=chosen))

    def hold_rate_key(self, key: str, seconds: float) -> None:
        """No claim of the key for `seconds` from the database's now (a provider's 429)."""
        self._write_rows("hold_rate_key", {"key": key, "seconds": seconds})

    def tenant_limits(self) -> dict[str, int]:
        """Every tenant's concurrency limit."""
        return {row["name"]: int(row["max_running"]) for row in self._read_rows("tenant_limits")}

    def set_tenant_limit(self, tenant: str, limit: int | None) -> None:
        """Set (or with None, remove) a tenant's concurrency limit."""
        if limit is None:
            self._write_rows("set_tenant_limit__clear", {"name": tenant})
        else:
            self._write_rows("set_tenant_limit", {"name": tenant, "n": limit})

    # -- rollouts ----------------------------------------------------------------------------

    def start_rollout(self, rollout: Rollout) -> bool:
        tenants = None if rollout.tenants is None else json.dumps(rollout.tenants)
        params = {
            "kind": rollout.kind,
            "variant": rollout.variant,
            "tenants": tenants,
            "percent": rollout.percent,
            "max_failure_rate": rollout.max_failure_rate,
            "max_cost_ratio": rollout.max_cost_ratio,
            "min_jobs": rollout.min_jobs,
            "on_trip": rollout.on_trip,
        }
        return bool(self._write_rows("start_rollout", params))

    def rollouts(self) -> list[Rollout]:
        return [
            Rollout(
                kind=row["kind"],
                variant=row["variant"],
                tenants=self.decode.json(row["tenants"]),
                percent=float(row["percent"]),
                max_failure_rate=row["max_failure_rate"],
                max_cost_ratio=row["max_cost_ratio"],
                min_jobs=int(row["min_jobs"]),
                on_trip=OnTrip(row["on_trip"]),
                state=RolloutState(row["state"]),
                started_at=self.decode.time(row["started_at"]),
                tripped_at=None
                if row["tripped_at"] is None
                else self.decode.time(row["tripped_at"]),
                trip=self.decode.json(row["trip"]),
            )
            for row in self._read_rows("rollouts")
        ]

    def stop_rollout(self, kind: str) -> bool:
        return bool(self._write_rows("stop_rollout", {"kind": kind}))

    def trip_rollout(self, kind: str, trip_json: str) -> bool:
        return bool(self._write_rows("trip_rollout", {"kind": kind, "trip": trip_json}))

    def job_cost(self, job_id: str) -> tuple[int, float] | None:
        rows = self._read_rows("job_cost", {"job_id": job_id})
        return (int(rows[0]["tokens"]), float(rows[0]["usd"])) if rows else None

    def rollout_jobs(self, kind: str, tenant: str | None = None) -> list[RolloutJob]:
        rows = self._read_rows("rollout_jobs", {"kind": kind, "tenant": tenant})
        return [
            RolloutJob(
                variant=row["variant"],
                state=JobState(row["state"]),
                attempt=int(row["attempt"]),
                created_at=self.decode.time(row["created_at"]),
                updated_at=self.decode.time(row["updated_at"]),
                tokens=int(row["tokens"]),
                usd=float(row["usd"]),
                in_doubt=int(row["in_doubt"]),
            )
            for row in rows
        ]

    # -- waits -------------------------------------------------------------------------------

    def wait(self, lease: Lease, request: WaitRequest) -> WaitOutcome | None:
        """Lock the job under its lease, read what it waits for, then settle or suspend it:
        three statements in one transaction (see `storage.waits`)."""
        held = held_by(lease)
        with self._transaction() as tx:
            locked = tx.rows("wait__lock", held)
            if not locked:
                return None
            now = self.decode.time(locked[0]["now"])
            signals: dict[str, JSON] = {}
            children: list[ChildEnd] = []
            if request.wait_for is WaitFor.SIGNAL:
                for name in request.signals:  # one statement per name: at most 16
                    found = tx.rows("wait__signal", {"job_id": lease.job_id, "name": name})
                    for row in found:
                        signals[name] = self.decode.json(row["payload"])
            elif request.wait_for is WaitFor.JOBS:
                ids = {"job_id": lease.job_id, "ids": self._array(request.jobs)}
                children = [
                    ChildEnd(
                        id=str(row["id"]),
                        state=JobState(row["state"]),
                        result=self.decode.json(row["result"]),
                        error=self.decode.json(row["error"]),
                    )
                    for row in tx.rows("wait__children", ids)
                ]
            outcome, until = decide(request, now, signals, children)
            if outcome.strangers:
                return outcome
            stage = {**held, "position": request.position, "name": request.name}
            if outcome.result is not None:
                result = record_of(outcome.result)
                detail = {**request.detail, "outcome": next(iter(result))}
                self._write_steps(
                    tx,
                    "wait__settle",
                    {**stage, "result": _dumps(result), "detail": _dumps(detail)},
                )
                return outcome
            document = wait_document(request, until, signals)
            suspend = {
                **stage,
                "wait": _dumps(document),
                "until": None if until is None else self._time_param(until),
                "detail": _dumps({**request.detail, **waited_event(document)}),
            }
            self._write_steps(tx, "wait__suspend", suspend)
            return outcome

    def children(self, job_id: str) -> list[Job]:
        """The jobs this job spawned, in submission order."""
        rows = self._read_rows("children", {"job_id": job_id})
        return [job_from_row(row, self.decode) for row in rows]

    # -- reading -----------------------------------------------------------------------------

    def find_by_key(self, tenant: str, idempotency_key: str) -> KeyedJob | None:
        """The job holding the key, if any."""
        rows = self._read_rows(
            "find_by_key", {"tenant": tenant, "idempotency_key": idempotency_key}
        )
        if not rows:
            return None
        return KeyedJob(rows[0]["id"], rows[0]["kind"], rows[0]["payload_sha256"])

    def ended_among(self, job_ids: Sequence[str]) -> set[str]:
        """Which of `job_ids` have ended (one statement: the waiters' sweep)."""
        rows = self._read_rows("ended_among", {"ids": self._array(job_ids)})
        return {str(row["id"]) for row in rows}

    def get(self, job_id: str) -> Job | None:
        """The job, or None."""
        rows = self._read_rows("get", {"job_id": job_id})
        if not rows:
            return None
        evidence = evidence_of_job(self.decode.json(rows[0]["evidence"]))
        return replace(job_from_row(rows[0], self.decode), evidence=evidence)

    def list_jobs(
        self,
        state: JobState | None,
        kind: str | None,
        tenant: str | None,
        limit: int,
        after: str | None,
        principals: PrincipalFilter | None = None,
    ) -> list[Job]:
        """Newest first, filtered, paged by `after`."""
        rows = self._read_rows(
            "list_jobs",
            {
                "state": None if state is None else state.value,
                "kind": kind,
                "tenant": tenant,
                "limit": limit,
                "after": after,
                "principal": None if principals is None else principals.principal,
                "prefix": None if principals is None else principals.prefix,
            },
        )
        return [job_from_row(row, self.decode) for row in rows]

    def count_by_state(self, kind: str | None, tenant: str | None) -> dict[JobState, int]:
        """How many jobs are in each state."""
        rows = self._read_rows("count_by_state", {"kind": kind, "tenant": tenant})
        return {JobState(row["state"]): int(row["n"]) for row in rows}

    def events(self, job_id: str) -> list[Event]:
        """The job's events in order."""
        rows = self._read_rows("events", {"job_id": job_id})
        return [event_from_row(row, self.decode) for row in rows]

    def stages(self, job_id: str) -> list[Stage]:
        """The job's recorded steps and effects."""
        rows = self._read_rows("stages", {"job_id": job_id})
        return [stage_from_row(row, self.decode) for row in rows]

    def record_event(
        self,
        job_id: str,
        type: EventType,
        token: int | None,
        owner_id: str | None,
        detail_json: str,
    ) -> bool:
        """Append an event in its own transaction; False if the job does not exist."""
        params = {
            "job_id": job_id,
            "type": type,
            "token": token,
            "owner_id": owner_id,
            "detail": detail_json,
        }
        return bool(self._write_rows("record_event", params))

    def purge_preview(self, older_than: float, keep_keys: float) -> tuple[int, int]:
        """How many jobs a purge with these ages would delete now, and keep for their keys."""
        row = self._read_rows("purge_preview", {"older_than": older_than, "keep_keys": keep_keys})
        return int(row[0]["jobs"] or 0), int(row[0]["kept_for_keys"] or 0)

    # -- operations: figures and tenants -----------------------------------------------------

    def queue_figures(self, by_tenant: bool) -> list[QueueFigure]:
        """Counts and lease figures per kind (and tenant) and state, at one clock reading."""
        rows = self._read_rows("queue_figures", {"by_tenant": by_tenant})
        return [queue_figure_from_row(row) for row in rows]

    def overdue_stages(self, by_tenant: bool) -> list[OverdueStages]:
        rows = self._read_rows("overdue_stages", {"by_tenant": by_tenant})
        return [overdue_from_row(row) for row in rows]

    def declare_labels(self, kinds_json: str) -> None:
        self._write_rows("declare_labels", {"kinds": kinds_json})

    def declared_labels(self) -> dict[str, dict[str, str | None]]:
        rows = self._read_rows("declared_labels")
        return {row["kind"]: self.decode.json(row["labels"]) for row in rows}

    def event_totals(self, by_tenant: bool) -> list[EventTotals]:
        """Recovery event counts per kind (and tenant)."""
        rows = self._read_rows("event_totals", {"by_tenant": by_tenant})
        return [event_totals_from_row(row) for row in rows]

    def add_api_key(
        self, tenant: str, key_id: str, key_sha256: str, principal: str | None = None
    ) -> bool:
        """Another key for an existing tenant."""
        params = {
            "tenant": tenant,
            "key_id": key_id,
            "key_sha256": key_sha256,
            "principal": principal,
        }
        return bool(self._write_rows("add_api_key", params))

    def api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id."""
        rows = self._read_rows("api_key", {"key_id": key_id})
        return api_key_from_row(rows[0], self.decode) if rows else None

    def api_keys(self, tenant: str | None) -> list[ApiKeyRecord]:
        """The keys of `tenant`, or of every tenant."""
        rows = self._read_rows("api_keys", {"tenant": tenant})
        return [api_key_from_row(row, self.decode) for row in rows]

    def revoke_api_keys(self, tenant: str, key_id: str | None) -> int:
        """Revoke live keys; how many."""
        return len(self._write_rows("revoke_api_keys", {"tenant": tenant, "key_id": key_id}))

    def tenants(self) -> list[TenantRecord]:
        """Every tenant, by name."""
        return [tenant_from_row(row, self.decode) for row in self._read_rows("tenants")]

    # -- the fence receiver ------------------------------------------------------------------

    @contextmanager
    def fence_transaction(self) -> Iterator[SqlFenceTx]:
        """One transaction for a fence decision; the scope's lock serialises decisions."""
        with self._transaction() as tx:
            yield SqlFenceTx(tx, self.decode)

    def fence_finish(self, scope: str, key: str, token: int, result_json: str) -> bool:
        """Store the result of a running key; False if it is no longer ours."""
        params = {"scope": scope, "key": key, "fence": token, "result": result_json}
        return bool(self._write_rows("fence_finish", params))

    def fence_forget(self, scope: str, key: str, token: int) -> None:
        """Drop a running key whose function failed."""
        self._write_rows("fence_forget", {"scope": scope, "key": key, "fence": token})

    def fence_lookup(self, key: str, scope: str | None) -> FenceRecord | None:
        """The record of `key` in `scope` (None: the newest in any scope), without locking."""
        rows = self._read_rows("fence_lookup", {"key": key, "scope": scope})
        return fence_record_from_row(rows[0], self.decode) if rows else None


class SqlFenceTx:
    """The steps of one fence decision, inside the transaction that holds the scope's lock."""

    def __init__(self, tx: Tx, decode: Decoder) -> None:
        self._tx = tx
        self._decode = decode

    def highest(self, scope: str) -> FenceHighest:
        """Lock the scope (creating it at 0) and return its highest accepted fence."""
        self._tx.rows("fence_highest__lock", {"scope": scope})
        row = self._tx.rows("fence_highest", {"scope": scope})[0]
        return FenceHighest(int(row["highest"]), row["holder"])

    def get(self, scope: str, key: str) -> FenceRecord | None:
        """The record of `key` in `scope`, locked."""
        rows = self._tx.rows("fence_get", {"scope": scope, "key": key})
        return fence_record_from_row(rows[0], self._decode) if rows else None

    def begin(self, key: str, scope: str, token: int) -> None:
        """Mark `key` as running under `fence`."""
        self._tx.rows("fence_begin", {"key": key, "scope": scope, "fence": token})

    def raise_highest(self, scope: str, token: int, holder: str | None) -> None:
        """highest := max(highest, fence), with its holder (see `FenceTx.raise_highest`)."""
        params = {"scope": scope, "fence": token, "holder": holder}
        self._tx.rows("fence_raise_highest", params)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
