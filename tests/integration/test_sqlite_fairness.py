"""Several worker processes on one SQLite file each get a share of the claims.

SQLite's busy handler sleeps and retries, so a process that commits and begins again at once
can keep the write lock while the others sleep (one starved in the raw loop of issue 7: 18,564
cycles against 12). tenure's writers take turns through a `flock` on a sidecar file."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import tenure
from tenure import JobState
from tenure.testing.process import spawn_worker, wait_started
from tests.support.waiting import poll

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

WORKERS = 3
JOBS = 1500


def test_worker_processes_share_one_sqlite_file_fairly(tmp_path: Path) -> None:
    """Worker processes on one SQLite file each take a fair share of the jobs."""
    url = f"sqlite:///{tmp_path / 'fair.db'}"
    ledger = tenure.connect(url)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for n in range(WORKERS):
            log = tmp_path / f"worker-{n}.log"
            proc = spawn_worker(
                "tests.support.apps:app",
                url,
                log,
                "--concurrency",
                "4",
                "--kinds",
                "tick",
                "--poll",
                "0.05",
                cwd=ROOT,
                env={"TENURE_TEST_DIR": str(tmp_path)},
            )
            procs.append(proc)
            wait_started(proc, log)
        ids = [i for _ in range(JOBS // 500) for i in ledger.submit_many("tick", [{}] * 500)]
        poll(
            lambda: (
                ledger.operations.counts(kind="tick").get(JobState.SUCCEEDED, 0) >= JOBS or None
            ),
            timeout=120,
            what="all jobs done",
        )
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)
    owners = Counter(ledger.get(job_id).owner_id for job_id in ids)
    ledger.close()
    shares = sorted(count / JOBS for count in owners.values())
    assert len(owners) == WORKERS, owners
    # A fair share is a third; a starved process gets next to nothing.
    # A fair share is a third each. Without the turns, runs here gave spreads of 0.19 and
    # 0.26 (e.g. 19% against 45%); with them, about 0.01.
    assert shares[-1] - shares[0] <= 0.12, shares
