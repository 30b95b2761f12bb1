"""Issue 42, the seam for fast tests: `tenure.testing.run_handler` runs a handler's steps,
effects, waits, children, retries and cancellation with the worker's own runtime on
`MemoryPort`, the worker's port in memory. No database (connecting is refused here), no real
waiting (the clock is a `FakeClock`): each test takes milliseconds."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure import EventType, JobState, StageKind, StageStatus
from tenure.errors import (
    ChildFailed,
    JobCancelled,
    LeaseLost,
    NonRetryable,
    SignalConflict,
    StageMismatch,
    TerminalJob,
)
from tenure.port import LeasePort
from tenure.testing import HandlerRun, MemoryPort, run_handler
from tenure.testing.clock import FakeClock
from tenure.wait_state import WaitFor
from tenure.waits import WaitRequest

Handler = Any  # a handler's context and payload, as the tests' handlers take them


@pytest.fixture(autouse=True)
def _no_database(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Nothing here may open a ledger: a handler test runs without a database."""

    def refused(*args: object, **kwargs: object) -> tenure.Ledger:
        raise AssertionError("run_handler opened a database")

    monkeypatch.setattr(tenure.App, "connect", refused)
    monkeypatch.setattr(tenure, "connect", refused)
    began = time.perf_counter()
    yield
    assert time.perf_counter() - began < 5.0, "a handler unit test must be fast"


# -- the port ------------------------------------------------------------------------------------


def test_a_memory_port_is_a_lease_port() -> None:
    """At type level (mypy checks this assignment) and at run time: the worker's runtime takes
    it where it takes the ledger's port."""
    port: LeasePort = MemoryPort()
    assert (port.where, port.parallel_writes, port.has_tenant_limits()) == ("memory", False, False)
    assert port.now().tzinfo is not None


def test_a_write_for_a_stale_lease_raises_lease_lost() -> None:
    """A lease that ended (expired, then claimed again) writes nothing: every guarded write
    raises LeaseLost and is recorded `result_rejected`; the new holder's token is higher."""
    clock = FakeClock()
    port = MemoryPort(clock=clock)
    job_id = port.submit("ocr", {"doc": "a.pdf"})
    [first] = port.claim_many("w1", limit=1, lease_seconds=30)
    port.start_stage(first, 0, "fetch", StageKind.STEP)
    clock.advance(31)  # past the lease: by this port's clock the lease is over
    with pytest.raises(LeaseLost):
        port.finish_stage(first, 0, {"text": "late"})
    [second] = port.claim_many("w2", limit=1, lease_seconds=30)
    assert second.token > first.token and second.attempt == 2
    for write in (
        lambda: port.complete(first, {"text": "stale"}),
        lambda: port.fail(first, {"code": "x"}),
        lambda: port.save_step(first, 1),
        lambda: port.start_stage(first, 1, "again", StageKind.STEP),
        lambda: port.wait_on(first, WaitRequest(1, "sleep#1", WaitFor.TIMER, seconds=1)),
    ):
        with pytest.raises(LeaseLost):
            write()
    assert port.extend_many([first, second]).lost == [job_id]
    assert port.lost_reason(job_id) is tenure.CancelReason.LEASE_LOST
    # The started stage is left `started`: the new holder finds it in doubt.
    assert [(s.name, s.status) for s in port.stages(job_id)] == [("fetch", StageStatus.STARTED)]
    port.complete(second, {"text": "ok"})
    job = port.get(job_id)
    assert (job.state, job.result, job.token) == (
        JobState.SUCCEEDED,
        {"text": "ok"},
        second.token,
    )
    rejected = [e for e in port.events(job_id) if e.type is EventType.RESULT_REJECTED]
    assert len(rejected) == 6 and all(e.token == first.token for e in rejected)


