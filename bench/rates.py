"""Fleet-wide rate limits, measured with `tenure worker` processes.

    python bench/rates.py [--db URL] [--rate 50] [--seconds 20] [--free 4000] [--processes 4]

1. The achieved rate: a backlog of `limited` jobs (rate `--rate` per second) drained by
   `--processes` worker processes; the rate is counted from the jobs' `job_claimed` events
   (the database's clock), from the first claim to the last.
2. The claim path of a kind with no limit, in the same run: `--free` no-op jobs drained by
   the same number of processes that run `free` alone, first with nothing else running, then
   beside as many idle worker processes (what sharing the machine costs), then while the
   limited backlog is being drained beside them by other processes; and by processes that
   run both kinds (their claims take the serialised path of limited claims).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tenure

HERE = Path(__file__).resolve().parent


def workers(
    url: str, count: int, kinds: list[str], rate: int, logs: Path
) -> list[subprocess.Popen[bytes]]:
    procs = []
    for n in range(count):
        log = open(logs / f"{'-'.join(kinds)}-{n}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tenure.cli", "worker", "bench.rates_app:app", "--db", url,
                 "--concurrency", "8", "--poll", "0.2", "--kinds", *kinds],
                stdout=log, stderr=subprocess.STDOUT, cwd=HERE.parent,
                env={**os.environ, "BENCH_RATE": str(rate), "PYTHONPATH": str(HERE.parent)},
            )
        )  # fmt: skip
    return procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(30)


def drained(ledger: tenure.Ledger, kind: str, count: int, timeout: float) -> float:
    """Seconds until `count` jobs of `kind` succeeded (from now)."""
    begun = time.monotonic()
    while ledger.operations.counts(kind)[tenure.JobState.SUCCEEDED] < count:
        if time.monotonic() - begun > timeout:
            raise SystemExit(f"{kind}: not drained within {timeout:.0f} s")
        time.sleep(0.05)
    return time.monotonic() - begun


def achieved(ledger: tenure.Ledger, kind: str) -> tuple[float, float, int]:
    """Claims per second of `kind` by the database's clock: (rate, span, claims)."""
    jobs: list[tenure.Job] = []
    while page := ledger.list(kind=kind, limit=1000, after=jobs[-1].id if jobs else None):
        jobs.extend(page)
    times = sorted(
        event.at
        for job in jobs
        for event in ledger.events(job.id)
        if event.type is tenure.EventType.JOB_CLAIMED
    )
    span = (times[-1] - times[0]).total_seconds()
    return (len(times) - 1) / span, span, len(times)


def free_drain(url: str, args: argparse.Namespace, logs: Path, kinds: list[str]) -> float:
    with tenure.connect(url) as ledger:
        done = ledger.operations.counts("free")[tenure.JobState.SUCCEEDED]
        ledger.submit_many("free", [{}] * args.free)
        procs = workers(url, args.processes, kinds, args.rate, logs)
        try:
            seconds = drained(ledger, "free", done + args.free, 300)
        finally:
            stop(procs)
    return float(args.free / seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default=os.environ.get("TENURE_TEST_POSTGRES_URL"))
    parser.add_argument("--rate", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--free", type=int, default=4000)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="tenure-rates-"))
    url = args.db or f"sqlite:///{logs}/rates.db"
    with tenure.connect(url) as ledger:
        ledger.operations.purge(0, keep_keys=0)
    print(f"database {url.split('@')[-1]}, {args.processes} worker processes of 8 slots")

    alone = free_drain(url, args, logs, ["free"])
    with tenure.connect(url) as ledger:
        ledger.operations.purge(0, keep_keys=0)
    print(f"free kind alone:                      {alone:8.0f} jobs/s")

    # The same number of processes beside them with nothing to do: what sharing the machine
    # costs, apart from any claim of the limited kind.
    idle = workers(url, args.processes, ["limited"], args.rate, logs)
    try:
        beside_idle = free_drain(url, args, logs, ["free"])
    finally:
        stop(idle)
    with tenure.connect(url) as ledger:
        ledger.operations.purge(0, keep_keys=0)
    print(f"free kind beside idle workers:        {beside_idle:8.0f} jobs/s "
          f"({beside_idle / alone:.2f}x)")  # fmt: skip

    backlog = int(args.rate * args.seconds)
    with tenure.connect(url) as ledger:
        ledger.submit_many("limited", [{}] * backlog)
        limited = workers(url, args.processes, ["limited"], args.rate, logs)
        try:
            beside = free_drain(url, args, logs, ["free"])
            drained(ledger, "limited", backlog, args.seconds * 3 + 60)
        finally:
            stop(limited)
        rate, span, claims = achieved(ledger, "limited")
        ledger.operations.purge(0, keep_keys=0)
    print(f"free kind beside a limited backlog:   {beside:8.0f} jobs/s ({beside / alone:.2f}x)")
    print(
        f"limited kind: {claims} claims in {span:.1f} s = {rate:.2f}/s of {args.rate}/s "
        f"({100 * (rate / args.rate - 1):+.1f}%)"
    )
    mixed = free_drain(url, args, logs, ["free", "limited"])
    print(f"free kind, workers running both kinds: {mixed:7.0f} jobs/s ({mixed / alone:.2f}x)")


if __name__ == "__main__":
    main()
