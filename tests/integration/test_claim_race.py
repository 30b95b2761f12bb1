"""Several real processes claim from one queue: never two valid leases on one job."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

import tenure
from tests.support.processes import release_together, worker
from tests.support.tokens import claimed as claimed_tokens

pytestmark = pytest.mark.slow

PROCESSES = 4


def run_race(db_url: str, *extra: str) -> list[tuple[str, str, int, float, float]]:
    """Start the claimers, release them together, collect every claim they made."""
    procs = [worker("race", db_url, "--owner", f"P{i}", *extra) for i in range(PROCESSES)]
    claims = []
    for report in release_together(procs):
        claims += [(report["owner"], *claim) for claim in report["claims"]]
    return claims


def test_each_job_is_claimed_once_while_leases_hold(ledger: tenure.Ledger, db_url: str) -> None:
    """300 jobs, 4 processes racing, long leases: every job claimed exactly once, each token
    its job's first (recorded as its only job_claimed event)."""
    ids = {ledger.submit("k", {"i": i}) for i in range(300)}
    claims = run_race(db_url, "--lease", "60", "--once")
    claimed = [job_id for _, job_id, *_ in claims]
    assert sorted(claimed) == sorted(ids)
    for _, job_id, token, *_ in claims:
        assert claimed_tokens(ledger, job_id) == [token]
    assert len({owner for owner, *_ in claims}) > 1, "the race had a single participant"


def test_tokens_strictly_increase_and_leases_never_overlap(
    ledger: tenure.Ledger, db_url: str
) -> None:
    """Short leases, nobody completes: jobs are reclaimed again and again; per job the tokens
    strictly increase and each claim starts only after the previous lease ended (DB clock)."""
    for i in range(40):
        ledger.submit("k", {"i": i}, max_attempts=1000)
    claims = run_race(db_url, "--lease", "0.25", "--run-for", "2.5")
    per_job: dict[str, list[tuple[int, float, float, str]]] = defaultdict(list)
    for owner, job_id, token, claimed_at, lease_until in claims:
        per_job[job_id].append((token, claimed_at, lease_until, owner))
    assert len(per_job) == 40
    assert max(len(c) for c in per_job.values()) >= 3, "too few reclaims to test anything"
    for job_id, job_claims in per_job.items():
        job_claims.sort()
        tokens = [c[0] for c in job_claims]
        assert all(a < b for a, b in itertools.pairwise(tokens)), job_id
        for before, after in itertools.pairwise(job_claims):
            assert after[1] >= before[2], f"{job_id}: lease {before} overlaps {after}"
        assert claimed_tokens(ledger, job_id) == tokens
