"""Real faults against real worker processes (`tenure worker`): kill -9, a cut network,
SIGTERM, and clocks skewed by hours."""

from __future__ import annotations

import json
import signal
from datetime import timedelta
from pathlib import Path

import pytest

import tenure
from tenure import JobState
from tenure.chaos.skew import build_shim, skew_env
from tenure.demo.bank import Bank, BankServer
from tenure.fence import FenceGuard
from tenure.testing.proxy import proxy_to
from tests.support.databases import PostgresServer, drop_schema, new_schema, with_schema
from tests.support.waiting import poll
from tests.support.workers import Workers, marker

pytestmark = pytest.mark.slow


def test_kill_9_inside_stage_two_of_three(
    ledger: tenure.Ledger, db_url: str, workers: Workers, tmp_path: Path
) -> None:
    """Worker A is killed with SIGKILL inside stage 2 of 3; standby worker B finishes the job:
    stage 1 ran once, stage 2 is reported in doubt (and, being a step, runs again), stage 3 ran
    once. Prints the failover time from the kill to B's claim (database clock)."""
    job_id = ledger.submit("three_stages", {})
    a = workers.start(db_url, "A")
    poll(lambda: list(tmp_path.glob(f"in-two-{a.pid}")), 30, "A inside stage two")
    workers.start(db_url, "B")
    killed_at = ledger.now()
    a.send_signal(signal.SIGKILL)
    a.wait()
    (tmp_path / "go-two").touch()
    job = poll(lambda: (j := ledger.get(job_id)).terminal and j, 30, "the job to finish")
    events = ledger.events(job_id)
    claims = [e for e in events if e.type == "job_claimed"]
    first, second = [e.token for e in claims]
    assert (job.state, job.result, job.token) == (JobState.SUCCEEDED, {"by": "B"}, second)
    assert marker(tmp_path, "ran") == ["1", "2", "2", "3"]
    in_doubt = [e for e in events if e.type == "step_in_doubt"]
    assert [(e.detail["name"], e.detail["started_token"], e.token) for e in in_doubt] == [
        ("two", first, second)
    ]
    assert first is not None and second is not None and first < second
    assert [s.token for s in ledger.stages(job_id)] == [first, second, second]
    failover = (claims[1].at - killed_at).total_seconds()
    print(f"\nfailover (lease 1.0 s, heartbeat 0.25 s): SIGKILL -> reclaim {failover:.3f} s")


@pytest.mark.parametrize("signals", [1, 2])
def test_sigterm_during_a_long_stage_releases_the_lease(
    ledger: tenure.Ledger, db_url: str, workers: Workers, tmp_path: Path, signals: int
) -> None:
    """SIGTERM during a long stage: after the grace period (or at once on a second signal) the
    lease is released without spending the attempt; another worker resumes after step 1."""
    job_id = ledger.submit("long_stage", {})
    grace = "0.3" if signals == 1 else "120"
    a = workers.start(db_url, "A", "--grace", grace)
    poll(lambda: list(tmp_path.glob(f"in-long-{a.pid}")), 30, "A in the long stage")
    for sent in range(1, signals + 1):
        # Signals are not queued: send the next only once the worker saw the last one.
        a.send_signal(signal.SIGTERM)
        poll(
            lambda: sum(e["event"] == "worker_signal" for e in workers.log_events("A")) >= sent,  # noqa: B023
            10,
            "the worker to see the signal",
        )
    assert a.wait(20) == 0
    job = ledger.get(job_id)
    assert (job.state, job.attempt, job.step, job.owner_id) == (JobState.QUEUED, 0, 1, None)
    assert "job_released" in [e.type for e in ledger.events(job_id)]
    (tmp_path / "finish").touch()
    workers.start(db_url, "B")
    job = poll(lambda: (j := ledger.get(job_id)).terminal and j, 30, "the job to finish")
    assert (job.state, job.result, job.attempt) == (JobState.SUCCEEDED, "finished", 1)
    assert marker(tmp_path, "ran") == ["first"]


