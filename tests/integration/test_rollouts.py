"""Rollouts on both backends: the share and the tenants a variant goes to (deterministic per
job id), `tenure worker --variants` processes that claim only their variants, the breaker
tripping once with two `tenure rollout status` processes deciding at once, cost by variant,
and bad input refused with nothing written."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import JobState
from tenure.ledger import share_of
from tests.support.cli import cli_env, tenure_cli
from tests.support.databases import sqlite_url
from tests.support.waiting import poll
from tests.support.workers import Workers

TOLERANCE = 10.0  # percentage points around the share asked for (300 jobs: ~3.8 sigma)


def test_a_share_of_the_jobs_gets_the_candidate_by_job_id_and_keeps_it(
    ledger: tenure.Ledger,
) -> None:
    """30% of 300 jobs (150 one by one, 150 in one batch): each job's variant is what its id
    says, the share within the tolerance; a resubmit with the key and a retry keep it."""
    ledger.operations.start_rollout("variant_echo", "v2", percent=30)
    ids = [ledger.submit("variant_echo", {"n": n}) for n in range(150)]
    ids += ledger.submit_many("variant_echo", [{"n": n} for n in range(150, 300)])
    jobs = [ledger.get(job_id) for job_id in ids]
    assert all(j.variant == ("v2" if share_of(j.id) < 30 else None) for j in jobs)
    share = 100 * sum(j.variant == "v2" for j in jobs) / len(jobs)
    assert abs(share - 30) <= TOLERANCE, share

    keyed = ledger.submit("variant_echo", {"n": -1}, idempotency_key="k-1")
    assert ledger.submit("variant_echo", {"n": -1}, idempotency_key="k-1") == keyed
    lease = ledger.claim("w", kinds=["variant_echo"], variants={"variant_echo": ["v2"]})
    assert lease is not None and lease.variant == "v2"
    ledger.release(lease)  # back to queued, as a retry would be
    assert ledger.get(lease.job_id).variant == "v2"


def test_a_tenant_limited_rollout_gives_the_variant_to_those_tenants_only(
    ledger: tenure.Ledger,
) -> None:
    ledger.operations.start_rollout("variant_echo", "m-2", tenants=["acme"])
    acme = [ledger.submit("variant_echo", {"n": n}, tenant="acme") for n in range(20)]
    others = [ledger.submit("variant_echo", {"n": n}, tenant="globex") for n in range(20)]
    assert {ledger.get(i).variant for i in acme} == {"m-2"}
    assert {ledger.get(i).variant for i in others} == {None}
    ledger.operations.stop_rollout("variant_echo")
    assert ledger.get(ledger.submit("variant_echo", {}, tenant="acme")).variant is None


@pytest.mark.slow
def test_workers_claim_only_the_variants_they_declare(
    ledger: tenure.Ledger, db_url: str, workers: Workers
) -> None:
    """A code rollout: `--variants variant_echo=v2` runs the candidate's jobs and no other,
    `--variants variant_echo=stable` the rest; each handler saw its job's variant."""
    ledger.operations.start_rollout("variant_echo", "v2", percent=50)
    ids = [ledger.submit("variant_echo", {"n": n}) for n in range(40)]
    workers.start(db_url, "old", "--variants", "variant_echo=stable")
    workers.start(db_url, "new", "--variants", "variant_echo=v2")
    poll(lambda: all(ledger.get(i).terminal for i in ids) or None, 60, "every job to end")
    jobs = [ledger.get(i) for i in ids]
    assert {j.state for j in jobs} == {JobState.SUCCEEDED}
    for job in jobs:
        expected = "new" if job.variant == "v2" else "old"
        assert job.result == {"variant": job.variant, "by": expected}
    assert {j.variant for j in jobs} == {"v2", None}


