"""The worker runtime in-process, on SQLite and PostgreSQL: classes, steps, effects, failures,
lease loss, timeouts, graceful stop and logs."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import JobState
from tenure.logs import configure_json_logging
from tests.support.cli import tenure_cli
from tests.support.timing import FAST
from tests.support.tokens import claimed
from tests.support.waiting import poll, until_db_time_passes


def events(app: tenure.App, job_id: str) -> list[str]:
    return [e.type for e in app.ledger.events(job_id)]


# -- job classes -------------------------------------------------------------------------------


def test_job_class_lease_arithmetic_is_checked(make_app: Callable[[], tenure.App]) -> None:
    """A class is refused unless lease > (missed + 1) x heartbeat + jitter; the message gives
    the numbers. The defaults (90, 30, 1, 20) pass."""
    app = make_app()
    with pytest.raises(tenure.InvalidJobClass, match=r"lease 80s must exceed .* = 80s"):
        app.job("tight", lease=80, heartbeat=30, missed=1, jitter=20)(lambda ctx, p: None)
    with pytest.raises(tenure.InvalidJobClass, match="missed"):
        app.job("neg", missed=-1)(lambda ctx, p: None)
    with pytest.raises(tenure.InvalidJobClass, match="heartbeat"):
        app.job("zero", heartbeat=0)(lambda ctx, p: None)
    app.job("ok")(lambda ctx, p: None)
    job_class = app.job_classes["ok"]
    assert (job_class.lease, job_class.heartbeat, job_class.missed, job_class.jitter) == (
        90,
        30,
        1,
        20,
    )
    with pytest.raises(tenure.InvalidJobClass, match="twice"):
        app.job("ok")(lambda ctx, p: None)
    assert set(app.job_classes) == {"ok"}


def test_a_payload_cannot_choose_its_lease(make_app: Callable[[], tenure.App]) -> None:
    """The lease comes from the class: a payload asking for another lease changes nothing."""
    app = make_app()
    seen: dict[str, Any] = {}

    @app.job("agent", **FAST)
    def agent(ctx: tenure.JobContext, payload: dict[str, Any]) -> None:
        seen["lease"] = ctx._run.lease.lease_seconds

    job_id = app.submit("agent", {"lease": 86400, "lease_seconds": 86400, "kind": "other"})
    with tenure.Worker(app):
        assert app.ledger.wait(job_id, 10).state is JobState.SUCCEEDED
    assert seen["lease"] == 1.0
    assert app.ledger.get(job_id).kind == "agent"


# -- steps and effects -------------------------------------------------------------------------


def test_recorded_steps_are_not_rerun_after_a_retry(make_app: Callable[[], tenure.App]) -> None:
    """Attempt 1 records step 'fetch' then fails; attempt 2 gets fetch's result without running
    it, runs 'summarise', and the job succeeds."""
    app = make_app()
    runs: list[str] = []

    @app.job("report", **FAST)
    def report(ctx: tenure.JobContext, payload: dict[str, Any]) -> Any:
        rows = ctx.step("fetch", lambda: runs.append("fetch") or [1, 2, 3])
        if ctx.attempt == 1:
            raise RuntimeError("the model timed out")
        return ctx.step("summarise", lambda: runs.append("summarise") or {"sum": sum(rows)})

    job_id = app.submit("report", {})
    with tenure.Worker(app):
        job = app.ledger.wait(job_id, 15)
    assert (job.state, job.result, job.attempt, job.step) == (JobState.SUCCEEDED, {"sum": 6}, 2, 2)
    assert runs == ["fetch", "summarise"]
    stages = app.ledger.stages(job_id)
    first, second = claimed(app.ledger, job_id)
    assert [(s.name, s.status.value, s.token) for s in stages] == [
        ("fetch", "done", first),
        ("summarise", "done", second),
    ]
    assert "job_retry_scheduled" in events(app, job_id)


def test_a_changed_step_order_is_an_error(make_app: Callable[[], tenure.App]) -> None:
    """A replay that asks for another step than the one recorded fails the job, not a rerun."""
    app = make_app()

    @app.job("flaky", **FAST)
    def flaky(ctx: tenure.JobContext, payload: dict[str, Any]) -> None:
        ctx.step("a" if ctx.attempt == 1 else "b", lambda: 1)
        raise RuntimeError("retry me")

    job_id = app.submit("flaky", {})
    with tenure.Worker(app):
        job = app.ledger.wait(job_id, 15)
    assert job.state is JobState.FAILED
    assert job.error["code"] == "stage_mismatch"
    assert "steps must keep their names and order" in job.error["message"]


def test_non_retryable_fails_at_once(make_app: Callable[[], tenure.App]) -> None:
    """NonRetryable ends the job failed on the first attempt, with its code and message."""
    app = make_app()

    @app.job("pay", **FAST)
    def pay(ctx: tenure.JobContext, payload: dict[str, Any]) -> None:
        raise tenure.NonRetryable("card declined for customer c-1048", code="permission_denied")

    job_id = app.submit("pay", {})
    with tenure.Worker(app):
        job = app.ledger.wait(job_id, 10)
    assert (job.state, job.attempt, job.error) == (
        JobState.FAILED,
        1,
        {"code": "permission_denied", "message": "card declined for customer c-1048"},
    )


def test_effect_in_doubt_keeps_its_key_and_gets_the_new_fence(
    make_app: Callable[[], tenure.App],
) -> None:
    """A tool timeout leaves the effect in doubt; the next attempt sees in_doubt, the same key
    and its own (higher) fence; step_in_doubt is recorded."""
    app = make_app()
    seen: list[tenure.Effect] = []

    @app.job("mail", **FAST)
    def mail(ctx: tenure.JobContext, payload: dict[str, Any]) -> Any:
        def send(fx: tenure.Effect) -> str:
            seen.append(fx)
            if not fx.in_doubt:
                raise tenure.ToolOutcomeUnknown("the SMTP relay timed out")
            return "sent"

        return ctx.effect("email", send)

    job_id = app.submit("mail", {})
    with tenure.Worker(app):
        job = app.ledger.wait(job_id, 15)
    assert job.state is JobState.SUCCEEDED
    first, second = claimed(app.ledger, job_id)
    assert [(fx.key, fx.token, fx.in_doubt) for fx in seen] == [
        (f"tool-job:{job_id}:email", first, False),
        (f"tool-job:{job_id}:email", second, True),
    ]
    assert first < second and seen[0].claim != seen[1].claim
    types = events(app, job_id)
    assert types.count("tool_request_started") == 2 and "step_in_doubt" in types
    failed = next(e for e in app.ledger.events(job_id) if e.type == "job_retry_scheduled")
    assert failed.detail["code"] == "tool_outcome_unknown"
    unknown = next(e for e in app.ledger.events(job_id) if e.type == "tool_outcome_unknown")
    assert (unknown.token, unknown.detail["effect"], unknown.detail["cause"]) == (
        first,
        "email",
        "tool_error",
    )
    assert unknown.detail["request_id"] and unknown.detail["last_confirmed_lease_until"]


def test_async_handler_runs_steps_and_effects(make_app: Callable[[], tenure.App]) -> None:
    """An async def handler with astep and aeffect (sync and async functions) succeeds."""
    app = make_app()

    @app.job("browse", **FAST)
    async def browse(ctx: tenure.JobContext, payload: dict[str, Any]) -> Any:
        page = await ctx.astep("open", lambda: {"title": "t"})

        async def click(fx: tenure.Effect) -> dict[str, Any]:
            await asyncio.sleep(0.01)
            return {"fence": fx.token}

        clicked = await ctx.aeffect("click", click)
        return {"page": page, "clicked": clicked}

    job_id = app.submit("browse", {})
    with tenure.Worker(app):
        job = app.ledger.wait(job_id, 10)
    assert job.result == {"page": {"title": "t"}, "clicked": {"fence": job.token}}
    assert claimed(app.ledger, job_id) == [job.token]


# -- lease loss and cancellation ---------------------------------------------------------------


def test_cancel_reaches_a_running_handler_and_its_result_is_rejected(
    make_app: Callable[[], tenure.App],
) -> None:
    """Cancel while running: ctx.cancelled is set, on_cancel runs, and what the handler
    returns afterwards is never committed (discarded by the worker; the database would refuse
    it too: the token was bumped)."""
    app = make_app()
    started, hook_ran = threading.Event(), threading.Event()

    @app.job("export", **FAST)
    def export(ctx: tenure.JobContext, payload: dict[str, Any]) -> Any:
        ctx.on_cancel(hook_ran.set)
        started.set()
        ctx.cancelled.wait(10)
        return {"reason": ctx.cancel_reason}

    job_id = app.submit("export", {})
    with tenure.Worker(app) as worker:
        assert started.wait(10)
        app.ledger.cancel(job_id)
        assert hook_ran.wait(5)
        poll(lambda: worker.running == 0 or None, 10, "the run to end")
    job = app.ledger.get(job_id)
    assert (job.state, job.result) == (JobState.CANCELLED, None)
    assert "job_cancelled" in events(app, job_id)
    assert "job_succeeded" not in events(app, job_id)


def test_lease_loss_cancels_an_async_handler(make_app: Callable[[], tenure.App]) -> None:
    """An async handler's task is cancelled when its lease is lost."""
    app = make_app()
    started, task_cancelled = threading.Event(), threading.Event()

    @app.job("chat", **FAST)
    async def chat(ctx: tenure.JobContext, payload: dict[str, Any]) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            task_cancelled.set()
            raise

    job_id = app.submit("chat", {})
    with tenure.Worker(app):
        assert started.wait(10)
        app.ledger.cancel(job_id)
        assert task_cancelled.wait(5)
    assert app.ledger.get(job_id).state is JobState.CANCELLED