def test_a_cancel_ends_the_lease_and_bumps_the_token() -> None:
    port = MemoryPort()
    heard: list[tuple[str, int]] = []
    stop = port.on_claimable(lambda kind: None, lambda job, token: heard.append((job, token)))
    job_id = port.submit("ocr", {})
    [lease] = port.claim_many("w1", limit=1)
    port.cancel(job_id)
    job = port.get(job_id)
    assert job.state is JobState.CANCELLED and job.token > lease.token
    assert heard == [(job_id, job.token)]
    with pytest.raises(LeaseLost):
        port.complete(lease, None)
    assert port.lost_reason(job_id) is tenure.CancelReason.CANCELLED
    with pytest.raises(TerminalJob):
        port.cancel(job_id)
    stop()


def test_signals_are_stored_once_per_name() -> None:
    port = MemoryPort()
    job_id = port.submit("approve", {})
    assert port.signal(job_id, "approval", {"ok": True}) is True
    assert port.signal(job_id, "approval", {"ok": True}) is False
    with pytest.raises(SignalConflict):
        port.signal(job_id, "approval", {"ok": False})
    port.cancel(job_id)
    with pytest.raises(TerminalJob):
        port.signal(job_id, "another")


# -- steps and effects ---------------------------------------------------------------------------


def test_steps_and_effects_run_once_with_their_keys_and_tokens() -> None:
    sent: list[tenure.Effect] = []

    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        text = ctx.step("fetch", lambda: {"text": payload["doc"].upper()})
        receipt = ctx.effect("email", lambda fx: sent.append(fx) or {"sent": fx.key})
        return {"text": text["text"], "receipt": receipt}

    run = run_handler(handler, {"doc": "a.pdf"})
    assert (run.state, run.attempts, len(run.calls)) == (JobState.SUCCEEDED, 1, 1)
    key = f"tool-job:{run.job_id}:email"
    assert run.result == {"text": "A.PDF", "receipt": {"sent": key}}
    [fx] = sent
    assert run.effects == (fx,)
    assert (fx.key, fx.token, fx.in_doubt, fx.job_id) == (
        key,
        run.calls[0].token,
        False,
        run.job_id,
    )
    assert [(s.position, s.name, s.kind, s.status) for s in run.stages] == [
        (0, "fetch", StageKind.STEP, StageStatus.DONE),
        (1, "email", StageKind.EFFECT, StageStatus.DONE),
    ]
    assert run.stages[0].result == {"text": "A.PDF"}
    assert [entry["name"] for entry in run.checkpoint["stages"]] == ["fetch", "email"]
    assert run.event_types == (
        EventType.JOB_SUBMITTED,
        EventType.JOB_CLAIMED,
        EventType.STEP_STARTED,
        EventType.STEP_DONE,
        EventType.TOOL_REQUEST_STARTED,
        EventType.STEP_DONE,
        EventType.JOB_SUCCEEDED,
    )


def test_done_stages_are_replayed_on_a_retry() -> None:
    """Attempt 1 records `fetch` and raises; attempt 2 (after the backoff, on the fake clock)
    gets fetch's result without running it."""
    ran: list[str] = []

    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        fetched = ctx.step("fetch", lambda: ran.append("fetch") or 41)
        if ctx.attempt == 1:
            raise ConnectionError("the model timed out")
        return ctx.step("add", lambda: ran.append("add") or fetched + 1)

    run = run_handler(handler, None)
    assert (run.state, run.result, run.attempts) == (JobState.SUCCEEDED, 42, 2)
    assert ran == ["fetch", "add"]
    assert [call.outcome for call in run.calls] == ["retried", "succeeded"]
    assert isinstance(run.calls[0].raised, ConnectionError) and run.raised is None
    assert EventType.JOB_RETRY_SCHEDULED in run.event_types


def test_an_effect_is_in_doubt_after_its_lease_was_lost() -> None:
    """The lease ends while `charge` runs: its result is refused (the handler gets
    JobCancelled), and the next attempt calls it again, in doubt, with the same key and a
    higher fence."""
    seen: list[tenure.Effect] = []

    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        return ctx.effect("charge", lambda fx: seen.append(fx) or {"charged": payload["amount"]})

    run = run_handler(handler, {"amount": 129}, lose_lease_at="charge")
    assert (run.state, run.result, run.attempts) == (JobState.SUCCEEDED, {"charged": 129}, 2)
    first, second = seen
    assert run.effects == (first, second)
    assert (first.in_doubt, second.in_doubt) == (False, True)
    assert first.key == second.key and second.token > first.token
    stopped = run.calls[0]
    assert stopped.outcome == "stopped" and isinstance(stopped.raised, JobCancelled)
    assert stopped.cancel_reason is tenure.CancelReason.LEASE_LOST
    assert {EventType.RESULT_REJECTED, EventType.LEASE_EXPIRED, EventType.STEP_IN_DOUBT} <= set(
        run.event_types
    )


