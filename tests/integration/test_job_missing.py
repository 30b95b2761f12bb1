"""A held job whose row vanishes (an asynchronous failover or a restore lost it) is a lost lease
with reason `job_missing`: that attempt stops and publishes nothing, and the `tenure worker`
process holding it goes on claiming. Real worker processes on both backends; the row is
deleted by SQL under them.

The job classes below are what the worker processes run (`tenure worker
tests.integration.test_job_missing:app`); they talk to the test through marker files in
$TENURE_TEST_DIR.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import tenure
from tenure import JobState
from tests.support.databases import direct
from tests.support.timing import FAST
from tests.support.waiting import poll
from tests.support.workers import LoggedWorker

pytestmark = pytest.mark.slow

DIR = Path(os.environ.get("TENURE_TEST_DIR", "."))
# Renewed only every 20 s: within a test, the write the handler makes meets the missing row
# before any renewal does.
SLOW_BEAT: dict[str, Any] = {"lease": 60.0, "heartbeat": 20.0, "missed": 1, "jitter": 10.0}

app = tenure.App()


def _announce_and_wait(ctx: tenure.JobContext) -> None:
    (DIR / f"running-{ctx.job_id}").touch()
    deadline = time.monotonic() + 60
    while not (DIR / f"go-{ctx.job_id}").exists() and not ctx.cancelled.is_set():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never said go")
        time.sleep(0.01)


@app.job("held", **FAST)
def held(ctx: tenure.JobContext, payload: Any) -> Any:
    """Works until told to stop; says why it was stopped."""
    _announce_and_wait(ctx)
    (DIR / f"reason-{ctx.job_id}").write_text(str(ctx.cancel_reason))
    return "stopped"


@app.job("stage_after", **SLOW_BEAT)
def stage_after(ctx: tenure.JobContext, payload: Any) -> Any:
    """Records a step once the test says go (its job is gone by then)."""
    _announce_and_wait(ctx)
    return ctx.step("after", lambda: 1)


@app.job("result_after", **SLOW_BEAT)
def result_after(ctx: tenure.JobContext, payload: Any) -> Any:
    """Returns its result once the test says go (its job is gone by then)."""
    _announce_and_wait(ctx)
    return {"published": True}


@app.job("raises_after", **SLOW_BEAT)
def raises_after(ctx: tenure.JobContext, payload: Any) -> Any:
    """Raises once the test says go (its job is gone by then): the attempt's fail finds no row."""
    _announce_and_wait(ctx)
    raise ValueError("a handler's own error")


@app.job("quick")
def quick(ctx: tenure.JobContext, payload: Any) -> Any:
    """The next job: a worker still claiming completes it."""
    return {"done": True}


def delete_job(url: str, job_id: str) -> None:
    """Delete the job's row by hand, with what depends on it (as a lost commit would)."""
    if url.startswith("sqlite:///"):
        lite = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None, timeout=30)
        try:
            lite.execute("PRAGMA foreign_keys = ON")
            lite.execute("DELETE FROM tenure_events WHERE job_id = ?", (job_id,))
            lite.execute("DELETE FROM tenure_jobs WHERE id = ?", (job_id,))
        finally:
            lite.close()
        return
    with psycopg.connect(direct(url), autocommit=True) as conn:
        conn.execute("DELETE FROM tenure_events WHERE job_id = %s", (job_id,))
        conn.execute("DELETE FROM tenure_jobs WHERE id = %s", (job_id,))


@pytest.fixture
def worker(db_url: str, tmp_path: Path) -> Iterator[LoggedWorker]:
    process = LoggedWorker("tests.integration.test_job_missing:app", db_url, tmp_path)
    yield process
    process.stop()


def lose_the_running_job(
    ledger: tenure.Ledger, db_url: str, folder: Path, kind: str
) -> tuple[str, str]:
    """Submit a job of `kind`, wait until the worker runs it, delete its row, say go; submit
    the next job. Returns both ids."""
    lost = ledger.submit(kind, {})
    poll((folder / f"running-{lost}").exists, 30, "the worker to run the job")
    delete_job(db_url, lost)
    (folder / f"go-{lost}").touch()
    return lost, ledger.submit("quick", {})


