"""Bytes written per job on PostgreSQL: table, index and WAL, on a table with history.

    python bench/write_bytes.py [--db postgresql://…/test] [--history 200000] [--jobs 5000]

Creates a fresh database beside the one named (`tenure_write_bytes`), fills it with --history
queued jobs of a kind no worker runs (the history an index grows with), takes a CHECKPOINT,
then submits --jobs no-op jobs one call each and runs them with one in-process worker of 16
slots. Prints, per job of that second part, the WAL written (`pg_current_wal_lsn()`, full-page
images included: the first change of a page after a checkpoint writes the whole page) and the
growth of each table and index of tenure's (`pg_relation_size`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

import tenure  # noqa: E402

DATABASE = "tenure_write_bytes"
SIZES = """
    SELECT c.relname, pg_relation_size(c.oid)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relname LIKE 'tenure_%%'
      AND c.relkind IN ('r', 'i')
"""


def sizes(conn: psycopg.Connection) -> dict[str, int]:
    return {str(name): int(size) for name, size in conn.execute(SIZES).fetchall()}


def wal(conn: psycopg.Connection) -> tuple[int, str]:
    """The WAL position: bytes since the start, and as PostgreSQL writes it (for pg_waldump)."""
    row = conn.execute(
        "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, pg_current_wal_lsn()::text"
    ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


def succeeded(conn: psycopg.Connection) -> int:
    row = conn.execute(
        "SELECT count(*) FROM tenure_jobs WHERE kind = 'noop' AND state = 'succeeded'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default="postgresql://root@127.0.0.1:5432/test")
    parser.add_argument("--history", type=int, default=200_000)
    parser.add_argument("--jobs", type=int, default=5000)
    args = parser.parse_args()
    with psycopg.connect(args.db, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    url = urlunsplit(urlsplit(args.db)._replace(path=f"/{DATABASE}"))

    app = tenure.App(url)

    @app.job("noop")
    def noop(ctx: tenure.JobContext, payload: object) -> dict[str, bool]:
        return {"ok": True}

    @app.job("history")
    def history(ctx: tenure.JobContext, payload: object) -> None:
        return None

    ledger = app.ledger
    for start in range(0, args.history, 1000):
        size = min(1000, args.history - start)
        ledger.submit_many("history", [{"i": start + i} for i in range(size)])
    print(f"history: {args.history} queued jobs of a kind no worker runs", flush=True)

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
        before, wal_before = sizes(conn), wal(conn)
        begun = time.monotonic()
        for i in range(args.jobs):
            ledger.submit("noop", {"i": i})
        worker = tenure.Worker(app, concurrency=16, kinds=["noop"])
        worker.start()
        try:
            deadline = time.monotonic() + 600
            while succeeded(conn) < args.jobs:
                if time.monotonic() > deadline:
                    raise TimeoutError("the jobs did not finish within 600 s")
                time.sleep(0.1)
        finally:
            worker.stop()
        seconds = time.monotonic() - begun
        after, wal_after = sizes(conn), wal(conn)
    app.close()

    per_job = args.jobs
    print(f"{args.jobs} jobs submitted one by one and run in {seconds:.1f} s")
    print(f"WAL per job: {(wal_after[0] - wal_before[0]) / per_job:,.0f} bytes")
    print(f"  (pg_waldump --stats=record --start {wal_before[1]} --end {wal_after[1]})")
    grown = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    total = sum(grown.values())
    print(f"tables and indexes per job: {total / per_job:,.0f} bytes")
    for name, size in sorted(grown.items(), key=lambda item: -item[1]):
        if size:
            print(f"  {name:<32} {size / per_job:8,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