def test_a_renamed_stage_is_a_stage_mismatch_not_a_rerun() -> None:
    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.step("one" if ctx.attempt == 1 else "renamed", lambda: 1)
        if ctx.attempt == 1:
            raise RuntimeError("retry")

    run = run_handler(handler, None)
    assert run.state is JobState.FAILED and isinstance(run.raised, StageMismatch)
    assert run.error["code"] == "stage_mismatch"


# -- failures ------------------------------------------------------------------------------------


def test_a_non_retryable_error_fails_the_job_at_once() -> None:
    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        raise NonRetryable("the document is not a PDF", code="bad_input")

    run = run_handler(handler, {"doc": "a.txt"})
    assert (run.state, run.attempts, len(run.calls)) == (JobState.FAILED, 1, 1)
    assert run.error == {"code": "bad_input", "message": "the document is not a PDF"}
    assert isinstance(run.raised, NonRetryable)


def test_a_handler_that_keeps_raising_is_retried_per_its_policy() -> None:
    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        raise ValueError("no")

    run = run_handler(handler, None, attempts=3)
    assert (run.state, run.attempts) == (JobState.FAILED, 3)
    assert [call.outcome for call in run.calls] == ["retried", "retried", "failed"]
    assert run.error == {"code": "handler_error", "error_type": "ValueError"}
    # An app's class keeps its own max_attempts; `attempts` then only stops the run early.
    app = tenure.App()
    app.job("flaky", max_attempts=5)(handler)
    early = run_handler(handler, None, app=app, attempts=2)
    assert (early.state, early.attempts, early.job.max_attempts) == (JobState.QUEUED, 2, 5)


# -- runs that wait ------------------------------------------------------------------------------


def _approval(ran: list[str]) -> Handler:
    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.step("quote", lambda: ran.append("quote") or 10)
        return {"answer": ctx.wait_for("approval")}

    return handler


def test_a_wait_for_a_signal_given_suspends_and_resumes() -> None:
    ran: list[str] = []
    run = run_handler(_approval(ran), {}, signals={"approval": {"ok": True}})
    assert (run.state, run.result) == (JobState.SUCCEEDED, {"answer": {"ok": True}})
    assert ran == ["quote"]  # replayed on the resume, not run again
    assert run.attempts == 1 and [c.outcome for c in run.calls] == ["suspended", "succeeded"]
    for event in (EventType.JOB_WAITING, EventType.SIGNAL_RECEIVED, EventType.JOB_RESUMED):
        assert run.event_types.count(event) == 1
    assert [(w.name, w.wait_for, w.signal) for w in run.waits] == [
        ("signal:approval", WaitFor.SIGNAL, "approval"),
        ("signal:approval", WaitFor.SIGNAL, "approval"),
    ]


def test_a_wait_for_a_signal_not_given_leaves_the_job_waiting() -> None:
    run = run_handler(_approval([]), {})
    assert (run.state, run.result, run.raised) == (JobState.WAITING, None, None)
    assert run.waiting is not None
    assert (run.waiting.wait_for, run.waiting.signal) == (WaitFor.SIGNAL, "approval")
    assert (run.job.owner_id, run.job.lease_until) == (None, None)


def test_a_waits_timeout_passes_only_when_asked() -> None:
    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        return ctx.wait_for("approval", timeout=86_400)

    assert run_handler(handler, None).state is JobState.WAITING
    run = run_handler(handler, None, timeouts=True)
    assert run.state is JobState.FAILED and isinstance(run.raised, tenure.WaitTimeout)
    assert run.error["code"] == "wait_timeout"


