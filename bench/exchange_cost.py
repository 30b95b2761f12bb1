"""The database's cost of tenure's complete-and-claim statement, without a worker around it.

    python bench/exchange_cost.py --postgres postgresql://user@host/db [--batch 16] [--jobs 20000]
        [--sql "ALTER TABLE ..."]

One client claims `--batch` jobs, then loops `Ledger.complete_and_claim` (the committer's
statement: publish the batch, claim the next) until the queue is empty, on a fresh database
(`bench_exchange`). Prints jobs per second and the CPU per job of the PostgreSQL server
processes on this machine and of this client. `--sql` runs statements after the enqueue (for
example to measure an index or a constraint by dropping it). Issue 20 measured the events'
foreign key this way: 130 and 125 µs of server CPU per job with it, 113 and 108 without.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

import tenure  # noqa: E402
from bench.systems.common import (  # noqa: E402
    cpu_seconds,
    fresh_database,
    server_cpu,
    server_cpu_since,
)
from tenure.ledger import lease_port  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", required=True, help="server URL")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--sql", action="append", default=[], help="run after the enqueue")
    args = parser.parse_args()
    url = fresh_database(args.postgres, "bench_exchange")
    with tenure.connect(url) as ledger:
        for start in range(0, args.jobs, 500):
            ledger.submit_many("noop", [{}] * min(500, args.jobs - start))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")
        for statement in args.sql:
            conn.execute(statement)
    with tenure.connect(url) as ledger:
        leases = lease_port(ledger).claim_many(
            "bench", limit=args.batch, kinds=["noop"], lease_seconds=60
        )
        server_before, client_before = server_cpu(), cpu_seconds(os.getpid())
        began, done, statements = time.perf_counter(), 0, 0
        while leases:
            _, next_leases = lease_port(ledger).complete_and_claim(
                [(lease, None) for lease in leases],
                "bench",
                limit=args.batch,
                kinds=["noop"],
                lease_seconds=60,
            )
            done, statements, leases = done + len(leases), statements + 1, next_leases
        elapsed = time.perf_counter() - began
        server = server_cpu_since(server_before)
        client = cpu_seconds(os.getpid()) - client_before
    print(
        f"batch {args.batch}: {done} jobs in {statements} statements, {done / elapsed:,.0f} "
        f"jobs/s; server CPU {server / done * 1e6:.0f} µs/job, "
        f"client CPU {client / done * 1e6:.0f} µs/job"
    )


if __name__ == "__main__":
    main()
