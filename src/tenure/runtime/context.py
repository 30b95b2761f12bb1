"""What a handler sees: its job, cancellation, and durable steps and effects."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import json
import logging
import threading
import warnings
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tenure import tracing
from tenure.asking import Ask
from tenure.awaitable import on_a_thread
from tenure.budgets import Budget, BudgetExhausted, check_units
from tenure.errors import (
    InvalidArgument,
    JobCancelled,
    LeaseLost,
    NonRetryable,
    OwnershipUnknown,
    StageMismatch,
    StaleFence,
    TenureError,
)
from tenure.evidence import DocumentRef, Reference
from tenure.runtime.evidence import child_principal, recheck_evidence, retrieve
from tenure.runtime.stage_names import StageNames
from tenure.types import (
    JSON,
    CancelReason,
    Effect,
    EventType,
    Stage,
    StageKind,
    StageStatus,
    WorkerCount,
)
from tenure.validation import check_job_id, check_name, encode_json
from tenure.wait_state import WaitFor
from tenure.waits import (
    WaitOutcome,
    WaitRequest,
    WaitResult,
    children_value,
    result_of,
    signal_questions,
    signal_value,
    signals_value,
    wait_seconds,
)

if TYPE_CHECKING:
    from tenure.port import LeasePort
    from tenure.runtime.keeper import LeaseKeeper
    from tenure.runtime.run import JobRun


class Suspended(BaseException):
    """The job now waits (no lease): the handler unwinds and the worker moves on. Raised by a
    wait whose condition does not hold yet; never catch it."""


def effect_key(job_id: str, name: str) -> str:
    """The stable idempotency key of a job's effect."""
    return f"tool-job:{job_id}:{name}"


@dataclass(slots=True)
class _Plan:
    position: int
    name: str
    kind: StageKind
    replayed: bool = False
    result: JSON = None
    in_doubt: bool = False