@pytest.mark.slow
def test_the_breaker_trips_once_and_later_jobs_are_stable(
    ledger: tenure.Ledger, db_url: str, workers: Workers
) -> None:
    """A candidate that fails 40% (threshold 20%, after 10 jobs) and costs three times as
    much: two `tenure rollout status` processes at once, one trips it; later submits are
    stable; the status compares the two variants, cost included. The candidate goes to one
    tenant's jobs (not a share of random ids) so that exactly 12 of its 30 jobs fail."""
    ledger.operations.start_rollout(
        "flaky_candidate", "v2", tenants=["canary"], max_failure_rate=0.2, min_jobs=10
    )
    candidates = [ledger.submit("flaky_candidate", {"n": n}, tenant="canary") for n in range(30)]
    ids = candidates + [ledger.submit("flaky_candidate", {"n": n}) for n in range(30)]
    assert {ledger.get(i).variant for i in candidates} == {"v2"}
    workers.start(db_url, "W", "--concurrency", "4")
    poll(lambda: all(ledger.get(i).terminal for i in ids) or None, 60, "every job to end")

    command = [sys.executable, "-m", "tenure.cli", "--db", db_url, "--json", "rollout", "status"]
    deciders = [
        subprocess.Popen(
            [*command, "flaky_candidate"], stdout=subprocess.PIPE, text=True, env=cli_env()
        )
        for _ in range(2)
    ]
    answers = [json.loads(p.communicate(timeout=60)[0]) for p in deciders]
    assert sorted(a["tripped_now"] for a in answers) == [False, True]
    status = answers[0]
    assert status["rollout"]["state"] == "tripped"
    assert status["rollout"]["trip"]["why"] == ["failure_rate"]
    candidate, stable = status["candidate"], status["stable"]
    assert (candidate["jobs"], candidate["failed"], stable["jobs"]) == (30, 12, 30)
    assert stable["failed"] == 0 and stable["tokens"] == 100 * stable["jobs"]
    assert candidate["tokens"] == 300 * candidate["jobs"]
    assert status["cost_ratio"] == pytest.approx(3.0)

    with tenure.connect(db_url) as fresh:  # another process's submits: stable from now on
        later = [fresh.submit("flaky_candidate", {"n": n}, tenant="canary") for n in range(30)]
        assert {fresh.get(i).variant for i in later} == {None}
    assert ledger.operations.check_rollout("flaky_candidate") is False  # tripped once, and stays so
    text = tenure_cli("rollout", "status", "flaky_candidate", db=db_url)
    assert text.returncode == 0, text.stderr
    assert "tripped (failure_rate after" in text.stdout and "failure rate" in text.stdout


@pytest.mark.slow
def test_a_tripped_hold_rollout_holds_its_new_jobs_until_an_operator_releases_them(
    ledger: tenure.Ledger, db_url: str, workers: Workers
) -> None:
    """`on_trip="hold"`: once tripped, the jobs the candidate would have had wait (no lease,
    no worker takes them while it runs other work) for the signal `release`; `tenure rollout
    release` sends it and they run as stable."""
    ledger.operations.start_rollout(
        "flaky_candidate", "v2", percent=100, max_failure_rate=0.2, min_jobs=5, on_trip="hold"
    )
    first = [ledger.submit("flaky_candidate", {"n": n}) for n in range(10)]
    workers.start(db_url, "W")
    poll(lambda: all(ledger.get(i).terminal for i in first) or None, 60, "the first jobs")
    assert ledger.operations.check_rollout("flaky_candidate") is True
    held = [ledger.submit("flaky_candidate", {"n": n}) for n in range(5)]
    jobs = [ledger.get(i) for i in held]
    assert {(j.state, j.variant, j.wait and j.wait.signal) for j in jobs} == {
        (JobState.WAITING, None, "release")
    }
    other = ledger.submit("variant_echo", {})  # the worker runs other work meanwhile
    poll(lambda: ledger.get(other).terminal or None, 30, "the other job")
    assert {ledger.get(i).state for i in held} == {JobState.WAITING}
    released = tenure_cli("rollout", "release", "flaky_candidate", db=db_url)
    assert released.returncode == 0 and "released 5 held job(s)" in released.stdout
    poll(lambda: all(ledger.get(i).terminal for i in held) or None, 60, "the held jobs")
    assert [ledger.get(i).result for i in held] == [{"n": n, "variant": None} for n in range(5)]


