"""How long an operator's cancel takes to reach a running handler (`ctx.cancelled`).

    python bench/cancel_latency.py [--postgres URL] [--rounds 30]

One worker (heartbeat 10 s, so a renewal never delivers it during a round) runs a handler that
waits on `ctx.cancelled`; another ledger in the same process cancels the job. PostgreSQL: the
cancel's NOTIFY reaches the worker's listening connection; SQLite: the cancel is announced to
the workers of the same process on the same file (across processes it arrives with the next
renewal, within one heartbeat). Printed: p50, p95 and max from calling `cancel()` (its own
statement included) to the handler waking, per backend.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from typing import Any
from urllib.parse import quote

import tenure


def measure(url: str, rounds: int) -> list[float]:
    """Milliseconds from each cancel to its handler's wake-up."""
    app = tenure.App(url)
    started = threading.Event()
    woke: dict[str, float] = {}

    @app.job("watch", lease=30, heartbeat=10, missed=1, jitter=5)
    def watch(ctx: tenure.JobContext, payload: Any) -> None:
        started.set()
        ctx.cancelled.wait(30)
        woke[ctx.job_id] = time.monotonic()

    delays: list[float] = []
    with tenure.Worker(app, concurrency=1), tenure.connect(url) as operator:
        for _ in range(rounds):
            started.clear()
            job_id = app.submit("watch", {})
            if not started.wait(30):
                raise SystemExit("the worker did not start the job")
            sent = time.monotonic()
            operator.cancel(job_id)
            deadline = sent + 30
            while job_id not in woke and time.monotonic() < deadline:
                time.sleep(0.0002)
            if job_id not in woke:
                raise SystemExit("the handler never saw the cancel")
            delays.append((woke[job_id] - sent) * 1000)
    app.close()
    return delays


def own_schema(url: str) -> str:
    """The URL with a fresh schema of its own (dropped and created): nothing else is touched."""
    import psycopg

    schema = "tenure_bench_cancel"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    option = quote(f"-csearch_path={schema}", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={option}"


def report(name: str, delays: list[float]) -> None:
    ordered = sorted(delays)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    print(
        f"{name:<12} rounds {len(delays):>3}  p50 {statistics.median(delays):7.2f} ms  "
        f"p95 {p95:7.2f} ms  max {ordered[-1]:7.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("TENURE_TEST_POSTGRES_URL"))
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        report("SQLite", measure(f"sqlite:///{folder}/cancel.db", args.rounds))
    if args.postgres:
        report("PostgreSQL", measure(own_schema(args.postgres), args.rounds))
    else:
        print("PostgreSQL   skipped (pass --postgres URL)")


if __name__ == "__main__":
    main()