# -- heartbeats and timeouts -------------------------------------------------------------------


@pytest.mark.parametrize("blocking", ["busy_loop", "sleep"])
def test_a_blocked_handler_keeps_its_lease(
    make_app: Callable[[], tenure.App], blocking: str
) -> None:
    """A handler that blocks its own thread for three lease lengths keeps the lease: one claim,
    one token, success. The heartbeat runs on another thread."""
    app = make_app()

    @app.job("ocr", **FAST)
    def ocr(ctx: tenure.JobContext, payload: dict[str, Any]) -> str:
        end = time.monotonic() + 3 * FAST["lease"]
        if blocking == "sleep":
            time.sleep(3 * FAST["lease"])
        while time.monotonic() < end:
            pass
        return "text"

    job_id = app.submit("ocr", {})
    with tenure.Worker(app, concurrency=2) as worker:
        job = app.ledger.wait(job_id, 20)
        assert worker.stats["heartbeats"] >= 8
    assert (job.state, job.attempt) == (JobState.SUCCEEDED, 1)
    assert claimed(app.ledger, job_id) == [job.token]
    assert events(app, job_id).count("job_claimed") == 1


def test_a_hung_but_heartbeating_stage_is_stopped_by_its_timeout(
    make_app: Callable[[], tenure.App],
) -> None:
    """The first attempt hangs inside a step forever; the stage timeout fails it as retryable
    and gives its slot back, so even a worker with one slot runs the second attempt."""
    app = make_app()
    never = threading.Event()

    @app.job("browser", stage_timeout=0.6, **FAST)
    def browser(ctx: tenure.JobContext, payload: dict[str, Any]) -> str:
        return str(ctx.step("modal", lambda: never.wait() if ctx.attempt == 1 else "closed"))

    job_id = app.submit("browser", {})
    with tenure.Worker(app, concurrency=1) as worker:
        job = app.ledger.wait(job_id, 20)
        assert worker.stats["stage_timeouts"] == 1
    assert (job.state, job.result, job.attempt) == (JobState.SUCCEEDED, "closed", 2)
    retry = next(e for e in app.ledger.events(job_id) if e.type == "job_retry_scheduled")
    assert retry.detail["code"] == "stage_timeout"
    never.set()


