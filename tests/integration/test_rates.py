"""Fleet-wide rate limits on both backends: four worker processes share one key's rate (no
second of the database's clock holds more claims than the rate allows), keys made from the
payload are limited apart, a handler's `RateLimited` holds the whole key and costs no attempt,
and unlimited kinds are claimed beside limited ones."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import tenure
from tests.support.waiting import poll
from tests.support.workers import LoggedWorker


def claim_times(ledger: tenure.Ledger, jobs: Sequence[tenure.Job]) -> list[datetime]:
    """When each job was claimed, by the database's clock, in order."""
    return sorted(
        event.at
        for job in jobs
        for event in ledger.events(job.id)
        if event.type is tenure.EventType.JOB_CLAIMED
    )


def most_in_one_second(times: Sequence[datetime]) -> int:
    """The most claims any one-second span of time holds."""
    most, first = 0, 0
    for last, at in enumerate(times):
        while (at - times[first]).total_seconds() > 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


def done(ledger: tenure.Ledger, kind: str, count: int) -> Callable[[], bool]:
    return lambda: len(ledger.list(kind=kind, state=tenure.JobState.SUCCEEDED, limit=1000)) >= count


def test_four_worker_processes_share_one_rate(db_url: str, tmp_path: Path) -> None:
    """60 jobs, a rate of 10 a second, four processes of four slots each: spread over at least
    5 seconds, and no second holds more than 10 claims plus one of the burst."""
    ledger = tenure.connect(db_url)
    for n in range(60):
        ledger.submit("call", {"n": n})
    workers = [
        LoggedWorker("tests.support.rated_app:app", db_url, tmp_path / str(n), "--concurrency", "4")
        for n in range(4)
        if (tmp_path / str(n)).mkdir() is None
    ]
    try:
        poll(done(ledger, "call", 60), 60, "60 rate-limited jobs")
    finally:
        for worker in workers:
            worker.stop()
    jobs = ledger.list(kind="call", limit=1000)
    times = claim_times(ledger, jobs)
    assert len(times) == 60
    assert most_in_one_second(times) <= 11
    span = (times[-1] - times[0]).total_seconds()
    assert span >= 5.0, span
    owners = {job.owner_id for job in jobs}
    assert len(owners) >= 2  # the rate was shared, not kept by one process
    print(f"achieved {59 / span:.2f} claims/s of 10 with 4 processes over {span:.1f} s")
    ledger.close()


def test_a_key_made_from_the_payload_limits_each_account_apart(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()
    app.job("ask_model", rate=tenure.Rate(4, per=1.0), rate_key=lambda payload: payload["account"])(
        lambda ctx, payload: payload
    )
    app.job("free")(lambda ctx, payload: payload)
    for n in range(12):
        app.ledger.submit("ask_model", {"account": "a", "n": n})
        app.ledger.submit("ask_model", {"account": "b", "n": n})
    for n in range(20):
        app.ledger.submit("free", {"n": n})
    with tenure.Worker(app, concurrency=8, poll_interval=0.05):
        poll(done(app.ledger, "ask_model", 24), 30, "24 jobs of two accounts")
        poll(done(app.ledger, "free", 20), 10, "20 unlimited jobs")
    jobs = app.ledger.list(kind="ask_model", limit=100)
    by_account = {
        account: claim_times(app.ledger, [j for j in jobs if j.payload["account"] == account])
        for account in ("a", "b")
    }
    assert all(most_in_one_second(times) <= 5 for times in by_account.values())
    together = claim_times(app.ledger, jobs)
    assert most_in_one_second(together) >= 6  # the two accounts ran side by side
    free = claim_times(app.ledger, app.ledger.list(kind="free", limit=100))
    # Unlimited jobs were not held behind the limited ones.
    assert free[-1] < together[-1]


def test_rate_limited_holds_the_key_and_spends_no_attempt(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()
    told: list[str] = []

    # A burst lets a key run ahead of its pace (here by 0.48 s): the hold still holds.
    @app.job("polite", rate=tenure.Rate(50, per=1.0, burst=25), max_attempts=1)
    def polite(ctx: tenure.JobContext, payload: Any) -> Any:
        if payload.get("limit") and ctx.job_id not in told:
            told.append(ctx.job_id)
            raise tenure.RateLimited(retry_after=2)
        return payload

    first = app.ledger.submit("polite", {"limit": True})
    with tenure.Worker(app, concurrency=4, poll_interval=0.05):
        released = poll(
            lambda: [
                e for e in app.ledger.events(first) if e.type is tenure.EventType.JOB_RELEASED
            ],
            10,
            "the job given back",
        )[0]
        others = [app.ledger.submit("polite", {"n": n}) for n in range(3)]
        poll(done(app.ledger, "polite", 4), 20, "four jobs")
    assert released.detail == {"reason": "rate_limited", "retry_after": 2.0}
    job = app.ledger.get(first)
    # max_attempts=1, yet it ran twice: the first run spent no attempt.
    assert job.state is tenure.JobState.SUCCEEDED and job.attempt == 1
    # Nothing of the key was claimed while it was held, not even jobs submitted after.
    later = claim_times(app.ledger, [*(app.ledger.get(o) for o in others), job])
    assert len(later) == 5  # the first job's two claims and the others'
    held = (later[1] - released.at).total_seconds()
    assert held >= 1.9, held


def test_rate_limited_without_a_rate_delays_only_its_job(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()
    told: list[str] = []

    @app.job("plain", max_attempts=1)
    def plain(ctx: tenure.JobContext, payload: Any) -> Any:
        if payload.get("limit") and ctx.job_id not in told:
            told.append(ctx.job_id)
            raise tenure.RateLimited(retry_after=1.5)
        return payload

    first = app.ledger.submit("plain", {"limit": True})
    with tenure.Worker(app, concurrency=2, poll_interval=0.05):
        poll(lambda: told, 10, "the first run")
        other = app.ledger.submit("plain", {})
        poll(done(app.ledger, "plain", 2), 20, "both jobs")
    (other_claim,) = claim_times(app.ledger, [app.ledger.get(other)])
    claims = claim_times(app.ledger, [app.ledger.get(first)])
    assert len(claims) == 2
    assert other_claim < claims[1]  # the other job did not wait for the first's hold
    assert (claims[1] - claims[0]).total_seconds() >= 1.4


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"rate": 10}, "rate must be a tenure.Rate"),
        ({"rate_key": "openai"}, "rate_key applies only with rate"),
        ({"rate": tenure.Rate(1), "rate_key": 5}, "rate_key is a name or a function"),
        ({"rate": tenure.Rate(1), "rate_key": "bad\x00key"}, "a rate key is a printable name"),
        ({"rate": tenure.Rate(1), "rate_key": "k" * 201}, "a rate key is a printable name"),
    ],
)
def test_a_bad_rate_is_refused_where_the_class_is_declared(
    options: dict[str, Any], says: str
) -> None:
    app = tenure.App("sqlite:///:memory:")
    with pytest.raises(tenure.InvalidJobClass, match=says):
        app.job("k", **options)(lambda ctx, payload: payload)
    assert "k" not in app.job_classes


