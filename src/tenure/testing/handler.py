"""Run a handler without a database: `run_handler(handler, payload)` submits one job to a
`MemoryPort` and runs it with the worker's own runtime (`open_context`, `JobContext`,
`call_handler`, the lease keeper and the outcome writes of `tenure.runtime`), attempt after
attempt, until the job ends or waits for something only the outside world could give. Its
steps, effects, waits, children, retries and cancellation behave as under `tenure.Worker`; the
clock is a `FakeClock` unless given, so timers and backoffs pass in no real time.

What it does between attempts, in order:
- run every claimable job the app has a handler for (the job, then its children, and the job
  again when they wake it); a child of a kind in `children` succeeds with that result;
- send a signal of `signals` when the job waits for it (each once: the job suspends, then
  resumes and replays its recorded stages, as in production);
- move the clock to the next moment something is due: a `ctx.sleep` timer, a retry's backoff,
  an abandoned lease's end, and (with `timeouts=True`) a wait's timeout;
- stop when none is left: the job ended, waits (`state` is `waiting`, `waiting` says for
  what), or was left `queued` for a retry after `attempts` attempts.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenure.app import App, JobClass
from tenure.clock import Clock
from tenure.errors import InvalidArgument, JobCancelled, TenureError
from tenure.runtime.attempt import call_handler, open_context
from tenure.runtime.committer import Committer
from tenure.runtime.context import Suspended
from tenure.runtime.evidence import EvidenceRules
from tenure.runtime.keeper import LeaseKeeper
from tenure.runtime.outcomes import Outcomes
from tenure.runtime.run import JobRun, RunEnd
from tenure.runtime.supervisor import Supervisor
from tenure.runtime.threads import HandlerThreads
from tenure.testing.clock import FakeClock
from tenure.testing.memory import MemoryPort
from tenure.types import (
    JSON,
    CancelReason,
    Effect,
    Event,
    EventType,
    Job,
    JobState,
    Lease,
    Stage,
    WorkerCount,
)
from tenure.wait_state import WaitFor, WaitState
from tenure.waits import WaitRequest

OWNER = "run_handler"
# A run the lease keeper stopped (a stage timeout, the lease's lifetime) is failed on its settle
# pool: how long (real seconds) to wait for that write before looking at the job again.
_SETTLE_SECONDS = 5.0
_SETTLED_BY_THE_KEEPER = frozenset({CancelReason.STAGE_TIMEOUT, CancelReason.MAX_LEASE_LIFETIME})


@dataclass(frozen=True, slots=True)
class HandlerCall:
    """One call of a handler: the attempt it ran as, its fencing token, what became of it
    (`succeeded`, `failed`, `retried`, `suspended`, `stopped`, `result_rejected`), what it
    raised (None when it returned or suspended) and why it was cancelled, if it was."""

    job_id: str
    attempt: int
    token: int
    outcome: str
    raised: BaseException | None
    cancel_reason: CancelReason | None


@dataclass(frozen=True, slots=True)
class HandlerRun:
    """What `run_handler` saw of the job (its children are in `children`, and in `port`)."""

    job_id: str
    kind: str
    state: JobState
    result: JSON
    error: JSON
    raised: BaseException | None
    """What the handler's last call raised (`JobCancelled` included; None if it returned or
    suspended)."""
    attempts: int
    """The job's attempts, as the ledger counts them (a resume after a wait spends none)."""
    calls: tuple[HandlerCall, ...]
    """Every call of the handler, in order (one per claim: retries and resumes)."""
    stages: tuple[Stage, ...]
    events: tuple[Event, ...]
    effects: tuple[Effect, ...]
    """What each effect's function was given (key, fence, in_doubt), one per start."""
    waits: tuple[WaitRequest, ...]
    """Every wait the handler asked, in order (a wait that suspended is asked again)."""
    waiting: WaitState | None
    """What the job waits for, when the run stopped with it `waiting`."""
    children: tuple[Job, ...]
    checkpoint: JSON
    job: Job
    port: MemoryPort = field(repr=False, compare=False)

    @property
    def event_types(self) -> tuple[EventType, ...]:
        """The job's event types, in order."""
        return tuple(event.type for event in self.events)


