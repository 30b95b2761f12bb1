"""The seeds' ledger scenarios, with real worker processes, on both backends.

Chinese seed (002_…): a job resumed across two worker processes continues from step 1;
cancellation refuses the next claim; a cancelled token cannot commit; requeue lets a new token
finish. Kazakh seed (000_…): see test_ledger.test_stale_owner_cannot_write_after_reclaim.
"""

from __future__ import annotations

import pytest

import tenure
from tenure import JobState
from tests.support.processes import read_line, run_worker, worker

pytestmark = pytest.mark.slow


def test_job_resumes_from_step_one_in_a_second_process(ledger: tenure.Ledger, db_url: str) -> None:
    """Process 1 retrieves (step 1) and dies; process 2 continues from step 1 and answers."""
    job_id = ledger.submit("report", {"question": "q"}, idempotency_key="j1")
    code, first = run_worker("seed-step", db_url, "--owner", "P1", "--lease", "0.5")
    assert code == 0
    assert first[0] | {"token": 0} == {"claimed": True, "job_id": job_id, "token": 0, "step": 0}
    assert ledger.get(job_id).step == 1

    code, second = run_worker("seed-step", db_url, "--owner", "P2", "--lease", "30")
    assert code == 0
    assert second[0] | {"token": 0} == {"claimed": True, "job_id": job_id, "token": 0, "step": 1}
    assert second[0]["token"] > first[0]["token"] > 0
    job = ledger.get(job_id)
    assert (job.state, job.step) == (JobState.SUCCEEDED, 2)
    assert job.result == {
        "answer": "answer from persisted evidence",
        "evidence": "retrieved evidence",
    }
    claims = [(e.owner_id, e.token) for e in ledger.events(job_id) if e.type == "job_claimed"]
    assert claims == [("P1", first[0]["token"]), ("P2", second[0]["token"])]


def test_cancel_after_the_first_worker_refuses_the_next_claim(
    ledger: tenure.Ledger, db_url: str
) -> None:
    """The seed's exercise: cancel j1 after worker 1; the recovery worker may not claim it;
    the durable step stays 1 and no final result is published."""
    job_id = ledger.submit("report", {"question": "q"})
    code, _ = run_worker("seed-step", db_url, "--owner", "P1", "--lease", "0.3")
    assert code == 0
    ledger.cancel(job_id)
    code, lines = run_worker("seed-step", db_url, "--owner", "P2", "--wait", "1.0")
    assert (code, lines) == (3, [{"claimed": False}])
    job = ledger.get(job_id)
    assert (job.state, job.step, job.result) == (JobState.CANCELLED, 1, None)


def test_cancel_after_claim_fails_that_tokens_commit_and_requeue_recovers(
    ledger: tenure.Ledger, db_url: str
) -> None:
    """The seed's second exercise: cancel after a claim, the current token's commit fails with
    the result still empty; requeue, and a new claim with a higher token succeeds."""
    job_id = ledger.submit("report", {"question": "q"})
    holder = worker("hold-then-commit", db_url, "--owner", "P1")
    claimed = read_line(holder)
    assert claimed["claimed"] and claimed["job_id"] == job_id
    ledger.cancel(job_id)
    out, _ = holder.communicate("commit\n", timeout=30)
    assert holder.returncode == 4 and "lease_lost" in out
    job = ledger.get(job_id)
    assert (job.state, job.result) == (JobState.CANCELLED, None)

    ledger.requeue(job_id)
    newer = worker("hold-then-commit", db_url, "--owner", "P2")
    second = read_line(newer)
    assert second["token"] > claimed["token"]
    newer.communicate("commit\n", timeout=30)
    assert newer.returncode == 0
    job = ledger.get(job_id)
    assert job.state is JobState.SUCCEEDED
    assert job.result == {"by": "P2", "token": second["token"]}
    rejected = [e for e in ledger.events(job_id) if e.type == "result_rejected"]
    assert [(e.owner_id, e.token) for e in rejected] == [("P1", claimed["token"])]
