"""What idle long-polls cost `tenure serve` on PostgreSQL: the database's transactions per
second and the submit latency beside them, with 0 and with N waiting requests.

    python bench/long_polls.py [--db postgresql://…] [--waiters 1000] [--submits 400]

Each waiter is `GET /v1/jobs/{id}?wait=120` on a job nobody runs, held open while the figures
are taken. Transactions are `pg_stat_database.xact_commit + xact_rollback` of the database
over a quiet window (`--window` seconds). Prints a table and writes bench/results/long_polls.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

import tenure  # noqa: E402
from bench.service import free_port, percentile  # noqa: E402
from bench.systems.common import transactions  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "long_polls.json"


async def submit_latencies(base: str, key: str, count: int) -> list[float]:
    """Milliseconds of `count` submits, one after another."""
    times = []
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}) as c:
        for n in range(count):
            started = time.perf_counter()
            reply = await c.post("/v1/jobs", json={"kind": "submitted", "payload": {"n": n}})
            times.append((time.perf_counter() - started) * 1000)
            assert reply.status_code in (200, 201, 202), reply.text
    return times


async def quiet_rate(url: str, window: float) -> float:
    """The database's transactions per second over `window` seconds."""
    before = transactions(url)
    await asyncio.sleep(window)
    return (transactions(url) - before - 1) / window


async def measure(args: argparse.Namespace, base: str, key: str, jobs: list[str]) -> dict[str, Any]:
    figures: dict[str, dict[str, float]] = {}
    for waiters in (0, args.waiters):
        async with httpx.AsyncClient(
            base_url=base,
            headers={"Authorization": f"Bearer {key}"},
            limits=httpx.Limits(max_connections=waiters + 10),
            timeout=120,
        ) as client:
            held = [
                asyncio.create_task(client.get(f"/v1/jobs/{job}", params={"wait": 120}))
                for job in jobs[:waiters]
            ]
            # The requests reach the server, and the counts of their first reads are flushed
            # (an idle backend reports its counts within about ten seconds).
            await asyncio.sleep(25 + waiters / 200)
            rate = await quiet_rate(args.db, args.window)
            latencies = await submit_latencies(base, key, args.submits)
            still = sum(not task.done() for task in held)
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)
        figures[str(waiters)] = {
            "waiters_open": still,
            "transactions_per_s": round(rate, 2),
            "submit_p50_ms": round(statistics.median(latencies), 2),
            "submit_p99_ms": round(percentile(latencies, 0.99), 2),
        }
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=os.environ.get("TENURE_BENCH_POSTGRES_URL"))
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--submits", type=int, default=400)
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args()
    if not args.db:
        parser.error("--db postgresql://… is needed (or $TENURE_BENCH_POSTGRES_URL)")
    schema = "bench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(args.db, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = f"{args.db}{'&' if '?' in args.db else '?'}options=-csearch_path%3D{schema}"
    port = free_port()
    log_path = Path(tempfile.mkdtemp(prefix="tenure-serve-")) / "serve.log"
    try:
        with tenure.connect(url) as ledger:
            key = ledger.operations.create_tenant("bench")
            jobs = ledger.submit_many("held", [{}] * args.waiters, tenant="bench")
        command = [
            *(sys.executable, "-m", "tenure.cli", "serve", "--db", url, "--port", str(port)),
            *("--max-wait", "120", "--max-waits-per-tenant", str(args.waiters + 10)),
            *("--log-level", "warning"),
        ]
        with log_path.open("wb") as log:
            serve = subprocess.Popen(command, stdout=log, stderr=log)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        try:
            figures = asyncio.run(measure(args, base, key, jobs))
        finally:
            serve.terminate()
            serve.wait(30)
    finally:
        with psycopg.connect(args.db, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    print(f"{'waiters':>8} {'open':>6} {'tx/s':>8} {'submit p50 ms':>14} {'submit p99 ms':>14}")
    for waiters, row in figures.items():
        print(
            f"{waiters:>8} {row['waiters_open']:>6} {row['transactions_per_s']:>8} "
            f"{row['submit_p50_ms']:>14} {row['submit_p99_ms']:>14}"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"figures": figures, "args": vars(args)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
