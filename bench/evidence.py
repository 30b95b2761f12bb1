"""What `ctx.retrieve` costs beside the search itself: a cache miss (permissions, the cache
lookup, the search, the cache write, the recheck, the evidence rows, the event) and a hit
(no search, no cache write), timed inside one running job, on SQLite and PostgreSQL.

    python bench/evidence.py [--postgres postgresql://…] [--calls 200] [--refs 3]

The retriever's own functions are in-memory (a dict search, a set recheck), so the figures
are tenure's part. Prints a table and writes bench/results/evidence.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tenure  # noqa: E402
from bench.service import percentile  # noqa: E402
from tenure import Allowed, DocumentRef  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "evidence.json"


def evidence_app(url: str, calls: int, refs: int) -> tenure.App:
    app = tenure.App(url)
    documents = [
        DocumentRef(f"kb://doc-{n}", "v1", hashlib.sha256(str(n).encode()).hexdigest())
        for n in range(refs)
    ]

    @app.retriever("kb", index_version=lambda: "ix-1")
    def search(query: str, *, allowed: Any, limit: int) -> list[DocumentRef]:
        return documents[:limit]

    @search.permissions
    def permissions(principal: str | None, tenant: str) -> Allowed:
        return Allowed(["all"], f"{principal}@1")

    @search.recheck
    def recheck(principal: str | None, found: list[DocumentRef]) -> list[DocumentRef]:
        return found

    @app.job("timed", lease=60, heartbeat=10, jitter=5)
    def timed(ctx: tenure.JobContext, payload: Any) -> dict[str, list[float]]:
        times: dict[str, list[float]] = {"miss": [], "hit": []}
        for n in range(calls):  # a new query each time: every call searches and caches
            started = time.perf_counter()
            ctx.retrieve("kb", f"question {n}", limit=refs)
            times["miss"].append((time.perf_counter() - started) * 1000)
        for _ in range(calls):  # the first query again: every call is a cache hit
            started = time.perf_counter()
            ctx.retrieve("kb", "question 0", limit=refs)
            times["hit"].append((time.perf_counter() - started) * 1000)
        return times

    return app


def measure(url: str, calls: int, refs: int) -> dict[str, dict[str, float]]:
    app = evidence_app(url, calls, refs)
    try:
        job_id = app.submit("timed", {}, principal="user:bench")
        with tenure.Worker(app, concurrency=1, poll_interval=0.05):
            job = app.ledger.wait(job_id, 600)
        assert job.state is tenure.JobState.SUCCEEDED, job.error
        return {
            outcome: {"p50_ms": percentile(times, 0.5), "p95_ms": percentile(times, 0.95)}
            for outcome, times in job.result.items()
        }
    finally:
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", help="a PostgreSQL URL (a schema of its own is best)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--refs", type=int, default=3, help="refs each retrieval returns")
    args = parser.parse_args()
    results: dict[str, Any] = {"calls": args.calls, "refs": args.refs, "backends": {}}
    with tempfile.TemporaryDirectory() as folder:
        targets = {"SQLite": f"sqlite:///{folder}/evidence.db"}
        if args.postgres:
            targets["PostgreSQL"] = args.postgres
        for name, url in targets.items():
            results["backends"][name] = measure(url, args.calls, args.refs)
    print(f"ctx.retrieve, {args.refs} refs each, {args.calls} calls (p50 / p95 ms)")
    print(f"{'':12} {'miss':>16} {'hit':>16}")
    for name, figures in results["backends"].items():
        cells = [
            f"{figures[o]['p50_ms']:.2f} / {figures[o]['p95_ms']:.2f}" for o in ("miss", "hit")
        ]
        print(f"{name:12} {cells[0]:>16} {cells[1]:>16}")
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