class JobContext:
    """The running job as its handler sees it. Created by the worker, one per attempt."""

    def __init__(
        self,
        run: JobRun,
        port: LeasePort,
        keeper: LeaseKeeper,
        recorded: list[Stage],
        envelope: dict[str, Any] | None = None,
    ) -> None:
        lease = run.lease
        self.job_id = lease.job_id
        self.kind = lease.kind
        self.tenant = lease.tenant
        self.token = lease.token
        self.attempt = lease.attempt
        self.payload = lease.payload
        # The rollout variant the job got at submit (None: stable): a model, a prompt version.
        self.variant = lease.variant
        # Whom the job acts for, as its submit said (a child: its parent's, or narrower).
        self.principal = lease.principal
        self._run = run
        self._port = port
        self._keeper = keeper
        self._recorded = {stage.position: stage for stage in recorded}
        self._next_position = 0
        self._effect_names: set[str] = set()
        self._names = StageNames()
        self._lock = threading.Lock()
        self._envelope = envelope if envelope is not None else {}

    # -- cancellation ------------------------------------------------------------------------

    @property
    def cancelled(self) -> threading.Event:
        """Set when the lease is lost, the job cancelled, a timeout passes or the worker stops."""
        return self._run.cancelled

    @property
    def cancel_reason(self) -> CancelReason | None:
        """lease_lost, ownership_unknown, stage_timeout, max_lease_lifetime or shutdown."""
        return self._run.cancel_reason

    @property
    def lease_until(self) -> datetime:
        """The lease end the database last confirmed."""
        return self._run.lease_until

    def report_cost(self, *, tokens: int = 0, usd: float = 0.0, **units: float) -> Budget | None:
        """Record what this attempt spent (a rollout compares it by variant), charged with the
        app's own `units` (`calls=1`) to the budgets of the job's run in the same write; what
        the run has left (None: no budget). A report that takes the run over its budget
        raises `BudgetExhausted`: the job ends `failed`, code `budget_exhausted`."""
        budgeted = self._run.lease.budgeted
        left = self._port.report_cost(
            self.job_id, self.attempt, tokens, usd, units, budgeted=budgeted
        )
        self._keeper.spent(self._run, {"tokens": tokens, "usd": usd, **units})
        if (seen := self._run.saw(left)) is not None and seen.over:
            raise BudgetExhausted("this report took the run over its budget")
        return left

    def budget(self) -> Budget | None:
        """What the job's run may still spend, per unit (None: no budget): ask before a call."""
        return self._run.saw(self._port.budget(self.job_id))

    def check(self) -> None:
        """Raise `JobCancelled` if the job may no longer go on."""
        if self._run.cancelled.is_set():
            raise JobCancelled(self._run.cancel_reason)

    # -- the checkpoint ----------------------------------------------------------------------

    @property
    def checkpoint(self) -> dict[str, Any]:
        """A copy of the job's checkpoint envelope (see `tenure.runtime.checkpoints`)."""
        with self._lock:
            return copy.deepcopy(self._envelope)

    def evidence(self, ref: Reference, *, retriever: str | None = None) -> None:
        """Record what the job relied on: a `DocumentRef`, `CodeResult` or `MediaRef`
        (references, never content). Written at once with this attempt's token (`LeaseLost`
        if the lease is gone: a stale owner adds no evidence), shown by `Job.evidence`, and
        kept in the checkpoint's "evidence" list. `retriever` names the registered retriever
        whose recheck and current_version judge a document ref at a resume."""
        self._port.record_evidence(self._run.lease, ref, retriever=retriever)
        self._note(ref)

    def recheck_evidence(self) -> None:
        """Recheck the job's recorded document refs (see `tenure.checks.evidence_still_valid`):
        raises `ResumeRefused` with `evidence_revoked` or `evidence_changed`."""
        recheck_evidence(self._port, self._run.lease, self._run.rules)

    def retrieve(self, name: str, query: str, limit: int = 5) -> list[DocumentRef]:
        """Search the app's retriever `name` for this job's principal and tenant: its
        permissions limit the candidates, a cached result (same tenant, permission version,
        index version, normalised query and limit) or the search answers, its recheck drops
        what is no longer allowed, and the refs returned are recorded as evidence."""
        refs = retrieve(self._port, self._run.lease, self._run.rules, name, query, limit)
        for ref in refs:
            self._note(ref)
        return refs

    aretrieve = on_a_thread(retrieve)

    def note_evidence(self, reference: str) -> None:
        """Deprecated (use `evidence` with a typed reference): add a reference string to the
        checkpoint only; saved with the next recorded stage."""
        warnings.warn(
            "ctx.note_evidence is deprecated: record a tenure.DocumentRef, CodeResult or "
            "MediaRef with ctx.evidence(ref)",
            DeprecationWarning,
            stacklevel=2,
        )
        with self._lock:
            self._envelope.setdefault("evidence", []).append(str(reference))

    def _note(self, ref: Reference) -> None:
        with self._lock:
            noted = {"type": ref.type, **dataclasses.asdict(ref)}
            self._envelope.setdefault("evidence", []).append(noted)

    def note_approval(self, summary: Any) -> None:
        """Add an approval summary (who approved what, when) to the checkpoint; saved with
        the next recorded stage."""
        with self._lock:
            self._envelope.setdefault("approvals", []).append(summary)

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call `callback` (no arguments) on cancellation: stop a subprocess, close a socket."""
        self._run.on_cancel(callback)

    # -- steps and effects -------------------------------------------------------------------

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run `fn` once: its JSON result is recorded, and a resumed job gets it back unrun.

        A step is a computation safe to re-run: one found in doubt (started, no result) runs
        again after `step_in_doubt` is recorded.
        """
        plan = self._begin(name, StageKind.STEP)
        if plan.replayed:
            return self._replayed(plan)
        with self._span(plan):
            try:
                result = fn()
            except Exception as exc:
                self._step_raised(plan, exc)
                raise
            return self._end(plan, result)

    def effect(self, name: str, fn: Callable[[Effect], Any]) -> Any:
        """Act on the world once per key: `fn(fx)` must send `fx.key` and `fx.token`.

        Refused (`OwnershipUnknown`) unless the lease is confirmed for at least one more
        heartbeat plus jitter. A recorded effect returns its result without running.
        """
        plan = self._begin(name, StageKind.EFFECT)
        if plan.replayed:
            return self._replayed(plan)
        with self._span(plan):
            try:
                result = fn(self._effect(plan))
            except StaleFence as refusal:
                self._effect_refused(plan, refusal)
                raise
            return self._end(plan, result)

    async def astep(self, name: str, fn: Callable[[], Any]) -> Any:
        """`step` for async handlers; `fn` may be sync (run in a thread) or async."""
        plan = await asyncio.to_thread(self._begin, name, StageKind.STEP)
        if plan.replayed:
            return self._replayed(plan)
        with self._span(plan):
            try:
                result = await _call(fn)
            except Exception as exc:
                await asyncio.to_thread(self._step_raised, plan, exc)
                raise
            return await asyncio.to_thread(self._end, plan, result)

    async def aeffect(self, name: str, fn: Callable[[Effect], Any]) -> Any:
        """`effect` for async handlers; `fn(fx)` may be sync (run in a thread) or async."""
        plan = await asyncio.to_thread(self._begin, name, StageKind.EFFECT)
        if plan.replayed:
            return self._replayed(plan)
        with self._span(plan):
            try:
                result = await _call(fn, self._effect(plan))
            except StaleFence as refusal:
                await asyncio.to_thread(self._effect_refused, plan, refusal)
                raise
            return await asyncio.to_thread(self._end, plan, result)

    # -- runs that wait ----------------------------------------------------------------------

    def wait_for(self, name: str, timeout: float | None = None, *, ask: Ask | None = None) -> JSON:
        """The payload of the job's signal `name`, suspending the job (no lease held) until it
        arrives; a signal sent before the wait returns at once. Past `timeout` seconds (by
        the database's clock) raises `WaitTimeout`. `ask` is the question `tenure mcp` puts
        to its caller for this signal (a form, a model's answer, the client's roots)."""
        name = check_name(name, "signal name")
        seconds = wait_seconds(timeout)
        if ask is not None and not isinstance(ask, Ask):
            raise InvalidArgument(f"ask must be a tenure.Ask, got {type(ask).__name__}")
        asks = {name: ask} if ask is not None else {}
        outcome = self._wait(
            self._names.signal(name), WaitFor.SIGNAL, seconds, signals=(name,), asks=asks
        )
        return signal_value(outcome, name, seconds)

    def wait_for_all(
        self, questions: Mapping[str, Ask | None], timeout: float | None = None
    ) -> dict[str, JSON]:
        """Several signals at once, by name: the payload of each, once all are stored. Each
        is taken as it comes (an MCP caller may answer some questions now and the rest later);
        the job is woken only when the last arrives. `questions` maps each signal's name to
        the `tenure.Ask` put to the caller for it (None: no question). Past `timeout` seconds
        raises `WaitTimeout` (the signals that came stay stored: a later wait takes them)."""
        names, asks = signal_questions(questions)
        seconds = wait_seconds(timeout)
        outcome = self._wait(
            self._names.signals(names), WaitFor.SIGNAL, seconds, signals=names, asks=asks,
            together=True,
        )  # fmt: skip
        return signals_value(outcome, names, seconds)

    def spawn(
        self,
        kind: str,
        payload: JSON,
        *,
        name: str | None = None,
        priority: int | None = None,
        principal: str | None = None,
        budget: Mapping[str, float] | None = None,
    ) -> str:
        """Submit a child job once (its key is stable across this job's attempts) and return
        its id. `kind` must be in the class's `spawns`; the child gets this job's tenant and
        runs under its own class's lease, attempts and timeouts. It acts for this job's
        principal, or for `principal` when the app's `@app.narrows` function says it is no
        wider (else the job fails, `principal_widened`). Its `budget` is at most what the run
        has left; a run with nothing left spawns no more (`BudgetExhausted`)."""
        allowed = self._run.job_class.spawns
        if kind not in allowed:
            raise NonRetryable(
                f"job class {self.kind!r} may not spawn {kind!r}: add it to spawns=[...] "
                f"(allowed: {sorted(allowed)})",
                code="spawn_refused",
            )
        try:
            encode_json(payload, "child payload", self._port.max_payload_bytes)
            child = check_name(name, "child name") if name is not None else None
            budget = None if budget is None else check_units(budget, "child budget")
        except InvalidArgument as exc:
            raise NonRetryable(str(exc), code="invalid_spawn") from None
        lease = self._run.lease
        acting_for = child_principal(self._run.rules, lease, principal, kind)
        child, stage = self._names.spawn(kind, child)
        return str(
            self.step(
                stage,
                lambda: self._port.spawn(
                    lease,
                    child,
                    kind,
                    payload,
                    priority=priority,
                    principal=acting_for,
                    budget=budget,
                )[0],
            )
        )

    def wait_job(self, job: str | list[str], timeout: float | None = None) -> JSON:
        """The result of a child job (or the list of results of several), suspending this job
        until every one has ended. A failed or cancelled child raises `ChildFailed` at once;
        past `timeout` seconds raises `WaitTimeout`."""
        ids = [job] if isinstance(job, str) else list(job)
        if not ids:
            raise InvalidArgument("wait_job needs at least one job id")
        ids = [check_job_id(each) for each in ids]
        seconds = wait_seconds(timeout)
        outcome = self._wait(self._names.wait_job(), WaitFor.JOBS, seconds, jobs=tuple(ids))
        return children_value(outcome, isinstance(job, str), seconds)

    def sleep(self, seconds: float) -> None:
        """A durable timer: the job suspends (no worker slot, no lease) and resumes after
        `seconds` by the database's clock, even across restarts."""
        length = wait_seconds(seconds)
        if length is None:
            raise InvalidArgument("sleep needs a number of seconds")
        self._wait(self._names.sleep(), WaitFor.TIMER, length)

    await_for = on_a_thread(wait_for)
    await_for_all = on_a_thread(wait_for_all)
    aspawn = on_a_thread(spawn)
    await_job = on_a_thread(wait_job)
    asleep = on_a_thread(sleep)

    def _wait(
        self,
        name: str,
        wait_for: WaitFor,
        seconds: float | None,
        *,
        signals: tuple[str, ...] = (),
        jobs: tuple[str, ...] = (),
        asks: Mapping[str, Ask] | None = None,
        together: bool = False,
    ) -> WaitResult:
        """Replay a recorded wait, or settle it now, or suspend the job (raise `Suspended`)."""
        position, recorded = self._next_stage(name, StageKind.WAIT)
        until = None
        if recorded is not None:
            if recorded.status is StageStatus.DONE:
                return result_of(recorded.result)
            waited = self._run.lease.wait
            if waited is not None and waited.position == position:
                until = waited.until  # a resumed wait keeps the deadline it had
        request = WaitRequest(
            position, name, wait_for, signals, jobs, seconds, until, asks or {}, together
        )
        renewing, self._run.renewing = self._run.renewing, False  # a racing renewal is refused
        suspended = False
        try:
            outcome: WaitOutcome = self._write(lambda: self._port.wait_on(self._run.lease, request))
            suspended = outcome.suspended
        finally:
            if not suspended:
                self._run.renewing = renewing and not self._run.cancelled.is_set()
        if outcome.strangers:
            raise NonRetryable(
                f"job {outcome.strangers[0]} is not a child of this job: a job waits only for "
                "the jobs it spawned",
                code="not_a_child",
            )
        if outcome.result is None:
            self._run.suspended()
            self._run.log(
                logging.INFO, "job_suspended", waits_for=wait_for.value, position=position
            )
            raise Suspended(name)
        return outcome.result

    def _effect(self, plan: _Plan) -> Effect:
        """What the effect's function gets; called inside its span, whose trace it carries."""
        key = effect_key(self.job_id, plan.name)
        traceparent = tracing.effect_traceparent()
        claim = self._run.lease.claim
        return Effect(plan.name, key, self.token, plan.in_doubt, self.job_id, traceparent, claim)

    def _span(self, plan: _Plan) -> AbstractContextManager[None]:
        """The stage's span (a child of the attempt's), current while it runs."""
        return self._run.trace.stage(
            plan.kind.value, plan.name, plan.position, in_doubt=plan.in_doubt
        )

    def _replayed(self, plan: _Plan) -> Any:
        """A stage an earlier attempt recorded done: its result, not run again."""
        self._run.trace.replayed(plan.kind.value, plan.name, plan.position)
        return plan.result

    def _begin(self, name: str, kind: StageKind) -> _Plan:
        """Replay a recorded stage, or write its `started` record (write-ahead)."""
        if kind is StageKind.EFFECT:
            with self._lock:
                if name in self._effect_names:
                    raise StageMismatch(
                        f"effect {name!r} is used twice in one job: its key "
                        "would repeat; give each effect its own name"
                    )
                self._effect_names.add(name)
        position, recorded = self._next_stage(name, kind)
        plan = _Plan(position, name, kind)
        if recorded is not None:
            if recorded.status is StageStatus.DONE:
                plan.replayed, plan.result = True, recorded.result
                return plan
            plan.in_doubt = True
            self._port.record(
                self._run.lease,
                EventType.STEP_IN_DOUBT,
                position=position,
                name=name,
                kind=kind.value,
                started_token=recorded.token,
            )
            self._keeper.count(WorkerCount.STEPS_IN_DOUBT, run=self._run)
            self._run.log(
                logging.WARNING, "step_in_doubt", position=position, name=name, kind=kind.value
            )
        if kind is StageKind.EFFECT:
            self._ensure_margin(name)
        self._run.start_segment(name, kind is StageKind.EFFECT)
        self._keeper.deadlines_changed()
        self._write(
            lambda: self._port.start_stage(
                self._run.lease,
                position,
                name,
                kind,
                effect_key=effect_key(self.job_id, name) if kind is StageKind.EFFECT else None,
                timeout_seconds=self._run.job_class.stage_timeout,
                in_doubt=plan.in_doubt,
            )
        )
        return plan

    def _next_stage(self, name: str, kind: StageKind) -> tuple[int, Stage | None]:
        """The next position in handler order and what was recorded there, which must be
        this stage (a renamed or reordered stage is an error, not a silent re-run)."""
        self.check()
        with self._lock:
            position = self._next_position
            self._next_position += 1
        recorded = self._recorded.get(position)
        if recorded is not None and (recorded.name, recorded.kind) != (name, kind):
            raise StageMismatch(
                f"job {self.job_id}: stage {position} was recorded as {recorded.kind.value} "
                f"{recorded.name!r} but the handler now asks for {kind.value} {name!r}; "
                "steps must keep their names and order across attempts"
            )
        return position, recorded

    def _end(self, plan: _Plan, result: Any) -> Any:
        """Record the result and advance the cursor; return the result as a replay would.
        The checkpoint envelope, with this stage in it, goes in the same write."""
        self.check()
        with self._lock:
            stages = [
                entry
                for entry in self._envelope.setdefault("stages", [])
                if entry.get("position") != plan.position
            ]
            stages.append(
                {
                    "position": plan.position,
                    "name": plan.name,
                    "kind": plan.kind.value,
                    "result": result,
                }
            )
            self._envelope["stages"] = stages
            if plan.kind is StageKind.EFFECT:
                self._envelope.setdefault("effects", {})[plan.name] = "done"
            envelope = copy.deepcopy(self._envelope) if self._envelope else None
        text = self._write(
            lambda: self._port.finish_stage(
                self._run.lease, plan.position, result, checkpoint=envelope
            )
        )
        self._run.start_segment(None)
        self._keeper.deadlines_changed()
        return json.loads(text)

    def _ensure_margin(self, name: str) -> None:
        """Invariant 8: start an effect only with heartbeat + jitter of confirmed lease left."""
        job_class = self._run.job_class
        if self._run.margin_left() >= job_class.margin:
            return
        self._keeper.renew_now()
        if not self._run.wait_for_margin(job_class.margin, timeout=max(job_class.jitter, 0.1)):
            self.check()
            raise OwnershipUnknown(
                f"job {self.job_id}: effect {name!r} refused: the lease is not confirmed for "
                f"another {job_class.margin:g}s (heartbeat + jitter)"
            )

    def _step_raised(self, plan: _Plan, exc: Exception) -> None:
        """The step's function raised: a failed step, not one in doubt (only a worker that
        died or lost its lease inside a step leaves it in doubt). If that cannot be written,
        the step stays `started` and the next attempt counts it in doubt: the safe side."""
        try:
            self._port.stage_raised(self._run.lease, plan.position, type(exc).__name__)
        except TenureError as unwritten:
            self._run.log(
                logging.WARNING, "step_failure_unwritten", error_type=type(unwritten).__name__
            )

    def _effect_refused(self, plan: _Plan, refusal: StaleFence) -> None:
        """Record that a receiver refused the effect (`effect_refused`, marked on the job's
        timeline). No lease check: a stale holder's refusal is the one worth recording."""
        try:
            self._port.record(
                self._run.lease,
                EventType.EFFECT_REFUSED,
                name=plan.name,
                position=plan.position,
                code=refusal.error_code,
                highest=refusal.highest,
            )
        except TenureError as unwritten:
            self._run.log(
                logging.WARNING, "effect_refusal_unwritten", error_type=type(unwritten).__name__
            )

    def _write(self, write: Callable[[], Any]) -> Any:
        try:
            return write()
        except LeaseLost:
            self._run.trace.event("lease_lost", self.token)
            self._run.cancel(self._port.lost_reason(self.job_id))
            raise JobCancelled(CancelReason.LEASE_LOST) from None


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    result = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(result):
        return await result
    return result
