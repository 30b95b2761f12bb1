"""How many renewals are HOT updates, at a given fillfactor and renewal batch.

    python bench/hot_renewals.py [--db postgresql://…] [--fillfactor 70] [--leases 500]
        [--rounds 10] [--batch 32]

On a fresh schema of the server (the machine's test database by default): --leases held jobs
between as many other jobs on each side, claimed, then renewed --rounds times in batches of
--batch (one statement each, as a worker renews its own leases). Prints the share of renewals
that PostgreSQL counted as HOT (`pg_stat_user_tables.n_tup_hot_upd`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

import tenure  # noqa: E402
from tenure.ledger import lease_port  # noqa: E402


def updates(url: str, schema: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE schemaname = %s AND relname = 'tenure_jobs'",
            (schema,),
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def reported(url: str, schema: str, count: int, timeout: float = 30.0) -> tuple[int, int]:
    """Poll until `count` updates are reported (each backend reports when idle a second)."""
    deadline = time.monotonic() + timeout
    seen = updates(url, schema)
    while seen[0] < count and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = updates(url, schema)
    return seen


def measure(url: str, args: argparse.Namespace) -> float:
    schema = "hot_" + uuid.uuid4().hex[:8]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    option = quote(f"-csearch_path={schema}", safe="")
    scoped = f"{url}{'&' if '?' in url else '?'}options={option}"
    try:
        with tenure.connect(scoped) as ledger:
            with psycopg.connect(scoped, autocommit=True) as conn:
                conn.execute(f"ALTER TABLE tenure_jobs SET (fillfactor = {args.fillfactor})")
            payloads = [{"text": "x" * 100}] * args.leases
            ledger.submit_many("other", payloads)
            ledger.submit_many("held", payloads)
            ledger.submit_many("other", payloads)
            port = lease_port(ledger)
            leases = port.claim_many("holder", kinds=["held"], limit=args.leases, lease_seconds=60)
            base = reported(url, schema, len(leases))
            for _ in range(args.rounds):
                for start in range(0, len(leases), args.batch):
                    port.extend_many(leases[start : start + args.batch], 60)
            renewals: int = args.rounds * len(leases)
            last = reported(url, schema, base[0] + renewals)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return float(last[1] - base[1]) / renewals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db",
        default=os.environ.get("TENURE_BENCH_POSTGRES_URL")
        or os.environ.get("TENURE_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test"),
    )
    parser.add_argument("--fillfactor", type=int, nargs="+", default=[100, 90, 80, 70, 50])
    parser.add_argument("--leases", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 500])
    args = parser.parse_args()
    if any(not 10 <= f <= 100 for f in args.fillfactor):
        parser.error("--fillfactor must be between 10 and 100")
    if min(args.leases, args.rounds, *args.batch) < 1:
        parser.error("--leases, --rounds and --batch must be positive")
    print(f"{'fillfactor':>10} {'batch':>6} {'HOT share of renewals':>22}")
    fillfactors, batches = args.fillfactor, args.batch
    for fillfactor in fillfactors:
        for batch in batches:
            args.fillfactor, args.batch = fillfactor, batch
            print(f"{fillfactor:>10} {batch:>6} {measure(args.db, args):>22.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