def assert_worker_went_on(
    ledger: tenure.Ledger, worker: LoggedWorker, lost: str, nxt: str
) -> dict[str, Any]:
    """The next job succeeded, the worker lived and stops cleanly; returns its last line."""
    job = poll(lambda: (j := ledger.get(nxt)).terminal and j, 30, "the next job to end")
    assert (job.state, job.result) == (JobState.SUCCEEDED, {"done": True})
    assert worker.proc.poll() is None, worker.log.read_text()[-3000:]
    with pytest.raises(tenure.JobNotFound):  # nothing brought the lost job back
        ledger.get(lost)
    assert worker.stop() == 0
    events = worker.events()
    assert not [e for e in events if e["event"] == "side_task_crashed"]
    # Not a handler's error: nothing about the lost job was treated as one.
    assert not [e for e in events if e["event"] == "handler_raised" and e.get("job") == lost]
    stopped = [e for e in events if e["event"] == "worker_stopped"]
    assert len(stopped) == 1
    return stopped[0]


def test_a_renewal_that_finds_the_job_gone_stops_that_attempt_only(
    ledger: tenure.Ledger, db_url: str, worker: LoggedWorker, tmp_path: Path
) -> None:
    """The lease keeper's renewal finds no row: the attempt is told to stop with reason
    job_missing (its ctx.cancel_reason), and the worker completes the next job."""
    lost = ledger.submit("held", {})
    poll((tmp_path / f"running-{lost}").exists, 30, "the worker to run the job")
    delete_job(db_url, lost)
    reason = poll(
        lambda: (tmp_path / f"reason-{lost}").exists() and (tmp_path / f"reason-{lost}"),
        30,
        "the attempt to be stopped",
    )
    assert reason.read_text() == "job_missing"
    nxt = ledger.submit("quick", {})
    assert_worker_went_on(ledger, worker, lost, nxt)
    stopped = [e for e in worker.events() if e["event"] == "job_cancelled_locally"]
    assert [(e["job"], e["reason"]) for e in stopped] == [(lost, "job_missing")]


def test_a_stage_write_that_finds_the_job_gone_stops_that_attempt_only(
    ledger: tenure.Ledger, db_url: str, worker: LoggedWorker, tmp_path: Path
) -> None:
    """The handler records a step after its row was deleted (before any renewal): a lost lease
    with reason job_missing, not an error that kills the worker; the next job completes."""
    lost, nxt = lose_the_running_job(ledger, db_url, tmp_path, "stage_after")
    assert_worker_went_on(ledger, worker, lost, nxt)
    stopped = [e for e in worker.events() if e["event"] == "job_cancelled_locally"]
    assert [(e["job"], e["reason"]) for e in stopped] == [(lost, "job_missing")]


def test_a_result_for_a_job_gone_is_rejected_and_the_worker_goes_on(
    ledger: tenure.Ledger, db_url: str, worker: LoggedWorker, tmp_path: Path
) -> None:
    """The handler returns after its row was deleted (before any renewal): the committer's
    publish finds no row, a rejected result (a lost lease, not a handler's error); the worker
    completes the next job."""
    lost, nxt = lose_the_running_job(ledger, db_url, tmp_path, "result_after")
    stopped = assert_worker_went_on(ledger, worker, lost, nxt)
    assert (stopped["results_rejected"], stopped["succeeded"]) == (1, 1)


def test_a_failed_attempt_of_a_job_gone_stops_that_attempt_only(
    ledger: tenure.Ledger, db_url: str, worker: LoggedWorker, tmp_path: Path
) -> None:
    """The handler raises after its row was deleted: writing the failed attempt finds no row,
    a lost lease with reason job_missing, not a dead worker; the next job completes."""
    lost, nxt = lose_the_running_job(ledger, db_url, tmp_path, "raises_after")
    job = poll(lambda: (j := ledger.get(nxt)).terminal and j, 30, "the next job to end")
    assert job.state is JobState.SUCCEEDED
    assert worker.proc.poll() is None, worker.log.read_text()[-3000:]
    assert worker.stop() == 0
    events = worker.events()
    assert not [e for e in events if e["event"] == "side_task_crashed"]
    stopped = [e for e in events if e["event"] == "job_cancelled_locally"]
    assert [(e["job"], e["reason"]) for e in stopped] == [(lost, "job_missing")]
