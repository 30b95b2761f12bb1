"""Rollouts on both backends: the share and the tenants a variant goes to (deterministic per
job id), `tenure worker --variants` processes that claim only their variants, the breaker
tripping once with two `tenure rollout status` processes deciding at once, cost by variant,
and bad input refused with nothing written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tenure
from tenure import JobState
from tenure.ledger.rollouts import share_of
from tests.support.cli import cli_env, tenure_cli
from tests.support.waiting import poll
from tests.test_worker_faults import Workers

TOLERANCE = 10.0  # percentage points around the share asked for (300 jobs: ~3.8 sigma)


def test_a_share_of_the_jobs_gets_the_candidate_by_job_id_and_keeps_it(
    ledger: tenure.Ledger,
) -> None:
    """30% of 300 jobs (150 one by one, 150 in one batch): each job's variant is what its id
    says, the share within the tolerance; a resubmit with the key and a retry keep it."""
    ledger.start_rollout("variant_echo", "v2", percent=30)
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
    ledger.start_rollout("variant_echo", "m-2", tenants=["acme"])
    acme = [ledger.submit("variant_echo", {"n": n}, tenant="acme") for n in range(20)]
    others = [ledger.submit("variant_echo", {"n": n}, tenant="globex") for n in range(20)]
    assert {ledger.get(i).variant for i in acme} == {"m-2"}
    assert {ledger.get(i).variant for i in others} == {None}
    ledger.stop_rollout("variant_echo")
    assert ledger.get(ledger.submit("variant_echo", {}, tenant="acme")).variant is None


@pytest.mark.slow
def test_workers_claim_only_the_variants_they_declare(
    ledger: tenure.Ledger, db_url: str, workers: Workers
) -> None:
    """A code rollout: `--variants variant_echo=v2` runs the candidate's jobs and no other,
    `--variants variant_echo=stable` the rest; each handler saw its job's variant."""
    ledger.start_rollout("variant_echo", "v2", percent=50)
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
    stable; the status compares the two variants, cost included."""
    ledger.start_rollout("flaky_candidate", "v2", percent=50, max_failure_rate=0.2, min_jobs=10)
    ids = [ledger.submit("flaky_candidate", {"n": n}) for n in range(60)]
    candidates = [i for i in ids if ledger.get(i).variant == "v2"]
    assert len(candidates) >= 10, "the share gave too few candidate jobs for this test"
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
    assert (candidate["jobs"], candidate["failed"]) == (
        len(candidates),
        sum(ledger.get(i).payload["n"] % 5 < 2 for i in candidates),
    )
    assert stable["failed"] == 0 and stable["tokens"] == 100 * stable["jobs"]
    assert candidate["tokens"] == 300 * candidate["jobs"]
    assert status["cost_ratio"] == pytest.approx(3.0)

    with tenure.connect(db_url) as fresh:  # another process's submits: stable from now on
        later = [fresh.submit("flaky_candidate", {"n": n}) for n in range(30)]
        assert {fresh.get(i).variant for i in later} == {None}
    assert ledger.check_rollout("flaky_candidate") is False  # tripped once, and stays so
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
    ledger.start_rollout(
        "flaky_candidate", "v2", percent=100, max_failure_rate=0.2, min_jobs=5, on_trip="hold"
    )
    first = [ledger.submit("flaky_candidate", {"n": n}) for n in range(10)]
    workers.start(db_url, "W")
    poll(lambda: all(ledger.get(i).terminal for i in first) or None, 60, "the first jobs")
    assert ledger.check_rollout("flaky_candidate") is True
    held = [ledger.submit("flaky_candidate", {"n": n}) for n in range(5)]
    jobs = [ledger.get(i) for i in held]
    assert {(j.state, j.variant, (j.wait or {}).get("name")) for j in jobs} == {
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
    cases = [
        ({"percent": 150}, "percent must be between 0 and 100"),
        ({"percent": -1}, "percent must be between 0 and 100"),
        ({"percent": 10, "max_failure_rate": -0.1}, "max_failure_rate"),
        ({"percent": 10, "max_cost_ratio": -2}, "max_cost_ratio"),
        ({}, "tenants, a percent, or both"),
        ({"tenants": []}, "non-empty list"),
        ({"percent": 10, "on_trip": "later"}, "on_trip must be one of"),
        ({"percent": 10, "min_jobs": 0}, "min_jobs"),
    ]
    for options, reason in cases:
        with pytest.raises(tenure.InvalidArgument, match=reason):
            ledger.start_rollout("variant_echo", "v2", **options)
    for variant in ("", "stable"):
        with pytest.raises(tenure.InvalidArgument):
            ledger.start_rollout("variant_echo", variant, percent=10)
    assert ledger.rollouts() == []
    ledger.start_rollout("variant_echo", "v2", percent=10)
    with pytest.raises(tenure.InvalidArgument, match="already has a rollout"):
        ledger.start_rollout("variant_echo", "v3", percent=10)
    assert [r.variant for r in ledger.rollouts()] == ["v2"]
    with pytest.raises(tenure.InvalidArgument, match="has no rollout"):
        ledger.stop_rollout("other")
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