def test_heartbeats_are_batched(make_app: Callable[[], tenure.App]) -> None:
    """Twelve running jobs are renewed in one statement per tick, not one per job."""
    app = make_app()
    release = threading.Event()

    @app.job("hold", **FAST)
    def hold(ctx: tenure.JobContext, payload: dict[str, Any]) -> None:
        release.wait(30)

    ids = [app.submit("hold", {"i": i}) for i in range(12)]
    with tenure.Worker(app, concurrency=12) as worker:
        poll(lambda: len(app.ledger.list(state="running")) == 12, 10, "12 running jobs")
        poll(lambda: worker.stats.get("heartbeats", 0) >= 12 * 6, 15, "six ticks")
        stats = worker.stats
        release.set()
        for job_id in ids:
            assert app.ledger.wait(job_id, 10).state is JobState.SUCCEEDED
    assert stats["heartbeats"] / stats["renewal_batches"] >= 6


def test_an_effect_is_refused_when_the_lease_cannot_be_confirmed(tmp_path: Path) -> None:
    """Invariant 8: with the database locked away until less than heartbeat + jitter of the
    lease is confirmed, attempt 1 may not start its effect; attempt 2, once the database is
    back, sends it with its own fence. The tool only ever sees the second claim's fence."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    app = tenure.App(url, timeout=0.2)
    reached, proceed, decided = threading.Event(), threading.Event(), threading.Event()
    tool_fences: list[int] = []
    first: dict[str, str] = {}

    def charge(fx: tenure.Effect) -> str:
        tool_fences.append(fx.token)
        return "charged"

    @app.job("pay", lease=1.0, heartbeat=0.25, missed=1, jitter=0.4, backoff=0.01)
    def pay(ctx: tenure.JobContext, payload: dict[str, Any]) -> Any:
        if ctx.attempt == 1:
            reached.set()
            proceed.wait(10)
            try:
                return ctx.effect("charge", charge)
            except (tenure.OwnershipUnknown, tenure.JobCancelled) as exc:
                first["refused"] = type(exc).__name__
                decided.set()
                raise
        return ctx.effect("charge", charge)

    job_id = app.submit("pay", {})
    blocker = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    try:
        with tenure.Worker(app) as worker:
            assert reached.wait(10)
            (run,) = worker._active()
            blocker.execute("BEGIN IMMEDIATE")
            poll(lambda: run.margin_left() < run.job_class.margin, 5, "the margin to run short")
            proceed.set()
            assert decided.wait(5)
            blocker.execute("ROLLBACK")
            job = app.ledger.wait(job_id, 15)
    finally:
        blocker.close()
        app.close()
    assert first["refused"] in {"OwnershipUnknown", "JobCancelled"}
    assert (job.state, job.result) == (JobState.SUCCEEDED, "charged")
    with tenure.connect(url) as ledger:
        started = [e.token for e in ledger.events(job_id) if e.type == "tool_request_started"]
        second = claimed(ledger, job_id)[1]
    assert tool_fences == [second]
    assert started == [second]


# -- graceful stop and logs --------------------------------------------------------------------


def test_stop_releases_a_running_job_which_resumes_from_its_cursor(
    make_app: Callable[[], tenure.App],
) -> None:
    """Worker.stop(grace) lets the grace pass, releases the lease without spending the
    attempt; a new worker resumes after the recorded step."""
    app = make_app()
    in_long, finish, runs = threading.Event(), threading.Event(), []

    @app.job("long", **FAST)
    def long(ctx: tenure.JobContext, payload: dict[str, Any]) -> str:
        ctx.step("first", lambda: runs.append("first"))

        def wait() -> str:
            in_long.set()
            return "done" if finish.is_set() else ("stopped" if ctx.cancelled.wait(30) else "")

        return str(ctx.step("long", wait))

    job_id = app.submit("long", {})
    worker = tenure.Worker(app).start()
    assert in_long.wait(10)
    worker.stop(grace=0.2)
    job = app.ledger.get(job_id)
    assert (job.state, job.attempt, job.step) == (JobState.QUEUED, 0, 1)
    assert "job_released" in events(app, job_id)
    finish.set()
    with tenure.Worker(app):
        job = app.ledger.wait(job_id, 10)
    assert (job.state, job.result, job.attempt) == (JobState.SUCCEEDED, "done", 1)
    assert runs == ["first"]


def test_logs_are_json_lines_without_content(make_app: Callable[[], tenure.App]) -> None:
    """Every log line is JSON with an event name; payloads and results never appear."""
    app = make_app()
    secret = "customer-SSN-078-05-1120"  # noqa: S105 - a stand-in for content, not a password

    @app.job("kyc", **FAST)
    def kyc(ctx: tenure.JobContext, payload: dict[str, Any]) -> Any:
        return ctx.step("check", lambda: {"echo": payload["ssn"]})

    stream = io.StringIO()
    configure_json_logging(logging.DEBUG, stream)  # per-job lines are DEBUG
    try:
        job_id = app.submit("kyc", {"ssn": secret})
        with tenure.Worker(app):
            assert app.ledger.wait(job_id, 10).state is JobState.SUCCEEDED
    finally:
        logging.getLogger("tenure").handlers.clear()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    names = {line["event"] for line in lines}
    assert {"job_submitted", "job_claimed", "job_started", "job_ended"} <= names
    assert all(line.get("job") in {None, job_id} for line in lines)
    assert secret not in stream.getvalue()


def test_sqlite_connections_stay_few_while_many_jobs_run(tmp_path: Path) -> None:
    """Each job runs on a new thread, yet the SQLite store reuses a few pooled connections."""
    app = tenure.App(f"sqlite:///{tmp_path / 't.db'}")

    @app.job("tiny", **FAST)
    def tiny(ctx: tenure.JobContext, payload: dict[str, Any]) -> Any:
        return ctx.step("one", lambda: payload["i"])

    ids = [app.submit("tiny", {"i": i}) for i in range(40)]
    try:
        with tenure.Worker(app, concurrency=3) as worker:
            for job_id in ids:
                assert app.ledger.wait(job_id, 20).state is JobState.SUCCEEDED
            opened = worker.ledger._store.connections_opened  # type: ignore[union-attr]
    finally:
        app.close()
    assert opened <= 3 + 3  # runners, keeper threads, claim loop: far below one per job


def test_the_class_policy_bounds_jobs_submitted_without_the_class(
    make_app: Callable[[], tenure.App],
) -> None:
    """A job submitted by `ledger.submit` (5 attempts by default) of a class with
    max_attempts=2 runs at most twice: the class's policy is the worker's."""
    app = make_app()
    calls: list[int] = []

    @app.job("strict", max_attempts=2, **FAST)
    def strict(ctx: tenure.JobContext, payload: Any) -> None:
        calls.append(ctx.attempt)
        raise RuntimeError("always")

    job_id = app.ledger.submit("strict", {})
    assert app.ledger.get(job_id).max_attempts == 5
    with tenure.Worker(app, concurrency=1):
        job = app.ledger.wait(job_id, 30)
    assert job.state is JobState.FAILED
    assert calls == [1, 2]


def test_a_reclaim_past_the_class_attempts_fails_without_running(
    make_app: Callable[[], tenure.App],
) -> None:
    """The last allowed attempt's lease expired (a ghost owner): the worker's claim of the
    next attempt fails the job `lease_expired` and never calls the handler."""
    app = make_app()
    calls: list[int] = []

    @app.job("once", max_attempts=1, **FAST)
    def once(ctx: tenure.JobContext, payload: Any) -> None:
        calls.append(ctx.attempt)

    job_id = app.ledger.submit("once", {})
    ghost = app.ledger.claim("ghost", kinds=["once"], lease_seconds=0.2)
    assert ghost is not None and ghost.attempt == 1
    until_db_time_passes(app.ledger, ghost.lease_until)
    with tenure.Worker(app, concurrency=1):
        job = app.ledger.wait(job_id, 30)
    assert job.state is JobState.FAILED
    assert job.error["code"] == "lease_expired"
    assert calls == []


def _cancel_watcher(app: tenure.App, **timing: Any) -> tuple[dict[str, Any], threading.Event]:
    seen: dict[str, Any] = {}
    started = threading.Event()

    @app.job("watch", **timing)
    def watch(ctx: tenure.JobContext, payload: Any) -> None:
        started.set()
        ctx.cancelled.wait(30)
        seen["reason"] = ctx.cancel_reason

    return seen, started


def test_an_operator_cancel_reaches_the_handler_as_cancelled_at_once(
    make_app: Callable[[], tenure.App], db_url: str
) -> None:
    """`ledger.cancel` while the handler runs: `ctx.cancel_reason` is "cancelled" (not
    "lease_lost"), delivered by the cancel's own notification (PostgreSQL NOTIFY, or this
    process's cancel on SQLite), long before the 10 s heartbeat would have found it."""
    app = make_app()
    seen, started = _cancel_watcher(app, lease=30, heartbeat=10, missed=1, jitter=5)
    job_id = app.submit("watch", {})
    with tenure.Worker(app, concurrency=1) as worker, tenure.connect(db_url) as operator:
        assert started.wait(20)
        operator.cancel(job_id)
        poll(lambda: "reason" in seen or None, 20, "the handler to see the cancel")
        assert worker.stats.get("cancels_heard") == 1
    assert seen["reason"] == "cancelled"
    assert app.ledger.get(job_id).state is JobState.CANCELLED