def test_a_durable_sleep_fires_on_the_fake_clock() -> None:
    """Two hours of `ctx.sleep` pass in no real time: the clock is moved to each timer."""
    clock = FakeClock()
    began = clock.wall()
    stamps: list[float] = []

    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        for n in range(2):
            ctx.step(f"stamp{n}", lambda: stamps.append(clock.wall()))
            ctx.sleep(3600)
        return "rested"

    run = run_handler(handler, None, clock=clock)
    assert (run.state, run.result, run.attempts) == (JobState.SUCCEEDED, "rested", 1)
    assert stamps[1] - stamps[0] >= 3600 and clock.wall() - began >= 7200
    assert [w.name for w in run.waits] == ["sleep#1", "sleep#1", "sleep#2", "sleep#2"]


# -- children ------------------------------------------------------------------------------------


def test_spawn_and_wait_job_run_the_child_with_its_own_handler() -> None:
    app = tenure.App()

    @app.job("double")
    def double(ctx: tenure.JobContext, payload: Any) -> Any:
        return payload["n"] * 2

    @app.job("parent", spawns=["double", "ocr"])
    def parent(ctx: tenure.JobContext, payload: Any) -> Any:
        ids = [ctx.spawn("double", {"n": n}) for n in (1, 2)]
        text = ctx.wait_job(ctx.spawn("ocr", {"doc": "a.pdf"}))
        return {"sum": sum(ctx.wait_job(ids)), "text": text}

    run = run_handler(parent, {}, app=app, children={"ocr": "TEXT"})
    assert (run.state, run.result) == (JobState.SUCCEEDED, {"sum": 6, "text": "TEXT"})
    assert [(c.kind, c.state, c.result) for c in run.children] == [
        ("double", JobState.SUCCEEDED, 2),
        ("double", JobState.SUCCEEDED, 4),
        ("ocr", JobState.SUCCEEDED, "TEXT"),
    ]
    assert run.event_types.count(EventType.CHILD_SPAWNED) == 3 and run.attempts == 1


def test_a_child_that_cannot_run_leaves_its_parent_waiting_and_one_that_fails_fails_it() -> None:
    app = tenure.App()

    @app.job("bad")
    def bad(ctx: tenure.JobContext, payload: Any) -> Any:
        raise NonRetryable("no", code="bad")

    @app.job("parent", spawns=["bad", "elsewhere"])
    def parent(ctx: tenure.JobContext, payload: Any) -> Any:
        return ctx.wait_job(ctx.spawn(payload, {}))

    waiting = run_handler(parent, "elsewhere", app=app)
    assert waiting.state is JobState.WAITING and waiting.waiting is not None
    assert waiting.waiting.wait_for is WaitFor.JOBS
    assert [c.state for c in waiting.children] == [JobState.QUEUED]
    failed = run_handler(parent, "bad", app=app)
    assert failed.state is JobState.FAILED and isinstance(failed.raised, ChildFailed)


# -- cancellation --------------------------------------------------------------------------------


def test_a_cancel_in_the_middle_of_a_stage_stops_the_handler() -> None:
    """Cancelled while `draft` runs: ctx.cancelled is set and on_cancel hooks run, the step's
    result is refused, the handler gets JobCancelled, and the effect after it never runs."""
    seen: list[str] = []

    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.on_cancel(lambda: seen.append("hook"))
        ctx.step("draft", lambda: seen.append(f"cancelled={ctx.cancelled.is_set()}"))
        ctx.effect("send", lambda fx: seen.append("sent"))

    run = run_handler(handler, None, cancel_at="draft")
    assert run.state is JobState.CANCELLED
    assert seen == ["hook", "cancelled=True"]
    assert (
        isinstance(run.raised, JobCancelled) and run.raised.reason is tenure.CancelReason.CANCELLED
    )
    assert [c.outcome for c in run.calls] == ["stopped"] and run.effects == ()
    assert EventType.JOB_CANCELLED in run.event_types


