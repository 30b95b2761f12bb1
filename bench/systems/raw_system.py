"""The ceiling without a job system: SQL-only claim+complete loops on the same databases.

PostgreSQL: pgbench, 4 clients, each cycle claims 10 rows (FOR UPDATE SKIP LOCKED) and
completes them, two autocommit statements. SQLite: one process, one job per cycle, each of
claim and complete its own BEGIN IMMEDIATE transaction, WAL with synchronous=FULL (tenure's
setting) and NORMAL.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

SCRIPT = """\
WITH c AS (SELECT id FROM raw_jobs WHERE state = 'q' ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED)
UPDATE raw_jobs j SET state = 'r', owner = :client_id FROM c WHERE j.id = c.id;
UPDATE raw_jobs SET state = 'd' WHERE owner = :client_id AND state = 'r';
"""


def sql_limit(url: str, seconds: float, **_: Any) -> dict[str, Any]:
    if url.startswith("postgres"):
        return _postgres(url, seconds)
    return _sqlite(url.removeprefix("sqlite:///"), seconds)


def _postgres(url: str, seconds: float) -> dict[str, Any]:
    pgbench = shutil.which("pgbench")
    if pgbench is None:
        return {"unsupported": "pgbench is not installed"}
    rows = int(seconds * 40_000) + 100_000
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS raw_jobs")
        conn.execute(
            "CREATE TABLE raw_jobs (id bigserial PRIMARY KEY, state text NOT NULL DEFAULT 'q', "
            "owner int)"
        )
        conn.execute("CREATE INDEX raw_jobs_queued ON raw_jobs (id) WHERE state = 'q'")
        conn.execute("CREATE INDEX raw_jobs_taken ON raw_jobs (owner) WHERE state = 'r'")
        conn.execute("INSERT INTO raw_jobs (state) SELECT 'q' FROM generate_series(1, %s)", (rows,))
        conn.execute("ANALYZE raw_jobs")
    script = Path(tempfile.mkdtemp()) / "cycle.sql"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [pgbench, "-n", "-c", "4", "-j", "2", "-T", str(int(seconds)), "-f", str(script), url],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=True,
    )
    match = re.search(r"tps = ([0-9.]+)", done.stdout)
    if match is None:
        raise RuntimeError(done.stdout + done.stderr)
    cycles = float(match.group(1))
    return {"jobs_per_s": round(cycles * 10, 1), "cycles_per_s": round(cycles, 1), "clients": 4}


def _sqlite(path: str, seconds: float) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for synchronous in ("FULL", "NORMAL"):
        file = f"{path}.{synchronous.lower()}"
        conn = sqlite3.connect(file, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE raw_jobs (id INTEGER PRIMARY KEY, state TEXT NOT NULL)")
        conn.execute("CREATE INDEX raw_jobs_queued ON raw_jobs (id) WHERE state = 'q'")
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO raw_jobs (state) VALUES ('q')", [()] * 200_000)
        conn.execute("COMMIT")
        cycles = 0
        deadline = time.perf_counter() + seconds / 2
        begun = time.perf_counter()
        while time.perf_counter() < deadline:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "UPDATE raw_jobs SET state = 'r' WHERE id = "
                "(SELECT id FROM raw_jobs WHERE state = 'q' ORDER BY id LIMIT 1) RETURNING id"
            ).fetchone()
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE raw_jobs SET state = 'd' WHERE id = ?", (row[0],))
            conn.execute("COMMIT")
            cycles += 1
        figures[f"cycles_per_s_{synchronous.lower()}"] = round(
            cycles / (time.perf_counter() - begun), 1
        )
        conn.close()
    figures["jobs_per_s"] = figures["cycles_per_s_full"]
    return figures