def test_bad_rollouts_are_refused_and_nothing_is_written(ledger: tenure.Ledger) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"percent": 150}, "percent must be a finite number from 0 to 100"),
        ({"percent": -1}, "percent must be a finite number from 0 to 100"),
        ({"percent": 10, "max_cost_ratio": math.inf}, "max_cost_ratio must be a finite"),
        ({"percent": 10, "max_cost_ratio": 10**400}, "an integer out of range"),
        ({"percent": math.nan}, "percent must be a finite number"),
        ({"percent": 10, "max_failure_rate": -0.1}, "max_failure_rate"),
        ({"percent": 10, "max_cost_ratio": -2}, "max_cost_ratio"),
        ({}, "tenants, a percent, or both"),
        ({"tenants": []}, "non-empty list"),
        ({"percent": 10, "on_trip": "later"}, "on_trip must be one of"),
        ({"percent": 10, "min_jobs": 0}, "min_jobs"),
    ]
    for options, reason in cases:
        with pytest.raises(tenure.InvalidArgument, match=reason):
            ledger.operations.start_rollout("variant_echo", "v2", **options)
    for variant in ("", "stable"):
        with pytest.raises(tenure.InvalidArgument):
            ledger.operations.start_rollout("variant_echo", variant, percent=10)
    assert ledger.operations.rollouts() == []
    ledger.operations.start_rollout("variant_echo", "v2", percent=10)
    with pytest.raises(tenure.InvalidArgument, match="already has a rollout"):
        ledger.operations.start_rollout("variant_echo", "v3", percent=10)
    assert [r.variant for r in ledger.operations.rollouts()] == ["v2"]
    with pytest.raises(tenure.InvalidArgument, match="has no rollout"):
        ledger.operations.stop_rollout("other")
    with pytest.raises(tenure.InvalidArgument, match="non-empty list"):
        ledger.claim("w", variants={"variant_echo": []})


def test_the_command_line_refuses_bad_rollouts_and_worker_variants(db_url: str) -> None:
    for args, reason in [
        (["rollout", "start", "k", "v2", "--percent", "101"], "percent"),
        (["rollout", "start", "k", "v2", "--percent", "5", "--min-jobs", "0"], "min_jobs"),
        (["rollout", "stop", "k"], "has no rollout"),
        (["worker", "tests.support.apps:app", "--variants", "variant_echo"], "KIND=VARIANT"),
    ]:
        done = tenure_cli(*args, db=db_url)
        assert (done.returncode, reason in done.stderr) == (2, True), (args, done.stderr)
    started = tenure_cli("rollout", "start", "k", "v2", "--tenants", "acme", db=db_url)
    assert started.returncode == 0 and "100% of acme" in started.stdout


def _run_by_hand(ledger: tenure.Ledger, kind: str, tenant: str, fails: int, runs: int) -> None:
    """Submit `runs` jobs of `tenant`, claim each, report a cost (three times as much as the
    candidate) and end it: the first `fails` fail."""
    for n in range(runs):
        ledger.submit(kind, {"n": n}, tenant=tenant)
    for n in range(runs):
        lease = ledger.claim("hand", kinds=[kind])
        assert lease is not None
        candidate = lease.variant is not None
        ledger.operations.report_cost(
            lease.job_id,
            lease.attempt,
            tokens=300 if candidate else 100,
            usd=0.03 if candidate else 0.01,
        )
        if n < fails:
            ledger.fail(lease, {"code": "wrong"}, retryable=False)
        else:
            ledger.complete(lease, {"n": n})