def test_a_cancel_from_another_process_reads_cancelled(
    make_app: Callable[[], tenure.App], db_url: str
) -> None:
    """`tenure cancel ID` from another process: the handler's reason is "cancelled" on both
    backends (PostgreSQL by NOTIFY, SQLite at the next renewal, which asks why it failed)."""
    app = make_app()
    seen, started = _cancel_watcher(app, **FAST)
    job_id = app.submit("watch", {})
    with tenure.Worker(app, concurrency=1):
        assert started.wait(20)
        done = tenure_cli("cancel", job_id, "--db", db_url)
        assert done.returncode == 0, done.stderr
        poll(lambda: "reason" in seen or None, 20, "the handler to see the cancel")
    assert seen["reason"] == "cancelled"


@pytest.mark.parametrize("keep", [True, False])
def test_a_non_retryable_message_is_kept_for_the_operator_unless_turned_off(
    db_url: str, keep: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """`NonRetryable(message, code=...)`: the failed job's error holds the code and (bounded)
    the message, or with `keep_error_messages=False` the code alone; no log line has it."""
    app = tenure.App(db_url, keep_error_messages=keep)

    @app.job("validate", **FAST)
    def validate(ctx: tenure.JobContext, payload: Any) -> None:
        raise tenure.NonRetryable("invoice 17 has no VAT number" + "!" * 2000, code="no_vat")

    try:
        job_id = app.submit("validate", {})
        with caplog.at_level(logging.DEBUG, logger="tenure"), tenure.Worker(app, concurrency=1):
            job = app.ledger.wait(job_id, 30)
    finally:
        app.close()
    assert job.state is JobState.FAILED and job.error["code"] == "no_vat"
    if keep:
        assert job.error["message"].startswith("invoice 17 has no VAT number")
        assert len(job.error["message"]) == tenure.NonRetryable.MAX_MESSAGE
    else:
        assert "message" not in job.error
    assert "VAT" not in caplog.text
