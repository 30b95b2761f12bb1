"""A queue kept deep, side by side: jobs run per second and dead tuples left, with a clean
horizon and with a session idle in a transaction.

    python bench/deep_queue.py [--postgres URL] [--systems tenure pgqueuer awa]
        [--concurrency 16 64] [--depth 4000] [--phase 60] [--out bench/results]

For each system and each handler-slot count, on a fresh database: a producer process keeps
--depth no-op jobs queued ahead of what one worker process (the system's own runtime, in
process) has run; a phase of --phase seconds with a clean horizon, then one with a session
idle in a transaction. Per phase: jobs per second, and the dead tuples of the system's tables
(the sum over `pg_stat_user_tables`, read every second: the median, and the three tables with
the most at the end), and the fewest jobs seen queued ahead of the worker (a producer that
fell behind shows there). Without --postgres (or $TENURE_BENCH_POSTGRES_URL /
$TENURE_TEST_POSTGRES_URL) an embedded PostgreSQL is started.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run import SYSTEMS, database_for, describe, postgres_server, run_one  # noqa: E402

PEERS = ("tenure", "pgqueuer", "awa")
MOST_DEPTH = 1_000_000  # jobs kept queued (the producer fills it within a 120 s wait)
MOST_PHASE = 3600.0
MOST_SLOTS = 1024


def rows(report: dict[str, Any]) -> list[str]:
    """A markdown table: per system and slots, each phase's jobs/s and median dead tuples."""
    lines = [
        "| system | slots | clean: jobs/s | clean: dead tuples (median) "
        "| held: jobs/s | held: dead tuples (median / end) | held: most dead at the end "
        "| fewest queued ahead (clean / held) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in report["runs"]:
        figures = run["figures"]
        if "error" in figures:
            lines.append(f"| {run['system']} | {run['slots']} | {figures['error']} ||||||")
            continue
        clean, held = figures["clean"], figures["held"]
        top = ", ".join(f"{name} {dead:,}" for name, dead in held["dead_by_table_end"].items())
        lines.append(
            f"| {run['system']} | {run['slots']} | {clean['jobs_per_s']:,.0f} "
            f"| {clean['dead_tuples_median']:,} | {held['jobs_per_s']:,.0f} "
            f"| {held['dead_tuples_median']:,} / {held['dead_tuples_end']:,} | {top} "
            f"| {clean['fewest_queued_ahead']:,} / {held['fewest_queued_ahead']:,} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--postgres", help="server URL (a database on it is created per run)")
    parser.add_argument("--systems", nargs="*", default=list(PEERS), choices=PEERS)
    parser.add_argument("--concurrency", nargs="*", type=int, default=[16, 64])
    parser.add_argument("--depth", type=int, default=4000, help="jobs kept queued")
    parser.add_argument("--phase", type=float, default=60.0, help="seconds of each phase")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    if not (
        1 <= args.depth <= MOST_DEPTH
        and 2 <= args.phase <= MOST_PHASE
        and all(1 <= c <= MOST_SLOTS for c in args.concurrency)
    ):
        parser.error(
            f"--depth must be 1 to {MOST_DEPTH:,}, --phase 2 to {MOST_PHASE:g} seconds, "
            f"--concurrency 1 to {MOST_SLOTS}"
        )
    server, embedded = postgres_server(args.postgres)
    began = time.monotonic()
    report: dict[str, Any] = {
        "depth": args.depth,
        "phase_s": args.phase,
        "machine": describe(server),
        "runs": [],
    }
    folder = Path("/nonexistent")  # PostgreSQL systems only: no SQLite file is made
    try:
        for slots in args.concurrency:
            for system in SYSTEMS:
                if system.module not in args.systems or system.backend != "postgres":
                    continue
                arguments = {
                    "url": database_for(system, server, folder),
                    "concurrency": slots,
                    "depth": args.depth,
                    "phase": args.phase,
                }
                figures = run_one(system, "deep_queue", arguments, 2 * args.phase + 300)
                report["runs"].append({"system": system.label, "slots": slots, "figures": figures})
                print(
                    f"[{time.monotonic() - began:6.1f}s] {system.label:20} {slots:3} slots  "
                    f"{json.dumps(figures)}",
                    flush=True,
                )
    finally:
        if embedded is not None:
            embedded.cleanup()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "deep_queue.json").write_text(json.dumps(report, indent=2) + "\n")
    print()
    print("\n".join(rows(report)))
    failed = sum("error" in run["figures"] for run in report["runs"])
    print(f"\nwrote {args.out / 'deep_queue.json'} ({time.monotonic() - began:.0f}s)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