def run_handler(
    handler: Callable[..., Any] | str,
    payload: JSON = None,
    *,
    kind: str | None = None,
    app: App | None = None,
    signals: Mapping[str, JSON] | None = None,
    children: Mapping[str, JSON] | None = None,
    cancel_at: str | None = None,
    lose_lease_at: str | None = None,
    attempts: int | None = None,
    timeouts: bool = False,
    clock: Clock | None = None,
    tenant: str = "default",
    principal: str | None = None,
    max_calls: int = 1000,
) -> HandlerRun:
    """Run `handler` on `payload` as a job, without a database (see the module docstring).

    - `app`: the app whose job class (lease, retries, `spawns`, checkpoint migrations) and
      other handlers (children) apply; `handler` is one of its handlers or its kind. Without
      it, the handler is registered as `kind` (default "job") with the default job class
      (`max_attempts=attempts` when given).
    - `signals`: {name: payload}, each sent when the job waits for it; a signal not given
      leaves the job `waiting`.
    - `children`: {kind: result} for children of kinds the app has no handler for.
    - `cancel_at` / `lose_lease_at`: the name of a stage (a step or effect; or a wait:
      `signal:NAME`, `sleep#1`, `wait_job#1`): the job is cancelled (token bumped,
      `ctx.cancelled` set) or its lease ends, once, right after that stage's started record
      is written (its function still runs, its result is refused); a later attempt after a
      lost lease finds that stage in doubt.
    - `attempts`: the most attempts to run (default: the class's `max_attempts`).
    - `timeouts`: True to let a wait's timeout pass (the handler gets `WaitTimeout`); by
      default a wait for a signal or a child that does not come leaves the job `waiting`.
    - `clock`: the port's and the runtime's clock (default: a new `FakeClock`).
    """
    if attempts is not None and (
        isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
    ):
        raise InvalidArgument(f"attempts must be an integer >= 1, got {attempts!r}")
    app, job_class = _job_class(handler, kind, app, attempts)
    cap = job_class.max_attempts if attempts is None else attempts
    port = MemoryPort(clock=FakeClock() if clock is None else clock)
    job_id = port.submit(
        job_class.kind,
        payload,
        tenant=tenant,
        principal=principal,
        max_attempts=job_class.max_attempts,
        version=job_class.version,
    )
    if cancel_at is not None:
        port.at_stage(cancel_at, port.cancel, job_id=job_id)
    if lose_lease_at is not None:
        port.at_stage(lose_lease_at, port.expire_lease, job_id=job_id)
    runtime = _Runtime(app, port, dict(children or {}))
    try:
        calls = runtime.drive(job_id, dict(signals or {}), cap, timeouts, max_calls)
    finally:
        runtime.stop()
    job = port.get(job_id)
    own = tuple(call for call in calls if call.job_id == job_id)
    return HandlerRun(
        job_id=job_id,
        kind=job.kind,
        state=job.state,
        result=job.result,
        error=job.error,
        raised=own[-1].raised if own else None,
        attempts=job.attempt,
        calls=own,
        stages=tuple(port.stages(job_id)),
        events=tuple(port.events(job_id)),
        effects=tuple(port.effects(job_id)),
        waits=tuple(port.waits(job_id)),
        waiting=job.wait if job.state is JobState.WAITING else None,
        children=tuple(port.children(job_id)),
        checkpoint=job.checkpoint,
        job=job,
        port=port,
    )


def _job_class(
    handler: Callable[..., Any] | str, kind: str | None, app: App | None, attempts: int | None
) -> tuple[App, JobClass]:
    """The app and the job class the handler runs under."""
    if app is None:
        if isinstance(handler, str) or not callable(handler):
            raise InvalidArgument("without app=, run_handler needs the handler function itself")
        app = App()
        app.job(kind or "job", max_attempts=5 if attempts is None else attempts)(handler)
        return app, app.job_classes[kind or "job"]
    if isinstance(handler, str):
        kind = handler
    elif kind is None:
        found = [c.kind for c in app.job_classes.values() if c.handler is handler]
        if len(found) != 1:
            raise InvalidArgument(
                f"the handler {getattr(handler, '__name__', handler)!r} is registered "
                f"{len(found)} times in the app: name its kind with kind="
            )
        kind = found[0]
    job_class = app.job_classes.get(kind)
    if job_class is None or not (isinstance(handler, str) or job_class.handler is handler):
        raise InvalidArgument(f"the app has no job class {kind!r} with this handler")
    return app, job_class


