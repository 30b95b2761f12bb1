"""The worker's port (`tenure.port.LeasePort`) in memory: jobs, leases and fencing tokens,
stages, waits, signals, timers, children, events, evidence and costs, in dicts behind one lock.
No SQL, no file. `tenure.testing.run_handler` runs a handler on it; a test can drive it by hand
too (`submit`, `claim_many`, `signal`, `cancel`, `expire_lease`).

It keeps the guarantees a handler relies on, as the ledger does:
- a write for a lease that is no longer held (another claim, a cancel, a lease past its end by
  this port's clock) raises `LeaseLost` and is recorded as `result_rejected`;
- a claim bumps the fencing token (to at least the clock in microseconds), a cancel bumps it
  too and ends the lease (and cancels the job's unfinished children);
- stages are write-ahead records: a later attempt replays the done ones, and one started and
  never finished is found `started` (the runtime then calls it in doubt);
- a wait settles at once if its signal, children or deadline allow, else suspends the job (no
  owner, no lease, the attempt not spent) until a signal, a child's end or its time wakes it.

Time is the injected `clock` (default: a `tenure.testing.clock.FakeClock`, which stands still
until moved): "the database's clock" is its `wall()`, so a lease, a timer or a backoff ends
when the test moves the clock, never by itself.

Not modelled: database outages, tenant and rollout machinery (limits, variants, held jobs,
labels), rate limits and budgets, retention, other processes, the watch of ended jobs, and
`overdue_stages` (a stage timeout is the worker's)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from tenure.backoff import backoff_delay
from tenure.budgets import Budget, check_amount, check_units
from tenure.clock import Clock
from tenure.errors import (
    IdempotencyConflict,
    InvalidArgument,
    SignalConflict,
    TenureError,
    TerminalJob,
)
from tenure.evidence import DocumentRef, Evidence, Reference, check_reference, reference_sha256
from tenure.rates import RateClaim, RateRule
from tenure.storage.waits import NEVER
from tenure.testing.clock import FakeClock
from tenure.testing.memory_jobs import OPEN, JobTables, stored_json
from tenure.types import (
    JSON,
    CancelReason,
    Effect,
    Event,
    EventType,
    ExtendResult,
    Job,
    JobState,
    Lease,
    Stage,
    StageKind,
    StageStatus,
)
from tenure.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_int, check_name, encode_json
from tenure.wait_state import WaitState
from tenure.waits import (
    ChildEnd,
    WaitOutcome,
    WaitRequest,
    decide,
    record_of,
    wait_document,
    waited_event,
)


class MemoryPort(JobTables):
    """`tenure.port.LeasePort` in memory, thread-safe (one lock). See the module docstring."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        default_max_attempts: int = 5,
    ) -> None:
        super().__init__(
            FakeClock() if clock is None else clock, max_payload_bytes, default_max_attempts
        )

    # -- the port's settings ------------------------------------------------------------------

    @property
    def where(self) -> str:
        return "memory"

    @property
    def parallel_writes(self) -> bool:
        return False

    @property
    def max_payload_bytes(self) -> int:
        return self._max_payload_bytes

    def close(self) -> None:
        """Nothing to release (the jobs stay readable)."""

    def on_claimable(
        self,
        callback: Callable[[str], None],
        on_cancelled: Callable[[str, int], None] | None = None,
    ) -> Callable[[], None]:
        entry = (callback, on_cancelled)
        with self._lock:
            self._listeners.append(entry)

        def stop() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(entry)

        return stop

    def has_tenant_limits(self) -> bool:
        return False

    # -- what a test does from outside ------------------------------------------------------

    def submit(
        self,
        kind: str,
        payload: JSON = None,
        *,
        tenant: str = "default",
        max_attempts: int | None = None,
        priority: int = 0,
        principal: str | None = None,
        idempotency_key: str | None = None,
        delay: float = 0.0,
        version: int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> str:
        """A new queued job (due `delay` seconds from now); its id. A key the tenant used
        before returns that job's id (same kind and payload) or raises `IdempotencyConflict`."""
        with self._tx() as later:
            job_id, _new = self._submit(
                later, kind, payload, tenant, max_attempts, priority, principal,
                idempotency_key, delay, version, labels, None,
            )  # fmt: skip
            return job_id

    def signal(self, job_id: str, name: str, payload: JSON = None) -> bool:
        """Send the job a signal, as `Ledger.signal` does: stored once per name (True); the
        same payload again is False, another `SignalConflict`; a new name to an ended job
        `TerminalJob`. A job waiting for it is woken."""
        name = check_name(name, "signal name")
        value, digest = stored_json(payload, "signal payload", self._max_payload_bytes)
        with self._tx() as later:
            row = self._row(job_id)
            if name in row.signals:
                if row.signals[name][1] != digest:
                    raise SignalConflict(f"job {job_id} already has a signal {name!r}")
                return False
            if row.state.terminal:
                raise TerminalJob(f"job {job_id} is already {row.state.value}")
            row.signals[name] = (value, digest)
            wait = row.wait if row.state is JobState.WAITING else None
            woke = wait is not None and wait.signals == (name,)
            if wait is not None and "pending" in wait.document and name in wait.signals:
                pending = [each for each in wait.signals if each != name]
                row.wait = WaitState.parse({**wait.document, "pending": pending})
            if woke:
                row.run_after = self.now()
                self._claimable(later, row.kind)
            self._event(row, EventType.SIGNAL_RECEIVED, row.token, None, name=name, woke=woke)
            return True

    def cancel(self, job_id: str) -> None:
        """Cancel a queued, running or waiting job and its unfinished descendants, each token
        bumped and its lease ended (`TerminalJob` for an ended job)."""
        with self._tx() as later:
            row = self._row(job_id)
            if row.state.terminal:
                raise TerminalJob(f"job {job_id} is already {row.state.value}")
            self._cancel_tree(later, row)

    def expire_lease(self, job_id: str) -> None:
        """End a running job's lease now, as if its holder had stopped renewing it: the holder's
        next write raises `LeaseLost`, and the job can be claimed again (a new attempt)."""
        with self._lock:
            row = self._row(job_id)
            if row.state is JobState.RUNNING:
                row.lease_until = self.now()

    def at_stage(
        self, name: str, action: Callable[[str], None], *, job_id: str | None = None
    ) -> None:
        """Call `action(job_id)` once, right after a step or effect named `name` wrote its
        `started` record (before its function runs) or a wait of that name (`signal:NAME`,
        `sleep#1`, `wait_job#1`) was settled or suspended: to cancel the job or end its lease
        in the middle of that stage."""
        with self._lock:
            self._hooks.append((name, job_id, action))

    # -- what a test reads ---------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        """Every job, in submission order."""
        with self._lock:
            return [self._job(row) for row in sorted(self._rows.values(), key=lambda r: r.seq)]

    def children(self, job_id: str) -> list[Job]:
        """The jobs this job spawned, in order."""
        return [job for job in self.jobs() if job.parent_id == job_id]

    def events(self, job_id: str) -> list[Event]:
        """The job's events, oldest first."""
        with self._lock:
            return [event for event in self._events if event.job_id == job_id]

    def effects(self, job_id: str) -> list[Effect]:
        """What each effect's function of the job was given, in order (one per start)."""
        with self._lock:
            return list(self._effects.get(job_id, []))

    def waits(self, job_id: str) -> list[WaitRequest]:
        """Every wait the job's handler asked, in order (a resumed wait is asked again)."""
        with self._lock:
            return list(self._waits.get(job_id, []))

    def costs(self, job_id: str) -> dict[int, tuple[int, float]]:
        """What each attempt reported spending: {attempt: (tokens, usd)}."""
        with self._lock:
            return {a: cost for (j, a), cost in self._costs.items() if j == job_id}

    # -- the port: claims and leases -----------------------------------------------------------

    def claim_many(
        self,
        owner_id: str,
        *,
        limit: int,
        kinds: Sequence[str] | None = None,
        lease_seconds: float = 90.0,
        kind_limits: Mapping[str, int] | None = None,
        variants: Mapping[str, Sequence[str]] | None = None,
        rescue: bool = True,
        rates: RateClaim | None = None,
        rescue_shared: bool = False,
    ) -> list[Lease]:
        # No dead versions: every claim looks for expired leases; no fleet: no rate limits.
        del rescue, rates, rescue_shared
        with self._tx() as later:
            return self._claim(later, owner_id, limit, kinds, lease_seconds, kind_limits, variants)

    def complete_and_claim(
        self,
        outcomes: Sequence[tuple[Lease, JSON]],
        owner_id: str,
        *,
        limit: int,
        kinds: Sequence[str] | None = None,
        lease_seconds: float = 90.0,
        variants: Mapping[str, Sequence[str]] | None = None,
        rescue: bool = True,
        rescue_shared: bool = False,
    ) -> tuple[dict[str, TenureError | None], list[Lease]]:
        del rescue, rescue_shared
        with self._tx() as later:
            answers = self._complete(later, outcomes)
            claimed = self._claim(later, owner_id, limit, kinds, lease_seconds, None, variants)
            return answers, claimed

    def extend_many(
        self, leases: Sequence[Lease], lease_seconds: float | None = None
    ) -> ExtendResult:
        renewed: dict[str, datetime] = {}
        lost: list[str] = []
        with self._lock:
            now = self.now()
            for lease in leases:
                row = self._held(lease)
                if row is None:
                    lost.append(lease.job_id)
                    self._reject(lease, EventType.HEARTBEAT_LOST, "extend")
                    continue
                seconds = lease.lease_seconds if lease_seconds is None else lease_seconds
                row.lease_until = now + timedelta(seconds=seconds)
                row.heartbeat_at = now
                renewed[lease.job_id] = row.lease_until
        return ExtendResult(renewed=renewed, lost=lost)

    def report_unconfirmed(self, lease: Lease, last_confirmed: datetime) -> None:
        with self._lock:
            row = self._rows.get(lease.job_id)
            if row is not None:
                self._event(
                    row, EventType.OWNERSHIP_UNKNOWN, lease.token, lease.owner_id,
                    operation=CancelReason.LEASE_UNCONFIRMED.value,
                    last_confirmed_lease_until=last_confirmed.isoformat(),
                )  # fmt: skip

    def lost_reason(self, job_id: str) -> CancelReason:
        with self._lock:
            row = self._rows.get(job_id)
        if row is None:
            return CancelReason.JOB_MISSING
        if row.state is JobState.CANCELLED:
            return CancelReason.CANCELLED
        return CancelReason.LEASE_LOST

    def get(self, job_id: str) -> Job:
        with self._lock:
            return self._job(self._row(job_id))

    def stages(self, job_id: str) -> list[Stage]:
        with self._lock:
            row = self._rows.get(job_id)
            return [] if row is None else [row.stages[p] for p in sorted(row.stages)]

    # -- the port: stages ----------------------------------------------------------------------

    def save_step(self, lease: Lease, step: int, checkpoint: JSON = None) -> None:
        value, _ = stored_json(checkpoint, "checkpoint", self._max_payload_bytes)
        with self._lock:
            row = self._guard(lease, "save_step")
            row.step, row.checkpoint, row.updated_at = step, value, self.now()
            self._event(row, EventType.STEP_SAVED, lease.token, lease.owner_id, step=step)

    def start_stage(
        self,
        /,
        lease: Lease,
        position: int,
        name: str,
        kind: StageKind,
        *,
        effect_key: str | None = None,
        timeout_seconds: float | None = None,
        **detail: Any,
    ) -> None:
        if kind is StageKind.EFFECT and effect_key is None:
            raise InvalidArgument(f"effect {name!r} needs its effect_key (what it sends)")
        with self._tx() as later:
            row = self._guard(lease, "start_stage")
            row.updated_at = self.now()
            started = Stage(position, name, kind, StageStatus.STARTED, lease.token, None)
            row.stages[position] = started
            event = EventType.STEP_STARTED
            if kind is StageKind.EFFECT:
                event = EventType.TOOL_REQUEST_STARTED
                in_doubt = bool(detail.get("in_doubt"))
                fx = Effect(name, str(effect_key), lease.token, in_doubt, row.id, None, lease.claim)
                self._effects.setdefault(row.id, []).append(fx)
            self._event(
                row, event, lease.token, lease.owner_id, key=effect_key,
                position=position, name=name, **detail,
            )  # fmt: skip
            self._hooked(later, row.id, name)

    def stage_raised(self, lease: Lease, position: int, error_type: str) -> None:
        with self._lock:
            row = self._guard(lease, "stage_raised")
            stage = row.stages.get(position)
            if stage is not None and (stage.kind, stage.status) == (
                StageKind.STEP,
                StageStatus.STARTED,
            ):
                del row.stages[position]
            self._event(
                row, EventType.STEP_FAILED, lease.token, lease.owner_id,
                position=position, error_type=error_type,
            )  # fmt: skip

    def finish_stage(
        self, lease: Lease, position: int, result: JSON, *, checkpoint: JSON = None
    ) -> str:
        encoded = encode_json(result, "stage result", self._max_payload_bytes)
        limit = self._max_payload_bytes
        saved = None if checkpoint is None else stored_json(checkpoint, "checkpoint", limit)
        with self._lock:
            row = self._guard(lease, "finish_stage")
            row.step, row.updated_at = position + 1, self.now()
            if saved is not None:
                row.checkpoint = saved[0]
            stage = row.stages.get(position)
            if stage is not None:
                row.stages[position] = Stage(
                    position, stage.name, stage.kind, StageStatus.DONE, stage.token,
                    json.loads(encoded.text),
                )  # fmt: skip
            self._event(
                row, EventType.STEP_DONE, lease.token, lease.owner_id,
                position=position, result_bytes=encoded.size, result_sha256=encoded.sha256,
            )  # fmt: skip
        return encoded.text

    # -- the port: outcomes --------------------------------------------------------------------

    def complete(self, lease: Lease, result: JSON = None) -> None:
        answer = self.complete_many([(lease, result)])[lease.job_id]
        if answer is not None:
            raise answer

    def complete_many(
        self, outcomes: Sequence[tuple[Lease, JSON]]
    ) -> dict[str, TenureError | None]:
        with self._tx() as later:
            return self._complete(later, outcomes)

    def fail(
        self,
        lease: Lease,
        error: JSON,
        *,
        retryable: bool = True,
        retry_in: float | None = None,
        token_floor: int | None = None,
    ) -> JobState:
        if isinstance(error, str):
            error = {"code": "error", "message": error}
        value, _ = stored_json(error, "error", self._max_payload_bytes)
        with self._tx() as later:
            row = self._guard(lease, "fail")
            now = self.now()
            again = retryable and row.attempt < row.max_attempts
            if again:
                delay = retry_in if retry_in is not None else backoff_delay(row.attempt, 1.0, 300.0)
                row.state, row.owner_id = JobState.QUEUED, None
                row.run_after = now + timedelta(seconds=delay)
            else:
                row.state = JobState.FAILED
            row.lease_until, row.error, row.updated_at = None, value, now
            row.token = max(row.token, token_floor or 0)
            code = value.get("code") if isinstance(value, dict) else None
            self._event(
                row, EventType.JOB_RETRY_SCHEDULED if again else EventType.JOB_FAILED,
                lease.token, lease.owner_id, code=code, retryable=retryable,
                attempt=row.attempt, run_after=row.run_after.isoformat(),
            )  # fmt: skip
            if again:
                self._claimable(later, row.kind)
            else:
                self._ended(later, row)
                for child in self._children(row.id):
                    if child.state in OPEN:
                        self._cancel_tree(later, child, by_parent=row.id)
            return row.state

    def release(self, lease: Lease) -> None:
        self.rate_limited(lease, None, 0.0)

    def hold_for_budget(self, lease: Lease, seen: Budget | None = None) -> None:  # no budgets
        self.rate_limited(lease, None, 1e10)

    def rate_limited(self, lease: Lease, rule: RateRule | None, retry_after: float) -> None:
        del rule  # no rate keys here (see claim_many)
        with self._tx() as later:
            row = self._guard(lease, "release")
            now = self.now()
            row.state, row.owner_id, row.lease_until = JobState.QUEUED, None, None
            row.attempt, row.updated_at = row.attempt - 1, now
            row.run_after, why = now + timedelta(seconds=retry_after), dict[str, Any]()
            if retry_after:
                why = {"reason": "rate_limited", "retry_after": retry_after}
            self._event(row, EventType.JOB_RELEASED, lease.token, lease.owner_id, **why)
            self._claimable(later, row.kind)

    def record(self, /, lease: Lease, event: EventType, **detail: Any) -> None:
        with self._lock:
            row = self._rows.get(lease.job_id)
            if row is not None:
                self._event(row, event, lease.token, lease.owner_id, **detail)

    # -- the port: runs that wait --------------------------------------------------------------

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
        del budget  # budgets are the database's (see `budget`)
        key = f"tenure-child:{lease.job_id}:{name}"
        with self._tx() as later:
            parent = self._row(lease.job_id)
            try:
                child_id, new = self._submit(
                    later, kind, payload, parent.tenant, max_attempts, priority or 0,
                    parent.principal if principal is None else principal, key, 0.0, None, None,
                    parent.id,
                )  # fmt: skip
            except IdempotencyConflict:
                raise InvalidArgument(
                    f"child {name!r} of job {lease.job_id} was spawned before with another "
                    "kind or payload: a spawn must keep its name, kind and payload"
                ) from None
            if new:
                self._event(
                    parent, EventType.CHILD_SPAWNED, lease.token, lease.owner_id,
                    child=child_id, kind=kind, name=name,
                )  # fmt: skip
            return child_id, new

    def wait_on(self, lease: Lease, request: WaitRequest) -> WaitOutcome:
        with self._tx() as later:
            row = self._guard(lease, "wait")
            now = self.now()
            self._waits.setdefault(row.id, []).append(request)
            signals = {n: row.signals[n][0] for n in request.signals if n in row.signals}
            found = [
                ChildEnd(c.id, c.state, c.result, c.error)
                for c in self._children(row.id)
                if c.id in request.jobs
            ]
            outcome, until = decide(request, now, signals, found)
            if outcome.strangers:
                return outcome
            if outcome.result is not None:
                result = record_of(outcome.result)
                row.stages[request.position] = Stage(
                    request.position, request.name, StageKind.WAIT, StageStatus.DONE,
                    lease.token, result,
                )  # fmt: skip
                row.step, row.updated_at = request.position + 1, now
                self._event(
                    row, EventType.STEP_DONE, lease.token, lease.owner_id,
                    position=request.position, name=request.name,
                )  # fmt: skip
            else:
                document = wait_document(request, until, signals)
                row.state, row.owner_id, row.lease_until = JobState.WAITING, None, None
                row.attempt, row.wait = row.attempt - 1, WaitState.parse(document)
                row.run_after, row.updated_at = until or NEVER, now
                row.stages[request.position] = Stage(
                    request.position, request.name, StageKind.WAIT, StageStatus.STARTED,
                    lease.token, None,
                )  # fmt: skip
                shown = waited_event(document)
                self._event(row, EventType.JOB_WAITING, lease.token, lease.owner_id, **shown)
            self._hooked(later, row.id, request.name)
            return outcome

    # -- the port: costs and evidence ----------------------------------------------------------

    def report_cost(
        self,
        job_id: str,
        attempt: int,
        tokens: int = 0,
        usd: float = 0.0,
        units: Mapping[str, float] | None = None,
        **_: bool,  # budgeted: no budgets in memory
    ) -> Budget | None:
        check_amount(usd, "usd")  # refused as a ledger refuses them; not kept (no budgets)
        check_int(tokens, "tokens", 0)
        if units:
            check_units(units, "cost")
        with self._lock:
            was = self._costs.get((job_id, attempt), (0, 0.0))
            self._costs[(job_id, attempt)] = (was[0] + tokens, was[1] + usd)
        return None

    def record_evidence(
        self, lease: Lease, ref: Reference, *, retriever: str | None = None
    ) -> None:
        ref = check_reference(ref)
        with self._lock:
            row = self._guard(lease, "record_evidence")
            kept = self._evidence.setdefault(row.id, {})
            digest = reference_sha256(ref)
            if digest not in kept:
                self._seq += 1
                kept[digest] = Evidence(
                    self._seq, ref, retriever, lease.token, row.attempt, self.now()
                )

    def evidence(self, job_id: str) -> list[Evidence]:
        with self._lock:
            self._row(job_id)
            return list(self._evidence.get(job_id, {}).values())

    def cached_refs(self, tenant: str, key: str) -> list[DocumentRef] | None:
        with self._lock:
            cached = self._cache.get((tenant, key))
            if cached is None or cached[1] <= self.now():
                return None
            return list(cached[0])

    def cache_refs(
        self, tenant: str, key: str, retriever: str, refs: list[DocumentRef], ttl_seconds: float
    ) -> None:
        with self._lock:
            until = self.now() + timedelta(seconds=ttl_seconds)
            self._cache[(tenant, key)] = (list(refs), until)

    def record_retrieval(self, /, lease: Lease, **detail: Any) -> None:
        self.record(lease, EventType.EVIDENCE_RETRIEVED, **detail)
