"""Retention: `Ledger.purge` and `tenure purge` delete old terminal jobs with their events,
stages and effects, in bounded batches, while workers run, and keep keyed jobs for a window."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import JobState, StageKind
from tenure.ledger import lease_port
from tests.support.cli import tenure_cli
from tests.support.waiting import poll


def finished_with_history(ledger: tenure.Ledger, key: str | None = None) -> str:
    """A succeeded job with one step, one effect and their events."""
    job_id = ledger.submit("report", {"n": key}, idempotency_key=key)
    lease = ledger.claim("W", kinds=["report"], lease_seconds=30)
    assert lease is not None and lease.job_id == job_id
    lease_port(ledger).start_stage(lease, 0, "render", StageKind.STEP)
    lease_port(ledger).finish_stage(lease, 0, {"pages": 3})
    lease_port(ledger).start_stage(
        lease, 1, "email", StageKind.EFFECT, effect_key=f"tool-job:{job_id}:email"
    )
    lease_port(ledger).finish_stage(lease, 1, {"sent": True})
    ledger.complete(lease, {"ok": True})
    return job_id


def test_purge_deletes_old_terminal_jobs_and_what_belongs_to_them(ledger: tenure.Ledger) -> None:
    """Purge deletes old terminal jobs and their stages, effects, events; keyed, live ones stay."""
    done = [finished_with_history(ledger) for _ in range(3)]
    keyed = finished_with_history(ledger, key="invoice-7")
    cancelled = ledger.submit("report", {})
    ledger.cancel(cancelled)
    queued = ledger.submit("report", {"later": True})
    running = ledger.submit("other", {})
    assert ledger.claim("W", kinds=["other"], lease_seconds=30) is not None

    assert ledger.operations.purge(3600).jobs == 0  # nothing is an hour old yet
    events = sum(len(ledger.events(job_id)) for job_id in [*done, cancelled])
    stages = sum(len(ledger.stages(job_id)) for job_id in [*done, cancelled])
    report = ledger.operations.purge(0, batch_size=2)  # every terminal job counts as old
    assert (report.jobs, report.kept_for_keys) == (4, 1)
    assert (report.stages, report.effects, report.events) == (stages, 3, events)
    assert stages == 6 and events > 4 * 3
    assert report.batches >= 4
    for job_id in [*done, cancelled]:
        with pytest.raises(tenure.JobNotFound):
            ledger.get(job_id)
        assert ledger._store.events(job_id) == [] and ledger._store.stages(job_id) == []
    assert ledger.get(queued).state is JobState.QUEUED
    assert ledger.get(running).state is JobState.RUNNING
    # The key still finds its job (same id, its result) until the key window passes.
    assert ledger.submit("report", {"n": "invoice-7"}, idempotency_key="invoice-7") == keyed
    assert ledger.get(keyed).result == {"ok": True}
    report = ledger.operations.purge(0, keep_keys=0)
    assert (report.jobs, report.kept_for_keys) == (1, 0)
    assert {job.id for job in ledger.list()} == {queued, running}


def test_purge_while_workers_run_loses_nothing_that_is_not_terminal(db_url: str) -> None:
    """A worker runs 120 jobs while purges with age 0 and tiny batches run in a loop: every job
    ran exactly once and succeeded; what was purged had finished; the rest are all here."""
    app = tenure.App(db_url)
    runs: Counter[str] = Counter()
    finished: set[str] = set()

    @app.job("slowish")
    def slowish(ctx: tenure.JobContext, payload: Any) -> str:
        runs[ctx.job_id] += 1
        time.sleep(0.002 * (payload["n"] % 5))
        return ctx.job_id

    ids = app.ledger.submit_many("slowish", [{"n": n} for n in range(120)])
    stop = threading.Event()
    purged = Counter[str]()

    def purge_loop() -> None:
        with tenure.connect(db_url) as purger:
            while not stop.is_set():
                report = purger.operations.purge(0, batch_size=7)
                purged["jobs"] += report.jobs

    purger = threading.Thread(target=purge_loop)
    purger.start()
    try:
        with tenure.Worker(app, concurrency=6) as worker:
            poll(lambda: worker.stats.get("succeeded", 0) >= 120 or None, timeout=60)
            assert worker.stats.get("succeeded", 0) == 120
    finally:
        stop.set()
        purger.join()
    for job in app.ledger.list(limit=1000):
        finished.add(job.id)
        assert job.state is JobState.SUCCEEDED
    assert set(runs) == set(ids) and set(runs.values()) == {1}
    assert purged["jobs"] + len(finished) == 120
    app.close()


def test_tenure_purge_command(db_url: str) -> None:
    """`tenure purge --older-than` prints what it deleted as JSON, and keeps what is younger."""
    with tenure.connect(db_url) as ledger:
        finished_with_history(ledger)
        ledger.submit("report", {})

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return tenure_cli("purge", *args, "--db", db_url)

    kept = run("--older-than", "30d", "--json")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["jobs"] == 0
    # A bare number has no unit; an age under a minute needs --yes: both delete nothing.
    bare = run("--older-than", "30")
    assert bare.returncode == 2 and "needs its unit" in bare.stderr
    unconfirmed = run("--older-than", "0s")
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    preview = run("--older-than", "0s", "--dry-run", "--json")
    assert preview.returncode == 0, preview.stderr
    assert json.loads(preview.stdout) | {"batches": 0} == {
        "dry_run": True,
        "jobs": 1,
        "stages": 0,
        "effects": 0,
        "events": 0,
        "kept_for_keys": 0,
        "retrievals": 0,
        "batches": 0,
    }
    assert "would purge 1 jobs" in run("--older-than", "0s", "--dry-run").stdout
    with tenure.connect(db_url) as ledger:
        assert len(ledger.list()) == 2, "a refused or dry run deleted something"
    done = run("--older-than", "0s", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert (figures["jobs"], figures["stages"], figures["effects"]) == (1, 2, 1)
    plain = run("--older-than", "0s", "--yes")
    assert plain.returncode == 0 and "purged 0 jobs" in plain.stdout
    for bad in ("soon", "-1d", "30x"):
        result = run("--older-than", bad)
        assert result.returncode == 2 and "age" in result.stderr
    with tenure.connect(db_url) as ledger:
        assert [job.state for job in ledger.list()] == [JobState.QUEUED]


def test_bad_purge_arguments_change_nothing(ledger: tenure.Ledger) -> None:
    """Negative, infinite or non-numeric ages and batch sizes are refused; nothing is deleted."""
    finished_with_history(ledger)
    calls: list[Callable[[], Any]] = [
        lambda: ledger.operations.purge(-1),
        lambda: ledger.operations.purge(True),
        lambda: ledger.operations.purge("30d"),  # type: ignore[arg-type]
        lambda: ledger.operations.purge(float("inf")),
        lambda: ledger.operations.purge(0, keep_keys=-5),
        lambda: ledger.operations.purge(0, batch_size=0),
    ]
    for call in calls:
        with pytest.raises(tenure.InvalidArgument):
            call()
    assert len(ledger.list()) == 1
