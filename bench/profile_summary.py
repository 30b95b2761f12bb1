"""Summarise a py-spy profile of the drain: where each thread spends its time.

    py-spy record --idle --threads -r 500 -f raw -o drain.txt -- python -m bench.systems \\
        tenure drain '{"url": "postgresql://…/db", "n": 20000, "concurrency": 32}'
    python bench/profile_summary.py drain.txt

`--idle` keeps samples of threads that wait (on the database, a lock, a queue): for a job
queue the waits are the story. Prints, per thread group, its share of the samples and its top
frames, each classed as waiting on the database, waiting on a lock/queue, or running Python.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict

GROUPS = [
    ("committer (complete + claim statement)", "Committer._run"),
    ("claim loop", "Worker._claim_loop"),
    ("handler threads", "HandlerThreads._serve"),
    ("lease keeper", "LeaseKeeper._guarded"),
    ("listener", "PostgresListener._run"),
    ("main (the benchmark waiting)", "<module>"),
]
DATABASE = ("Connection.wait", "PGconn", "sqlite3", "execute (")


def classify(leaf: str) -> str:
    if any(mark in leaf for mark in DATABASE):
        return "database"
    if re.search(r"(Condition\.wait|Event\.wait|Lock|SimpleQueue|queue\.py|sleep)", leaf):
        return "waiting"
    return "python"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("raw", help="py-spy --format raw output")
    args = parser.parse_args()
    by_group: Counter[str] = Counter()
    threads: dict[str, set[str]] = defaultdict(set)
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    frames: dict[str, Counter[str]] = defaultdict(Counter)
    with open(args.raw) as handle:
        for line in handle:
            stack, _, sample_count = line.rstrip().rpartition(" ")
            samples = int(sample_count)
            thread, _, rest = stack.partition(";")
            group = next((name for name, mark in GROUPS if mark in rest), "other")
            calls = [frame.split(" (")[0] for frame in rest.split(";")]
            by_group[group] += samples
            threads[group].add(thread)
            kinds[group][classify(calls[-1])] += samples
            frames[group][" < ".join(reversed(calls[-3:]))] += samples
    # py-spy samples every thread at each tick: one thread's samples are its wall time.
    ticks = max(by_group[group] / len(threads[group]) for group in by_group)
    for group, samples in by_group.most_common():
        count = len(threads[group])
        split = ", ".join(f"{kind} {n / samples:.0%}" for kind, n in kinds[group].most_common())
        print(
            f"\n{group}: {count} thread(s), each busy-or-waiting "
            f"{samples / count / ticks:.0%} of the run ({split})"
        )
        for frame, n in frames[group].most_common(4):
            print(f"  {n / samples:5.0%}  {frame[:110]}")


if __name__ == "__main__":
    main()