def test_the_seeds_unpleasant_test(
    postgres_server: PostgresServer, workers: Workers, tmp_path: Path
) -> None:
    """W1 reaches PostgreSQL through a proxy; it claims, sends the charge to the receiver and
    stalls. The proxy is cut; the lease expires by the database's clock; W2 claims, resends the
    in-doubt charge with the same key and a higher fence (the receiver replays it), completes.
    The proxy is restored and W1 resumes: it cannot extend, cannot commit, and makes no second
    irreversible effect; its events say why."""
    schema = new_schema(postgres_server)
    guard = FenceGuard(f"sqlite:///{tmp_path / 'receiver.db'}")
    bank = Bank(guard)
    receiver = BankServer(bank)
    direct = with_schema(postgres_server.url, schema)
    ledger = tenure.connect(direct)
    try:
        with proxy_to(postgres_server.upstream()) as proxy:
            env = {"TENURE_TEST_RECEIVER": receiver.url}
            job_id = ledger.submit("charge", {"amount": 42})
            workers.start(postgres_server.proxied_url(schema, proxy.port), "W1", env=env)
            poll(lambda: marker(tmp_path, "charged-W1"), 30, "W1 to send the charge")
            w1 = ledger.get(job_id).owner_id
            proxy.cut()
            workers.start(direct, "W2", env=env)
            job = poll(lambda: (j := ledger.get(job_id)).terminal and j, 30, "W2 to finish")
            proxy.restore()
            (tmp_path / "W1-continue").touch()
            poll(
                lambda: (
                    {"heartbeat_lost", "result_rejected"}
                    <= {e.type for e in ledger.events(job_id) if e.owner_id == w1}
                ),
                30,
                "W1's verdict",
            )
            poll(lambda: marker(tmp_path, "W1-notify-refused"), 10, "W1's second effect")
            events = ledger.events(job_id)
    finally:
        workers.stop_all()
        receiver.close()
        guard.close()
        ledger.close()
        drop_schema(postgres_server, schema)

    key = f"tool-job:{job_id}:charge"
    first, second = [e.token for e in events if e.type == "job_claimed"]
    seen = [(e.what, e.path, e.token, e.key) for e in bank.events]
    assert seen == [("applied", "/charge", first, key), ("replayed", "/charge", second, key)]
    assert len(bank.payments) == 1
    assert not marker(tmp_path, "W1-notify-sent")
    assert marker(tmp_path, "W1-notify-refused")[0].startswith("JobCancelled")
    assert (job.state, job.token) == (JobState.SUCCEEDED, second)
    assert job.result == {
        "by": "W2",
        "receipt": {"payment_id": "pay-1", "amount_cents": 42, "fence": first},
    }
    assert json.loads(marker(tmp_path, "charged-W2")[0]) == {"token": second, "in_doubt": True}
    w1_events = [e.type for e in events if e.owner_id == w1]
    assert w1_events[0] == "job_claimed"
    assert {"ownership_unknown", "heartbeat_lost", "result_rejected"} <= set(w1_events)


def test_workers_with_clocks_hours_off_behave_like_the_others(
    postgres_server: PostgresServer, workers: Workers, tmp_path: Path
) -> None:
    """Two workers whose wall clocks are 3 hours ahead and 3 hours behind (an LD_PRELOAD shim
    that shifts CLOCK_REALTIME only) run jobs that outlive their lease: each job is claimed
    once, keeps its one token, and succeeds. Only the database's clock decides."""
    shim = build_shim(tmp_path)
    assert shim is not None, "a C compiler is needed to build the clock shim"
    schema = new_schema(postgres_server)
    url = with_schema(postgres_server.url, schema)
    ledger = tenure.connect(url)
    try:
        for name, seconds in (("ahead", 10800), ("behind", -10800)):
            workers.start(
                url,
                name,
                "--concurrency",
                "3",
                env=skew_env(shim, seconds),
            )
        ids = [ledger.submit("clocked", {"i": i}) for i in range(6)]
        jobs = [
            poll(lambda: (x := ledger.get(job_id)).terminal and x, 40, "jobs")  # noqa: B023
            for job_id in ids
        ]
        claims = {
            job.id: [e.token for e in ledger.events(job.id) if e.type == "job_claimed"]
            for job in jobs
        }
    finally:
        workers.stop_all()
        ledger.close()
        drop_schema(postgres_server, schema)
    assert [j.state for j in jobs] == [JobState.SUCCEEDED] * 6
    assert all(len(tokens) == 1 for tokens in claims.values()), claims
    by = {job.result["by"] for job in jobs}
    assert by == {"ahead", "behind"}
    for job in jobs:
        offset = job.result["wall"] - job.created_at.timestamp()
        expected = 10800 if job.result["by"] == "ahead" else -10800
        assert abs(offset - expected) < 60, (job.result, offset)
    assert all(j.updated_at - j.created_at < timedelta(minutes=1) for j in jobs)
