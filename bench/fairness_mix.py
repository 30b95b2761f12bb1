"""The effect of a tenant limit on a mixed workload.

    python bench/fairness_mix.py [--db URL] [--big 600] [--small 40] [--concurrency 8]

Tenant `big` submits a backlog of jobs that take 20 ms each; a moment later tenant `small`
submits a few. One worker runs them. Printed: how long `small`'s jobs waited to start (from
their submit), and how long the whole mix took, without a limit and with `big` limited to
half the worker's slots.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from typing import Any

import tenure


def run(url: str, big: int, small: int, concurrency: int, limit: int | None) -> dict[str, Any]:
    app = tenure.App(url)
    started: dict[str, float] = {}
    lock = threading.Lock()

    @app.job("work")
    def work(ctx: tenure.JobContext, payload: Any) -> None:
        with lock:
            started[ctx.job_id] = time.monotonic()
        time.sleep(0.02)

    ledger = app.ledger
    ledger.operations.set_tenant_limit("big", limit)
    ledger.submit_many("work", [{}] * big, tenant="big")
    begun = time.monotonic()
    with tenure.Worker(app, concurrency=concurrency) as worker:
        time.sleep(0.2)
        sent = time.monotonic()
        ids = ledger.submit_many("work", [{}] * small, tenant="small")
        while worker.stats.get("succeeded", 0) < big + small:
            time.sleep(0.01)
        total = time.monotonic() - begun
    waits = sorted(started[i] - sent for i in ids)
    app.close()
    return {
        "small_wait_p50_s": round(statistics.median(waits), 3),
        "small_wait_max_s": round(waits[-1], 3),
        "all_done_s": round(total, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db")
    parser.add_argument("--big", type=int, default=600)
    parser.add_argument("--small", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    for limit in (None, args.concurrency // 2):
        url = args.db or f"sqlite:///{tempfile.mkdtemp()}/mix.db"
        if args.db:
            with tenure.connect(url) as ledger:  # a clean slate for each run
                ledger.operations.purge(0, keep_keys=0)
                ledger.operations.set_tenant_limit("big", None)
        figures = run(url, args.big, args.small, args.concurrency, limit)
        label = "no limit" if limit is None else f"big limited to {limit}"
        print(
            f"{label:22} small's wait to start: p50 {figures['small_wait_p50_s']:.3f} s, "
            f"max {figures['small_wait_max_s']:.3f} s; all {args.big + args.small} jobs done "
            f"in {figures['all_done_s']:.2f} s"
        )


if __name__ == "__main__":
    main()
