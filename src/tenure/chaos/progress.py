"""The chaos run's progress line: how many of the run's jobs have ended, of how many.

The run's jobs are more than the orders it submits at the start: the parents, the orders they
spawn and, with pair faults, what the steady submitter adds while the run goes on; and a
`--db` database may hold jobs of the same kinds from before. So the total is counted from the
database like the ended ones: every job of the run's kinds, less those that had already ended
when the run began. Ended jobs are among them, so the count never exceeds the total.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import tenure
from tenure import JobState

WIDTH = 30


@dataclass(frozen=True, slots=True)
class Progress:
    """The run's jobs: ended, all of them so far, running now."""

    done: int
    total: int
    running: int


def ended(counts: Iterable[Mapping[JobState, int]]) -> int:
    """How many jobs of these counts (one per kind) are terminal."""
    return sum(n for per_kind in counts for state, n in per_kind.items() if state.terminal)


def progress_of(counts: Iterable[Mapping[JobState, int]], ended_before: int) -> Progress:
    """The run's progress from the counts of its kinds now and the jobs of those kinds that
    had ended before it began (`ended` of the counts then)."""
    per_kind = list(counts)
    everything = sum(sum(per_kind_counts.values()) for per_kind_counts in per_kind)
    running = sum(per_kind_counts.get(JobState.RUNNING, 0) for per_kind_counts in per_kind)
    return Progress(
        done=ended(per_kind) - ended_before,
        total=everything - ended_before,
        running=running,
    )


def progress_line(progress: Progress, what: str, remaining: float) -> str:
    """`[####......] 12/80 done, 3 running | faults 4 |  21.5s left`."""
    filled = WIDTH * progress.done // max(1, progress.total)
    return (
        f"[{'#' * filled}{'.' * (WIDTH - filled)}] {progress.done}/{progress.total} done, "
        f"{progress.running} running | {what} | {max(0.0, remaining):5.1f}s left"
    )


def count_kinds(ledger: tenure.Ledger, kinds: Iterable[str]) -> list[dict[JobState, int]]:
    """The counts of each kind, as `progress_of` takes them."""
    return [ledger.operations.counts(kind=kind) for kind in kinds]
