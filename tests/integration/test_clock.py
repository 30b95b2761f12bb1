"""A worker's local deadlines on a clock the test moves (`tenure.testing.clock.FakeClock`): a
ten-minute stage timeout and an hour's lease lifetime are met when the clock says, in well
under a second, and never because the machine was slow."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import JobState
from tenure.testing.clock import FakeClock
from tests.support.waiting import poll

# Production-like timings: a lease the database keeps for 15 minutes, renewed every 5.
LONG: dict[str, Any] = {
    "lease": 900.0,
    "heartbeat": 300.0,
    "missed": 1,
    "jitter": 20.0,
    "backoff": 0.01,
}


def test_the_fake_clock_ends_a_wait_only_when_moved_past_it() -> None:
    clock = FakeClock()
    event = threading.Event()
    ended: list[bool] = []
    waiter = threading.Thread(target=lambda: ended.append(clock.wait(event, 60.0)))
    waiter.start()
    clock.advance(59.0)
    waiter.join(0.2)
    assert waiter.is_alive() and not ended
    clock.advance(1.0)
    waiter.join(5)
    assert ended == [False]
    event.set()
    assert clock.wait(event, 60.0) is True
    with pytest.raises(ValueError):
        clock.advance(-1.0)


def test_a_ten_minute_stage_timeout_comes_when_the_clock_says(
    make_app: Callable[[], tenure.App],
) -> None:
    """The first attempt hangs inside a step; moving the clock past the stage timeout fails it
    as retryable (`stage_timeout`) and the second attempt succeeds."""
    app = make_app()
    clock = FakeClock()
    hung = threading.Event()
    never = threading.Event()

    @app.job("browser", stage_timeout=600.0, **LONG)
    def browser(ctx: tenure.JobContext, payload: dict[str, Any]) -> str:
        def modal() -> str:
            if ctx.attempt == 1:
                hung.set()
                never.wait()
            return "closed"

        return str(ctx.step("modal", modal))

    job_id = app.submit("browser", {})
    with tenure.Worker(app, concurrency=1, clock=clock) as worker:
        assert hung.wait(20)
        assert worker.stats.get("stage_timeouts", 0) == 0
        clock.advance(601.0)
        job = app.ledger.wait(job_id, 20)
        assert worker.stats["stage_timeouts"] == 1
    never.set()
    assert (job.state, job.result, job.attempt) == (JobState.SUCCEEDED, "closed", 2)
    retry = next(e for e in app.ledger.events(job_id) if e.type == "job_retry_scheduled")
    assert retry.detail["code"] == "stage_timeout"


def test_renewals_follow_the_clock(make_app: Callable[[], tenure.App]) -> None:
    """Nothing is renewed while the clock stands still; moving it past the heartbeat renews
    the lease once, in the database."""
    app = make_app()
    clock = FakeClock()
    running = threading.Event()
    release = threading.Event()

    @app.job("long", **LONG)
    def long(ctx: tenure.JobContext, payload: dict[str, Any]) -> None:
        running.set()
        release.wait(30)

    job_id = app.submit("long", {})
    with tenure.Worker(app, concurrency=1, clock=clock) as worker:
        assert running.wait(20)
        before = app.ledger.get(job_id)
        assert before is not None and worker.stats.get("heartbeats", 0) == 0
        clock.advance(301.0)
        poll(lambda: worker.stats.get("heartbeats", 0) >= 1, 20, "a renewal")
        after = app.ledger.get(job_id)
        assert after is not None and before.lease_until is not None
        assert after.lease_until is not None and after.lease_until > before.lease_until
        assert worker.stats["heartbeats"] == 1
        release.set()
        assert app.ledger.wait(job_id, 20).state is JobState.SUCCEEDED


def test_renewal_stops_at_max_lease_lifetime(make_app: Callable[[], tenure.App]) -> None:
    """Past max_lease_lifetime (an hour, by the clock) the handler is told to stop and the
    attempt fails."""
    app = make_app()
    clock = FakeClock()
    running = threading.Event()
    reasons: list[str | None] = []

    @app.job("endless", max_lease_lifetime=3600.0, stage_timeout=None, max_attempts=1, **LONG)
    def endless(ctx: tenure.JobContext, payload: dict[str, Any]) -> None:
        running.set()
        ctx.cancelled.wait(30)
        reasons.append(ctx.cancel_reason)

    job_id = app.submit("endless", {})
    with tenure.Worker(app, clock=clock):
        assert running.wait(20)
        clock.advance(3601.0)
        job = app.ledger.wait(job_id, 20)
    assert reasons == ["max_lease_lifetime"]
    assert (job.state, job.error) == (JobState.FAILED, {"code": "max_lease_lifetime"})