class _Runtime:
    """The worker's runtime pieces on a `MemoryPort`, driven on the caller's thread: the lease
    keeper (renewals and local deadlines, on the port's clock), the outcome writes (the
    committer never started: each result is written at once), an event loop for async
    handlers. What `tenure.Worker` does for one claimed job, `execute` does."""

    def __init__(self, app: App, port: MemoryPort, stubs: dict[str, JSON]) -> None:
        self.app, self.port, self.clock, self.stubs = app, port, port.clock, stubs
        self.supervisor = Supervisor(lambda task, exc: None)  # kept in `crashed`
        self.keeper = LeaseKeeper(
            port,
            supervisor=self.supervisor,
            on_stage_timeout=self._stage_timed_out,
            on_lifetime=self._lifetime_reached,
            clock=self.clock,
        )
        committer = Committer(port, self.supervisor, None, self.clock)
        committer.stop()  # not started: every result is written directly, by its handler
        threads = HandlerThreads(1, self.supervisor)
        self.outcomes = Outcomes(
            app, port, self.keeper, committer, threads, threading.Event(), self.keeper.untrack
        )
        self.rules = EvidenceRules(app.retrievers, app.narrowing)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        if any(job_class.is_async for job_class in app.job_classes.values()):
            self.loop = asyncio.new_event_loop()
            self._loop_thread = self.supervisor.spawn("async", self.loop.run_forever)
        self.keeper.start()
        self._unlisten = port.on_claimable(lambda kind: None, self.keeper.cancelled)

    def _stage_timed_out(self, run: JobRun) -> None:
        self.outcomes.stage_timed_out(run)

    def _lifetime_reached(self, run: JobRun) -> None:
        self.outcomes.lifetime_reached(run)

    def stop(self) -> None:
        self._unlisten()
        self.keeper.stop()
        if self.loop is not None and self._loop_thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._loop_thread.join()
            self.loop.close()
        crashed = self.supervisor.crashed
        if crashed is not None:
            raise TenureError(f"run_handler: the runtime's {crashed[0]!r} died") from crashed[1]

    # -- one job ---------------------------------------------------------------------------

    def execute(self, lease: Lease) -> HandlerCall | None:
        """Run one claimed job as a worker's handler thread does (`Worker._execute`)."""
        job_class = self.app.job_classes.get(lease.kind)
        if job_class is None:  # a child of a stubbed kind
            self.port.complete(lease, self.stubs[lease.kind])
            return None
        run = JobRun(lease, job_class, self.clock.monotonic(), self.rules, self.clock)
        self.keeper.count(WorkerCount.CLAIMED, run=run)
        self.keeper.track(run)
        raised: BaseException | None = None
        try:
            ctx = open_context(run, self.port, self.keeper, self.app.checkpoint_migrations)
            result = call_handler(run, ctx, self.loop)
            run.handler_returned = True
            self.outcomes.commit(run, result)
        except (JobCancelled, Suspended, Exception) as exc:
            raised = None if isinstance(exc, Suspended) else exc
            self.outcomes.handler_error(run, exc)
        finally:
            self.keeper.untrack(run)
        if run.cancel_reason in _SETTLED_BY_THE_KEEPER:  # its failure is written there
            _wait_until(lambda: run.outcome not in (RunEnd.UNFINISHED, RunEnd.STOPPED))
        return HandlerCall(
            lease.job_id, lease.attempt, lease.token, run.outcome.value, raised, run.cancel_reason
        )

    # -- until nothing is left to do -------------------------------------------------------

    def drive(
        self, job_id: str, signals: dict[str, JSON], cap: int, timeouts: bool, max_calls: int
    ) -> list[HandlerCall]:
        calls: list[HandlerCall] = []
        sent: set[str] = set()
        while True:
            job = self.port.get(job_id)
            if job.terminal or (
                cap <= job.attempt < job.max_attempts and _would_retry(job, self.port.now())
            ):
                return calls
            lease = self._claim()
            if lease is not None:
                if len(calls) >= max_calls:
                    raise TenureError(f"run_handler: stopped after {max_calls} handler calls")
                call = self.execute(lease)
                if call is not None:
                    calls.append(call)
                continue
            wait = job.wait if job.state is JobState.WAITING else None
            given = [n for n in (wait.signals if wait else ()) if n in signals and n not in sent]
            if given:  # every signal of a wait for several that the run was given
                for name in given:
                    sent.add(name)
                    self.port.signal(job_id, name, signals[name])
                continue
            due = self._next_due(timeouts)
            if due is None:
                return calls
            self.clock.sleep(max(0.0, (due - self.port.now()).total_seconds()) + 1e-3)

    def _kinds(self) -> dict[str, float]:
        """The kinds this run claims, with their lease lengths."""
        leases = {kind: c.lease for kind, c in self.app.job_classes.items()}
        return {**dict.fromkeys(self.stubs, 90.0), **leases}

    def _claim(self) -> Lease | None:
        groups: dict[float, list[str]] = {}
        for kind, seconds in self._kinds().items():
            groups.setdefault(seconds, []).append(kind)
        for seconds, kinds in sorted(groups.items()):
            leases = self.port.claim_many(OWNER, limit=1, kinds=kinds, lease_seconds=seconds)
            if leases:
                return leases[0]
        return None

    def _next_due(self, timeouts: bool) -> datetime | None:
        """When the next job of a claimed kind becomes claimable by time alone."""
        kinds = self._kinds()
        moments = []
        for job in self.port.jobs():
            if job.kind not in kinds:
                continue
            if job.state is JobState.QUEUED:
                moments.append(job.run_after)
            elif job.state is JobState.RUNNING and job.lease_until is not None:
                moments.append(job.lease_until)  # an abandoned lease ends
            elif (
                job.state is JobState.WAITING
                and job.wait is not None
                and job.wait.until is not None
                and (job.wait.wait_for is WaitFor.TIMER or timeouts)
            ):
                moments.append(job.run_after)
        return min(moments, default=None)


def _would_retry(job: Job, now: datetime) -> bool:
    """The job's next claim would be a new attempt (queued for a retry, or a lease ended)."""
    if job.state is JobState.QUEUED:
        return True
    return job.state is JobState.RUNNING and job.lease_until is not None and job.lease_until <= now


def _wait_until(done: Callable[[], bool]) -> None:
    """Wait (real time, a little at a time) for another thread to make `done()` true."""
    pause = threading.Event()
    for _ in range(int(_SETTLE_SECONDS / 0.005)):
        if done():
            return
        pause.wait(0.005)