def test_a_job_cancelled_while_it_waits_is_not_resumed() -> None:
    run = run_handler(_approval([]), {}, signals={"approval": 1}, cancel_at="signal:approval")
    assert run.state is JobState.CANCELLED and len(run.calls) == 1


# -- async handlers ------------------------------------------------------------------------------


def test_an_async_handler_runs_on_the_runtimes_event_loop() -> None:
    app = tenure.App()
    loops: list[asyncio.AbstractEventLoop] = []

    @app.job("summarise")
    async def summarise(ctx: tenure.JobContext, payload: Any) -> Any:
        loops.append(asyncio.get_running_loop())

        async def fetch() -> str:
            await asyncio.sleep(0)
            return "text"

        text = await ctx.astep("fetch", fetch)
        receipt = await ctx.aeffect("store", lambda fx: {"key": fx.key})
        return {"text": text, "receipt": receipt}

    run = run_handler(summarise, None, app=app)
    assert run.state is JobState.SUCCEEDED
    assert run.result == {"text": "text", "receipt": {"key": f"tool-job:{run.job_id}:store"}}
    assert len(loops) == 1 and threading.current_thread() is threading.main_thread()


def test_the_result_is_a_frozen_value() -> None:
    run = run_handler(lambda ctx, payload: payload, [1, 2])
    assert isinstance(run, HandlerRun) and run.result == [1, 2]
    with pytest.raises(AttributeError):
        run.state = JobState.FAILED  # type: ignore[misc]


# -- evidence, costs, and the worker's own deadlines ---------------------------------------------


def test_evidence_and_costs_are_recorded_for_the_attempt() -> None:
    ref = tenure.DocumentRef("s3://docs/a.pdf", "v7", "a" * 64)

    def handler(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.evidence(ref)
        ctx.evidence(ref)  # the same reference again is one record
        ctx.report_cost(tokens=120, usd=0.25)
        return ctx.step("answer", lambda: "42")

    run = run_handler(handler, None)
    assert [(e.ref, e.token, e.attempt) for e in run.job.evidence] == [(ref, run.calls[0].token, 1)]
    assert run.port.costs(run.job_id) == {1: (120, 0.25)}
    assert run.checkpoint["evidence"][0]["source"] == "s3://docs/a.pdf"


def test_a_stage_past_its_timeout_on_the_fake_clock_is_stopped_by_the_lease_keeper() -> None:
    """The lease keeper watches the run's deadlines on the port's clock: a step that moves the
    clock past the class's stage timeout is stopped and its attempt failed, then retried."""
    clock = FakeClock()
    app = tenure.App()
    hung = threading.Event()

    @app.job("slow", stage_timeout=5, max_attempts=2)
    def slow(ctx: tenure.JobContext, payload: Any) -> Any:
        if ctx.attempt == 1:

            def stall() -> None:
                clock.advance(6)
                hung.wait(2)  # until the keeper stops it: ctx.cancelled, via on_cancel
                ctx.check()

            ctx.on_cancel(hung.set)
            ctx.step("stall", stall)
        return "done"

    run = run_handler(slow, None, app=app, clock=clock)
    assert (run.state, run.result, run.attempts) == (JobState.SUCCEEDED, "done", 2)
    first = run.calls[0]
    assert first.cancel_reason is tenure.CancelReason.STAGE_TIMEOUT
    assert isinstance(first.raised, JobCancelled) and first.outcome == "retried"


def test_a_wait_for_several_signals_takes_those_given_and_waits_for_the_rest() -> None:
    def asks(ctx: tenure.JobContext, payload: Any) -> Any:
        return ctx.wait_for_all({"approval": None, "memo": None})

    partly = run_handler(asks, {}, signals={"approval": {"ok": True}})
    assert partly.state is JobState.WAITING
    assert partly.waiting is not None and partly.waiting.signals == ("memo",)
    both = run_handler(asks, {}, signals={"approval": {"ok": True}, "memo": "m"})
    assert both.state is JobState.SUCCEEDED
    assert both.result == {"approval": {"ok": True}, "memo": "m"}
    assert len(both.calls) == 2  # suspended once, resumed once
