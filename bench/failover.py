"""Time from a worker's death (SIGKILL) to another worker resuming its job.

    python bench/failover.py [--db URL] [--classes short_class default_class]

For each class: worker A (a `tenure worker` process) claims the job and works; standby worker B
idles; A is killed with SIGKILL; the figure is B's claim time minus the kill time, both read
from the database's clock, and the time until B's handler starts. The default class (lease 90 s)
takes about a minute and a half.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tenure
from tenure.testing.process import spawn_worker, wait_started

ROOT = Path(__file__).resolve().parents[1]


def start(url: str, folder: Path, name: str, kind: str) -> subprocess.Popen[bytes]:
    log = folder / f"{name}.log"
    proc = spawn_worker(
        "bench.failover_app:app",
        url,
        log,
        "--concurrency",
        "1",
        "--kinds",
        kind,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "TENURE_BENCH_DIR": str(folder)},
    )
    wait_started(proc, log)
    return proc


def measure(url: str, kind: str) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp())
    with tenure.connect(url) as ledger:
        job_id = ledger.submit(kind, {})
        a = start(url, folder, "A", kind)
        while not (folder / f"started-{a.pid}").exists():
            time.sleep(0.01)
        b = start(url, folder, "B", kind)
        killed_at = ledger.now()
        killed_mono = time.monotonic()
        a.send_signal(signal.SIGKILL)
        a.wait()
        while not (folder / f"started-{b.pid}").exists():
            time.sleep(0.01)
        resumed = time.monotonic() - killed_mono
        claims = [e for e in ledger.events(job_id) if e.type == "job_claimed"]
        ledger.cancel(job_id)  # so that stopping B does not hand the job to the next run
        b.send_signal(signal.SIGTERM)
        b.wait(60)
        job_class = __import__("bench.failover_app", fromlist=["app"]).app.job_classes[kind]
        claimed = (claims[-1].at - killed_at).total_seconds()
    return {
        "lease_s": job_class.lease,
        "heartbeat_s": job_class.heartbeat,
        "kill_to_claim_s": round(claimed, 3),
        "kill_to_handler_s": round(resumed, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default=None)
    parser.add_argument("--classes", nargs="*", default=["short_class", "default_class"])
    args = parser.parse_args()
    url = args.db or f"sqlite:///{tempfile.mkdtemp()}/failover.db"
    sys.path.insert(0, str(ROOT))
    print(f"database: {url.rsplit('@', maxsplit=1)[-1]}")
    for kind in args.classes:
        figures = measure(url, kind)
        print(
            f"{kind:14} lease {figures['lease_s']:>5g}s heartbeat {figures['heartbeat_s']:>5g}s"
            f"  SIGKILL -> claim by B {figures['kill_to_claim_s']:8.3f}s"
            f"   -> B's handler running {figures['kill_to_handler_s']:8.3f}s"
        )


if __name__ == "__main__":
    main()