def test_the_rollouts_route_compares_each_tenant_over_its_own_jobs(ledger: tenure.Ledger) -> None:
    """GET /v1/rollouts: a tenant key sees the rollouts that reach its jobs, with figures of
    its own jobs, and no other tenant's name; the admin key sees every rollout over every
    tenant. Reading never trips the breaker."""
    from tenure import keys
    from tenure.service import ServiceSettings
    from tests.support.service import LiveServer

    ledger.operations.start_rollout("variant_echo", "v2", tenants=["acme", "globex"],
                                    max_failure_rate=0.1, min_jobs=2)  # fmt: skip
    ledger.operations.start_rollout("flaky_candidate", "m-2", tenants=["globex"])
    _run_by_hand(ledger, "variant_echo", "acme", fails=1, runs=4)
    _run_by_hand(ledger, "variant_echo", "globex", fails=0, runs=2)
    _run_by_hand(ledger, "variant_echo", "initech", fails=0, runs=3)  # stable: not in the list
    admin = keys.new_admin_key()
    with LiveServer(ledger, ServiceSettings(admin_key_sha256=admin.key_sha256)) as server:
        acme = server.client(ledger.operations.create_tenant("acme"))
        everyone = server.client(admin.key)
        mine = acme.get("/v1/rollouts")
        assert mine.status_code == 200, mine.text
        (seen,) = mine.json()["rollouts"]
        assert (seen["kind"], seen["tenants"], seen["state"]) == (
            "variant_echo",
            ["acme"],
            "active",
        )
        figures = [
            (s["jobs"], s["failed"], s["tokens"]) for s in (seen["candidate"], seen["stable"])
        ]
        assert figures == [(4, 1, 1200), (0, 0, 0)]
        assert seen["candidate"]["failure_rate"] == pytest.approx(0.25)

        every = {r["kind"]: r for r in everyone.get("/v1/rollouts").json()["rollouts"]}
        assert set(every) == {"variant_echo", "flaky_candidate"}
        echo = every["variant_echo"]
        assert echo["tenants"] == ["acme", "globex"]
        assert (echo["candidate"]["jobs"], echo["stable"]["jobs"]) == (6, 3)
        assert echo["cost_ratio"] == pytest.approx(3.0)
        assert server.client().get("/v1/rollouts").status_code == 401
        acme.close()
        everyone.close()
    rollout = ledger.operations.rollout("variant_echo")
    assert rollout is not None and rollout.state == "active"  # past the threshold, not tripped
    assert ledger.operations.check_rollout("variant_echo") is True


def test_job_cost_sums_the_attempts_and_knows_no_unknown_job(ledger: tenure.Ledger) -> None:
    _run_by_hand(ledger, "variant_echo", "default", fails=0, runs=1)
    (job,) = ledger.list(kind="variant_echo")
    ledger.operations.report_cost(job.id, 1, tokens=5, usd=0.5)
    tokens, usd = ledger.job_cost(job.id)
    assert (tokens, usd) == (105, pytest.approx(0.51))  # type: ignore[comparison-overlap]
    with pytest.raises(tenure.JobNotFound):
        ledger.job_cost("00000000-0000-4000-8000-000000000000")
    with pytest.raises(tenure.JobNotFound):
        ledger.job_cost("nope")


def test_a_job_of_the_same_millisecond_as_the_start_is_in_the_window(tmp_path: Path) -> None:
    """SQLite's clock has milliseconds: a job submitted in the millisecond the rollout started
    has the very same stored time. The window is compared in SQL, not through a Python datetime
    (1763683200.0020118 comes back from one as 1763683200.002012, which would miss the job).
    PostgreSQL keeps microseconds, which a datetime holds exactly."""
    db_url = sqlite_url(tmp_path)
    same = 1763683200.0020118
    with tenure.connect(db_url) as ledger:
        ledger.operations.start_rollout("variant_echo", "v2", percent=100)
        job_id = ledger.submit("variant_echo", {})
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as raw:
            raw.execute("UPDATE tenure_rollouts SET started_at = ?", (same,))
            raw.execute("UPDATE tenure_jobs SET created_at = ? WHERE id = ?", (same, job_id))
        assert ledger.operations.rollout_status("variant_echo").candidate.jobs == 1