def test_kinds_sharing_a_key_need_the_same_rate() -> None:
    app = tenure.App("sqlite:///:memory:")
    app.job("a", rate=tenure.Rate(10), rate_key="openai")(lambda ctx, payload: payload)
    app.job("b", rate=tenure.Rate(10), rate_key="openai")(lambda ctx, payload: payload)
    with pytest.raises(tenure.InvalidJobClass, match="need the same rate"):
        app.job("c", rate=tenure.Rate(20), rate_key="openai")(lambda ctx, payload: payload)


def test_tenants_take_turns_within_a_key(make_app: Callable[[], tenure.App]) -> None:
    """Tenant `big` submitted 20 jobs before `small`'s 4: the key's claims go in turns of
    its tenants, so `small`'s jobs are among the first 8 claims, not after `big`'s backlog."""
    app = make_app()
    app.job("ask_model", rate=tenure.Rate(20, per=1.0), rate_key="openai")(
        lambda ctx, payload: payload
    )
    big = [app.ledger.submit("ask_model", {"n": n}, tenant="big") for n in range(20)]
    small = [app.ledger.submit("ask_model", {"n": n}, tenant="small") for n in range(4)]
    with tenure.Worker(app, concurrency=4, poll_interval=0.05):
        poll(done(app.ledger, "ask_model", 24), 30, "24 jobs")
    claims = sorted(
        (event.at, tenant)
        for tenant, ids in (("big", big), ("small", small))
        for job_id in ids
        for event in app.ledger.events(job_id)
        if event.type is tenure.EventType.JOB_CLAIMED
    )
    first_eight = [tenant for _, tenant in claims[:8]]
    assert first_eight.count("small") == 4, first_eight


def test_a_rate_and_a_concurrency_limit_hold_together(make_app: Callable[[], tenure.App]) -> None:
    """A kind limited to 2 running and 20 claims a second: both hold."""
    app = make_app()
    lock = threading.Lock()
    running, most = [0], [0]

    @app.job("both", rate=tenure.Rate(20, per=1.0), concurrency_limit=2)
    def both(ctx: tenure.JobContext, payload: Any) -> Any:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)  # the work: long enough for the concurrency limit to matter
        with lock:
            running[0] -= 1
        return payload

    for n in range(20):
        app.ledger.submit("both", {"n": n})
    with tenure.Worker(app, concurrency=8, poll_interval=0.05):
        poll(done(app.ledger, "both", 20), 30, "20 jobs")
    assert most[0] <= 2
    times = claim_times(app.ledger, app.ledger.list(kind="both", limit=100))
    assert most_in_one_second(times) <= 21
