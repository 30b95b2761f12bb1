"""Runs that wait, in-process on both backends: signals, child jobs, timers and timeouts, a
stale owner, cancel cascades, and the bad input each call refuses."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

import tenure
from tenure import JobState
from tenure.errors import (
    InvalidArgument,
    JobNotFound,
    LeaseLost,
    PayloadTooLarge,
    SignalConflict,
    TerminalJob,
)
from tenure.ledger import lease_port
from tenure.wait_state import WaitFor
from tenure.waits import WaitRequest
from tests.support.timing import FAST
from tests.support.waiting import poll


def waiting(ledger: tenure.Ledger, job_id: str) -> tenure.Job:
    return poll(
        lambda: (job := ledger.get(job_id)).state is JobState.WAITING and job,
        20,
        "the job to wait",
    )


def ended(ledger: tenure.Ledger, job_id: str, timeout: float = 30) -> tenure.Job:
    return poll(lambda: (job := ledger.get(job_id)).terminal and job, timeout, "the job to end")


def test_an_approval_suspends_without_a_lease_and_resumes_once(
    make_app: Callable[[], tenure.App],
) -> None:
    """The job waits with no owner and no lease; a busy pool does not claim it; the first
    signal wins, a repeat is harmless, a different one conflicts; code before the wait ran
    once."""
    app = make_app()
    ran: list[str] = []

    @app.job("approve", **FAST)
    def approve(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.step("quote", lambda: ran.append("quote"))
        return {"answer": ctx.wait_for("approval")}

    @app.job("busy", **FAST)
    def busy(ctx: tenure.JobContext, payload: Any) -> Any:
        return payload

    ledger = app.ledger
    job_id = ledger.submit("approve", {})
    with tenure.Worker(app, concurrency=2, poll_interval=0.05):
        job = waiting(ledger, job_id)
        assert (job.owner_id, job.lease_until) == (None, None)
        assert job.wait is not None and (job.wait.wait_for, job.wait.signal) == (
            "signal",
            "approval",
        )
        # Other work flows past the waiting job; it is never claimed while it waits.
        others = [ledger.submit("busy", {"n": n}) for n in range(20)]
        for other in others:
            assert ended(ledger, other).state is JobState.SUCCEEDED
        assert ledger.get(job_id).state is JobState.WAITING
        assert ledger.signal(job_id, "approval", {"ok": True}) is True
        assert ledger.signal(job_id, "approval", {"ok": True}) is False
        with pytest.raises(SignalConflict):
            ledger.signal(job_id, "approval", {"ok": False})
        done = ended(ledger, job_id)
    assert (done.state, done.result) == (JobState.SUCCEEDED, {"answer": {"ok": True}})
    assert ran == ["quote"]
    types = [event.type.value for event in ledger.events(job_id)]
    assert types.count("job_waiting") == 1 and types.count("job_resumed") == 1
    assert types.count("signal_received") == 1
    # Suspending and resuming spent no attempt.
    assert done.attempt == 1
    # After the end a stored name answers as before it (a repeat as the first, another
    # payload a conflict: whether the worker finished first does not change the answer); a
    # new name is refused.
    assert ledger.signal(job_id, "approval", {"ok": True}) is False
    with pytest.raises(SignalConflict):
        ledger.signal(job_id, "approval", {"ok": False})
    with pytest.raises(TerminalJob):
        ledger.signal(job_id, "another", None)


def test_a_signal_sent_before_the_wait_counts(make_app: Callable[[], tenure.App]) -> None:
    app = make_app()

    @app.job("early", **FAST)
    def early(ctx: tenure.JobContext, payload: Any) -> Any:
        return ctx.wait_for("go")

    ledger = app.ledger
    job_id = ledger.submit("early", {})
    assert ledger.signal(job_id, "go", [1, 2]) is True
    with tenure.Worker(app, poll_interval=0.05):
        done = ended(ledger, job_id)
    assert (done.state, done.result) == (JobState.SUCCEEDED, [1, 2])
    assert "job_waiting" not in [event.type for event in ledger.events(job_id)]


def test_children_run_as_their_own_jobs_and_the_parent_gets_their_results(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.job("double", **FAST)
    def double(ctx: tenure.JobContext, payload: Any) -> Any:
        return payload["n"] * 2

    @app.job("fan_out", spawns=["double"], **FAST)
    def fan_out(ctx: tenure.JobContext, payload: Any) -> Any:
        ids = [ctx.spawn("double", {"n": n}) for n in (1, 2, 3)]
        one = ctx.wait_job(ids[0])
        return {"one": one, "all": ctx.wait_job(ids)}

    ledger = app.ledger
    parent = ledger.submit("fan_out", {}, tenant="acme")
    with tenure.Worker(app, concurrency=2, poll_interval=0.05):
        done = ended(ledger, parent)
    assert (done.state, done.result) == (JobState.SUCCEEDED, {"one": 2, "all": [2, 4, 6]})
    children = ledger.children(parent)
    assert [(c.kind, c.tenant, c.parent_id, c.state) for c in children] == [
        ("double", "acme", parent, JobState.SUCCEEDED)
    ] * 3
    spawned = [e for e in ledger.events(parent) if e.type == "child_spawned"]
    assert [e.detail["child"] for e in spawned] == [c.id for c in children]


def test_a_failed_child_raises_child_failed_in_the_parent(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.job("broken", max_attempts=1, **FAST)
    def broken(ctx: tenure.JobContext, payload: Any) -> Any:
        raise tenure.NonRetryable("no", code="broken")

    @app.job("careful", spawns=["broken"], **FAST)
    def careful(ctx: tenure.JobContext, payload: Any) -> Any:
        child = ctx.spawn("broken", {})
        try:
            ctx.wait_job(child)
        except tenure.ChildFailed as exc:
            return {"child": exc.child_id, "state": exc.state, "code": exc.error["code"]}
        return {"unexpected": True}

    ledger = app.ledger
    parent = ledger.submit("careful", {})
    with tenure.Worker(app, poll_interval=0.05):
        done = ended(ledger, parent)
    [child] = ledger.children(parent)
    assert done.result == {"child": child.id, "state": "failed", "code": "broken"}


def test_spawning_a_kind_not_allowed_fails_the_parent_and_submits_nothing(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.job("target", **FAST)
    def target(ctx: tenure.JobContext, payload: Any) -> Any:
        return None

    @app.job("greedy", spawns=["target"], **FAST)
    def greedy(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.spawn("greedy", {})  # not in spawns: the model planned it, the class refuses

    ledger = app.ledger
    parent = ledger.submit("greedy", {})
    with tenure.Worker(app, poll_interval=0.05):
        done = ended(ledger, parent)
    assert (done.state, done.error["code"], done.attempt) == (JobState.FAILED, "spawn_refused", 1)
    assert ledger.children(parent) == []
    assert ledger.operations.counts()[JobState.QUEUED] == 0


def test_sleep_frees_the_worker_and_resumes_by_the_database_clock(
    make_app: Callable[[], tenure.App],
) -> None:
    """A concurrency-1 worker runs other jobs while the timer runs; the sleeper resumes about
    2 s later by the database's clock."""
    app = make_app()

    @app.job("nap", **FAST)
    def nap(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.sleep(2)
        return "rested"

    @app.job("quick", **FAST)
    def quick(ctx: tenure.JobContext, payload: Any) -> Any:
        return payload

    ledger = app.ledger
    sleeper = ledger.submit("nap", {})
    with tenure.Worker(app, concurrency=1, poll_interval=0.05):
        suspended = waiting(ledger, sleeper)
        assert suspended.wait is not None and suspended.wait.wait_for == "timer"
        others = [ledger.submit("quick", n) for n in range(5)]
        for other in others:
            assert ended(ledger, other).state is JobState.SUCCEEDED
        assert ledger.get(sleeper).state is JobState.WAITING
        done = ended(ledger, sleeper)
    assert done.result == "rested"
    events = ledger.events(sleeper)
    waited = next(e for e in events if e.type == "job_waiting")
    resumed = next(e for e in events if e.type == "job_resumed")
    # The deadline was fixed by the database's clock when the job suspended, and the claim that
    # resumed it came after it.
    until = datetime.fromisoformat(waited.detail["until"])
    assert resumed.at >= until
    slept = (resumed.at - waited.at).total_seconds()
    assert 1.9 <= slept < 10.0, slept


def test_a_wait_timeout_resumes_the_job_with_wait_timeout(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.job("impatient", **FAST)
    def impatient(ctx: tenure.JobContext, payload: Any) -> Any:
        try:
            ctx.wait_for("answer", timeout=0.5)
        except tenure.WaitTimeout:
            return "timed out"
        return "answered"

    ledger = app.ledger
    job_id = ledger.submit("impatient", {})
    with tenure.Worker(app, poll_interval=0.05):
        done = ended(ledger, job_id)
    assert done.result == "timed out"
    # A late answer changes nothing: the outcome of the wait is recorded.
    with pytest.raises(TerminalJob):
        ledger.signal(job_id, "answer", 1)


def test_a_stale_owner_cannot_suspend(ledger: tenure.Ledger) -> None:
    """Its lease expired and the job was claimed again: the suspend is refused (LeaseLost)."""
    job_id = ledger.submit("k", {})
    stale = ledger.claim("w1", kinds=["k"], lease_seconds=0.2)
    assert stale is not None
    poll(lambda: ledger.now() > stale.lease_until, 10, "the lease to expire")
    fresh = ledger.claim("w2", kinds=["k"], lease_seconds=30)
    assert fresh is not None and fresh.token > stale.token
    request = WaitRequest(0, "signal:x", WaitFor.SIGNAL, signals=("x",))
    with pytest.raises(LeaseLost):
        lease_port(ledger).wait_on(stale, request)
    job = ledger.get(job_id)
    assert (job.state, job.owner_id) == (JobState.RUNNING, "w2")
    # The owner may: the job waits, its token stays until the next claim increments it.
    assert lease_port(ledger).wait_on(fresh, request).suspended
    job = ledger.get(job_id)
    assert (job.state, job.owner_id, job.token) == (JobState.WAITING, None, fresh.token)
    ledger.signal(job_id, "x", None)
    again = ledger.claim("w3", kinds=["k"], lease_seconds=30)
    assert again is not None and again.token > fresh.token and again.attempt == fresh.attempt


def test_cancelling_a_waiting_parent_cancels_its_children(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()
    release = threading.Event()

    @app.job("slow_child", **FAST)
    def slow_child(ctx: tenure.JobContext, payload: Any) -> Any:
        while not release.is_set():
            ctx.check()
            time.sleep(0.02)

    @app.job("boss", spawns=["slow_child"], **FAST)
    def boss(ctx: tenure.JobContext, payload: Any) -> Any:
        ids = [ctx.spawn("slow_child", {"n": n}) for n in range(2)]
        return ctx.wait_job(ids)

    ledger = app.ledger
    parent = ledger.submit("boss", {})
    try:
        with tenure.Worker(app, concurrency=1, poll_interval=0.05):
            waiting(ledger, parent)
            poll(lambda: any(c.state is JobState.RUNNING for c in ledger.children(parent)), 20)
            before = {c.id: c.token for c in ledger.children(parent)}
            ledger.cancel(parent)
            assert ledger.get(parent).state is JobState.CANCELLED
            after = ledger.children(parent)
            assert [c.state for c in after] == [JobState.CANCELLED] * 2
            assert all(c.token > before[c.id] for c in after)
    finally:
        release.set()
    cascaded = [e.detail for c in after for e in ledger.events(c.id) if e.type == "job_cancelled"]
    assert all(detail["by_parent"] == parent for detail in cascaded)


def test_a_cancelled_child_wakes_its_parent_with_child_failed(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.job("later", **FAST)
    def later(ctx: tenure.JobContext, payload: Any) -> Any:
        return None

    @app.job("watcher", spawns=["later"], **FAST)
    def watcher(ctx: tenure.JobContext, payload: Any) -> Any:
        child = ctx.spawn("later", {})
        try:
            return ctx.wait_job(child)
        except tenure.ChildFailed as exc:
            return exc.state

    ledger = app.ledger
    parent = ledger.submit("watcher", {})
    with tenure.Worker(app, concurrency=1, poll_interval=0.05, kinds=["watcher"]):
        waiting(ledger, parent)
        [child] = ledger.children(parent)
        ledger.cancel(child.id)
        done = ended(ledger, parent)
    assert done.result == "cancelled"


def test_bad_signals_are_refused_and_write_nothing(
    ledger: tenure.Ledger, connect: Callable[..., tenure.Ledger]
) -> None:
    job_id = ledger.submit("k", {})
    before = len(ledger.events(job_id))
    with pytest.raises(JobNotFound):
        ledger.signal("not-a-uuid", "x")
    with pytest.raises(JobNotFound):
        ledger.signal("00000000-0000-0000-0000-000000000000", "x")
    for name in ("", " ", "x" * 201, "a\x00b"):
        with pytest.raises(InvalidArgument):
            ledger.signal(job_id, name)
    with pytest.raises(InvalidArgument):
        ledger.signal(job_id, "x", {1, 2})  # not JSON
    with pytest.raises(PayloadTooLarge):
        connect(max_payload_bytes=64).signal(job_id, "x", "y" * 100)
    assert len(ledger.events(job_id)) == before
    ledger.cancel(job_id)
    with pytest.raises(TerminalJob):
        ledger.signal(job_id, "x")


def test_bad_waits_fail_clearly(make_app: Callable[[], tenure.App]) -> None:
    """A negative timeout and a job that is not this job's child: clear errors, no suspend."""
    app = make_app()
    seen: dict[str, str] = {}

    @app.job("stranger", **FAST)
    def stranger(ctx: tenure.JobContext, payload: Any) -> Any:
        try:
            ctx.wait_for("x", timeout=-1)
        except InvalidArgument as exc:
            seen["negative"] = str(exc)
        try:
            ctx.sleep(-3)
        except InvalidArgument as exc:
            seen["sleep"] = str(exc)
        ctx.wait_job(payload["other"])

    ledger = app.ledger
    other = ledger.submit("k", {})
    job_id = ledger.submit("stranger", {"other": other})
    with tenure.Worker(app, poll_interval=0.05, kinds=["stranger"]):
        done = ended(ledger, job_id)
    assert (done.state, done.error["code"]) == (JobState.FAILED, "not_a_child")
    assert "timeout" in seen["negative"] and "timeout" in seen["sleep"]
    assert "job_waiting" not in [e.type for e in ledger.events(job_id)]


def test_waiting_jobs_are_counted_by_state(ledger: tenure.Ledger) -> None:
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", kinds=["k"], lease_seconds=30)
    assert lease is not None
    lease_port(ledger).wait_on(lease, WaitRequest(0, "sleep#1", WaitFor.TIMER, seconds=3600))
    assert ledger.operations.counts()[JobState.WAITING] == 1
    assert [j.id for j in ledger.list(state="waiting")] == [job_id]
    job = ledger.get(job_id)
    assert job.run_after - ledger.now() > timedelta(minutes=59)
    assert ledger.claim("w", kinds=["k"], lease_seconds=30) is None


@pytest.mark.parametrize("style", ["blocking", "async"])
def test_replay_of_a_run_that_waited_spawns_and_waits_for_nothing(
    make_app: Callable[[], tenure.App], style: str
) -> None:
    """`tenure replay` substitutes recorded spawns and waits: same result, no new child. An
    async handler's twins (`await_for`, `aspawn`, `await_job`, `asleep`) suspend, resume and
    replay as the blocking calls do."""
    from tenure.replay import replay

    app = make_app()

    @app.job("leaf", **FAST)
    def leaf(ctx: tenure.JobContext, payload: Any) -> Any:
        return payload * 3

    def tree(ctx: tenure.JobContext, payload: Any) -> Any:
        go = ctx.wait_for("go")
        child = ctx.spawn("leaf", go)
        value = ctx.wait_job(child)
        ctx.sleep(0.1)
        return {"value": value}

    async def atree(ctx: tenure.JobContext, payload: Any) -> Any:
        go = await ctx.await_for("go")
        child = await ctx.aspawn("leaf", go)
        value = await ctx.await_job(child)
        await ctx.asleep(0.1)
        return {"value": value}

    app.job("tree", spawns=["leaf"], **FAST)(tree if style == "blocking" else atree)
    ledger = app.ledger
    job_id = ledger.submit("tree", {})
    ledger.signal(job_id, "go", 7)
    with tenure.Worker(app, concurrency=2, poll_interval=0.05):
        assert ended(ledger, job_id).result == {"value": 21}
    report = replay(ledger, job_id, app)
    assert (report.differences, report.replayed_result, report.error) == (0, {"value": 21}, None)
    assert [stage.kind for stage in report.stages] == ["wait", "step", "wait", "wait"]
    assert len(ledger.children(job_id)) == 1
    types = [event.type.value for event in ledger.events(job_id)]
    # The sleep always suspends (the child may have ended before its wait began).
    assert types.count("job_waiting") >= 1


def test_suspending_spends_no_attempt_but_max_attempts_still_bounds_failures(
    make_app: Callable[[], tenure.App],
) -> None:
    """A job that sleeps then fails every time: the sleep gave its attempt back, and the
    failures alone reach max_attempts=2 (three claims: the first, the resume, the retry)."""
    app = make_app()

    @app.job("flaky", max_attempts=2, **FAST)  # FAST retries after 0.01 s
    def flaky(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.sleep(0.1)
        raise RuntimeError("always")

    ledger = app.ledger
    job_id = ledger.submit("flaky", {})
    with tenure.Worker(app, poll_interval=0.05):
        done = ended(ledger, job_id)
    assert (done.state, done.attempt, done.error["code"]) == (JobState.FAILED, 2, "handler_error")
    types = [event.type.value for event in ledger.events(job_id)]
    assert types.count("job_claimed") == 3
    assert types.count("job_waiting") == 1  # the retry replayed the recorded sleep
    assert types.count("job_retry_scheduled") == 1


@pytest.mark.parametrize("limited", [False, True])
def test_a_child_whose_last_lease_expires_wakes_its_waiting_parent(
    ledger: tenure.Ledger, limited: bool
) -> None:
    """The claim that fails an exhausted child (a plain claim, or one under concurrency
    limits) wakes the parent that waits for it: the parent is claimable at once."""
    from tenure.storage.base import ClaimRequest

    parent_id = ledger.submit("parent", {})
    parent = ledger.claim("w", kinds=["parent"], lease_seconds=30)
    assert parent is not None
    child_id, _ = lease_port(ledger).spawn(parent, "child", "child", {}, max_attempts=1)
    request = WaitRequest(0, "wait_job#1", WaitFor.JOBS, jobs=(child_id,))
    assert lease_port(ledger).wait_on(parent, request).suspended
    ghost = ledger.claim("ghost", kinds=["child"], lease_seconds=0.2)
    assert ghost is not None and ghost.job_id == child_id
    poll(lambda: ledger.now() > ghost.lease_until, 10, "the child's lease to expire")
    settle = ClaimRequest(owner_id="w2", kinds=["child"], lease_seconds=30, limit=1)
    if limited:
        assert ledger._store.limited_claim(settle, {"child": 5}) == []
    else:
        assert ledger._store.claim(settle) == []
    assert ledger.get(child_id).state is JobState.FAILED
    resumed = ledger.claim("w3", kinds=["parent"], lease_seconds=30)
    assert resumed is not None and resumed.job_id == parent_id
    assert resumed.token > parent.token
