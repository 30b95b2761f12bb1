"""Do waiting jobs cost the claim path anything? 0 versus N jobs waiting (for a signal or a
timer an hour away), side by side on each backend.

    python bench/waiting.py [--postgres URL] [--waiting 1000] [--claims 300] [--idle 5]

Printed per backend and per case: the median and p95 of a claim that takes one queued job
(`ledger.claim`, one statement on PostgreSQL), the drain rate of 2,000 no-op jobs through one
`Worker` (concurrency 8), and, on PostgreSQL, the statements the server ran while an idle
worker sat for `--idle` seconds beside the waiting jobs (`pg_stat_database.xact_commit`, which
counts this database's transactions: a waiting job costs none; the worker's own idle polls
are the same in both cases).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any
from urllib.parse import quote

import tenure
from tenure.ledger import lease_port
from tenure.wait_state import WaitFor
from tenure.waits import WaitRequest


def park(ledger: tenure.Ledger, count: int) -> None:
    """`count` jobs suspended: half wait for a signal, half for a timer an hour away."""
    if not count:
        return
    ids = ledger.submit_many("parked", [{"n": n} for n in range(count)])
    leases = lease_port(ledger).claim_many(
        "parker", kinds=["parked"], limit=len(ids), lease_seconds=60
    )
    for n, lease in enumerate(leases):
        if n % 2:
            request = WaitRequest(0, "signal:go", WaitFor.SIGNAL, signals=("go",))
        else:
            request = WaitRequest(0, "sleep#1", WaitFor.TIMER, seconds=3600)
        assert lease_port(ledger).wait_on(lease, request).suspended


def claim_latency(ledger: tenure.Ledger, claims: int) -> list[float]:
    ledger.submit_many("work", [{"n": n} for n in range(claims)])
    times = []
    for _ in range(claims):
        started = time.perf_counter()
        lease = ledger.claim("bench", kinds=None, lease_seconds=60)
        times.append((time.perf_counter() - started) * 1000)
        assert lease is not None and lease.kind == "work"
        ledger.complete(lease, None)
    return times


def drain_rate(url: str, jobs: int) -> float:
    app = tenure.App(url)

    @app.job("noop")
    def noop(ctx: tenure.JobContext, payload: Any) -> None:
        return None

    ledger = app.ledger
    ledger.submit_many("noop", [{"n": n} for n in range(jobs)])
    started = time.perf_counter()
    with tenure.Worker(app, concurrency=8, poll_interval=0.05):
        while ledger.operations.counts(kind="noop")[tenure.JobState.SUCCEEDED] < jobs:
            time.sleep(0.01)
    rate = jobs / (time.perf_counter() - started)
    app.close()
    return rate


def idle_transactions(url: str, seconds: float) -> int | None:
    if not url.startswith("postgres"):
        return None
    import psycopg

    app = tenure.App(url)

    @app.job("idle")
    def idle(ctx: tenure.JobContext, payload: Any) -> None:
        return None

    def commits() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
            conn.execute("SELECT pg_stat_clear_snapshot()")
            assert row is not None
            return int(row[0])

    with tenure.Worker(app, concurrency=8, poll_interval=1.0):
        time.sleep(1.0)  # started, listening
        before = commits()
        time.sleep(seconds)
        after = commits()
    app.close()
    return after - before - 1  # the first reading's own transaction


def fresh(url: str | None, folder: str, name: str) -> str:
    if url is None:
        return f"sqlite:///{folder}/{name}.db"
    import psycopg

    schema = f"tenure_bench_{name}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    option = quote(f"-csearch_path={schema}", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={option}"


def run(backend: str, base: str | None, args: argparse.Namespace) -> None:
    print(f"\n{backend}")
    print(
        f"{'waiting jobs':>12}  {'claim p50 ms':>12}  {'claim p95 ms':>12}  "
        f"{'drain jobs/s':>12}  {'idle statements':>15}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for waiting in (0, args.waiting):
            url = fresh(base, folder, f"w{waiting}")
            with tenure.connect(url) as ledger:
                park(ledger, waiting)
                times = sorted(claim_latency(ledger, args.claims))
                counts = ledger.operations.counts()
            rate = drain_rate(url, 2000)
            idle = idle_transactions(url, args.idle)
            assert counts[tenure.JobState.WAITING] == waiting
            p95 = times[max(0, round(0.95 * len(times)) - 1)]
            shown = "-" if idle is None else str(idle)
            print(
                f"{waiting:>12}  {statistics.median(times):>12.3f}  {p95:>12.3f}  "
                f"{rate:>12.0f}  {shown:>15}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("TENURE_TEST_POSTGRES_URL"))
    parser.add_argument("--waiting", type=int, default=1000)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--idle", type=float, default=5.0)
    args = parser.parse_args()
    run("SQLite", None, args)
    if args.postgres:
        run("PostgreSQL", args.postgres, args)
    else:
        print("\nPostgreSQL skipped (pass --postgres URL)")


if __name__ == "__main__":
    main()
