"""What drawing a job's life costs: reading and building the timeline of a job with many stages
and claims (`tenure.timeline.read_timeline`), its JSON size, and the statements it takes.

    python bench/timeline.py [--db URL] [--stages 10,100,1000] [--claims 3]

Each job is driven by hand through the lease protocol (a worker's writes): `claims` leases,
each expiring after a share of the stages, so the timeline has that many lanes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import tenure
from tenure.ledger import lease_port
from tenure.timeline import read_timeline
from tenure.types import StageKind


def _job(ledger: tenure.Ledger, stages: int, claims: int) -> str:
    kind = f"bench_timeline_{uuid.uuid4().hex[:8]}"  # this job alone, in a shared database
    job_id = ledger.submit(kind, {}, max_attempts=claims + 1)
    per_claim = max(1, stages // claims)
    position = 0
    for claim in range(claims):
        lease = ledger.claim(f"w{claim}", kinds=[kind], lease_seconds=600)
        assert lease is not None
        for _ in range(per_claim if claim < claims - 1 else stages - position):
            lease_port(ledger).start_stage(lease, position, f"s{position}", StageKind.STEP)
            lease_port(ledger).finish_stage(lease, position, position)
            position += 1
        if claim == claims - 1:
            ledger.complete(lease, None)
        else:  # the holder goes silent: its lease runs out, the next claim takes the job
            until = ledger.extend(lease, 0.05)
            while ledger.now() <= until:
                time.sleep(0.005)
    return job_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="database URL (default: a new SQLite file)")
    parser.add_argument("--stages", default="10,100,1000")
    parser.add_argument("--claims", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tenure-bench-timeline-"))
    url = args.db or f"sqlite:///{folder / 'bench.db'}"
    print(f"database {url.rsplit('@', maxsplit=1)[-1]}; {args.claims} claims per job")
    print(
        f"{'stages':>7} {'events':>7} {'lanes':>5} {'read+build p50':>15} {'p95':>9} {'JSON':>10}"
    )
    with tenure.connect(url) as ledger:
        for stages in (int(n) for n in args.stages.split(",")):
            job_id = _job(ledger, stages, args.claims)
            took = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                timeline = read_timeline(ledger, job_id)
                drawn = json.dumps(timeline.to_dict())
                took.append((time.perf_counter() - started) * 1000)
            took.sort()
            p95 = took[min(len(took) - 1, int(len(took) * 0.95))]
            events = len(ledger.events(job_id))
            print(
                f"{stages:>7} {events:>7} {len(timeline.lanes):>5} "
                f"{statistics.median(took):>12.1f} ms {p95:>6.1f} ms {len(drawn) / 1024:>7.1f} KiB"
            )


if __name__ == "__main__":
    main()
