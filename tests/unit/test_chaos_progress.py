"""The chaos run's progress line counts the run's jobs against the run's jobs: every kind it
runs, what is submitted while it goes on, never what ended before it began."""

from __future__ import annotations

import re

import pytest

from tenure import JobState
from tenure.chaos.progress import WIDTH, ended, progress_line, progress_of


def counts(**by_state: int) -> dict[JobState, int]:
    return {state: by_state.get(state.value, 0) for state in JobState}


def shown(line: str) -> tuple[int, int, int]:
    """(done, total, filled) of a progress line."""
    found = re.fullmatch(r"\[(#*)\.*\] (\d+)/(\d+) done, \d+ running \| .* \| +[\d.]+s left", line)
    assert found is not None, line
    return int(found[2]), int(found[3]), len(found[1])


def test_jobs_submitted_during_the_run_count_in_the_total() -> None:
    """The run of the review: 40 orders submitted at the start, 617 more by the steady
    submitter (pair faults), all ended. The line said `657/40 done`; the total is the run's
    jobs, so it says 657 of 657."""
    orders = counts(succeeded=650, failed=7)
    line = progress_line(progress_of([orders, counts()], ended_before=0), "drained", 0.0)
    assert shown(line) == (657, 657, WIDTH)
    assert line.startswith(f"[{'#' * WIDTH}] 657/657 done, 0 running | drained |")


def test_parents_and_their_children_count_and_earlier_runs_do_not() -> None:
    """Orders (the parents' children among them) and parents, in a database that held 500
    ended orders of an earlier run: those are neither done nor in the total."""
    before = [counts(succeeded=480, failed=20), counts()]
    now = [
        counts(succeeded=530, failed=20, running=3, queued=17),
        counts(succeeded=5, waiting=12, running=2, queued=1),
    ]
    progress = progress_of(now, ended_before=ended(before))
    assert (progress.done, progress.total, progress.running) == (55, 90, 5)
    line = progress_line(progress, "faults 4", 21.46)
    assert shown(line) == (55, 90, WIDTH * 55 // 90)
    assert line.endswith("| faults 4 |  21.5s left")


@pytest.mark.parametrize(
    ("ended_jobs", "open_jobs", "before"),
    [(0, 0, 0), (0, 7, 0), (7, 0, 0), (3, 4, 3), (1000, 1, 999), (1, 10**6, 0)],
)
def test_the_count_never_exceeds_the_total(ended_jobs: int, open_jobs: int, before: int) -> None:
    progress = progress_of([counts(succeeded=ended_jobs, queued=open_jobs)], ended_before=before)
    done, total, filled = shown(progress_line(progress, "draining", -1.0))
    assert 0 <= done <= total
    assert 0 <= filled <= WIDTH
    assert (filled == WIDTH) == (done == total > 0)
