"""Runs that wait, in the store: how a wait is decided inside its transaction, and how a
waiting job's row records it (the types are the domain's, `tenure/waits.py`).

A wait runs in one transaction that first locks the job's row under its lease (`wait__lock`),
then reads what it waits for (a signal, child jobs) and the database's clock, and then either
records the outcome as a done stage (`wait__settle`) or suspends the job (`wait__suspend`):
state `waiting`, no owner, no lease, claimable again at `run_after`. A signal or a child's end
updates that same row, so it either commits before the lock (and the read sees it) or waits
for the suspend and then sets `run_after` to now (the claim finds the job at once).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from tenure.types import JSON
from tenure.waits import (
    ENDED_STATES,
    ChildEnd,
    ChildrenEnded,
    Signalled,
    TimedOut,
    TimerFired,
    WaitFor,
    WaitOutcome,
    WaitRequest,
)

# run_after of a wait without a deadline: never due by time (only a signal or a child wakes it).
NEVER = datetime.fromisoformat("9999-01-01T00:00:00+00:00")


class SignalOutcome(enum.StrEnum):
    """What storing a signal did."""

    STORED = "stored"  # the first of its name
    REPEATED = "repeated"  # the same payload again: answered as the first
    CONFLICT = "conflict"  # a different payload under a name already stored
    NO_JOB = "no_job"  # unknown or terminal


def decide(
    request: WaitRequest,
    now: datetime,
    signal: Sequence[JSON],
    children: Sequence[ChildEnd],
) -> tuple[WaitOutcome, datetime | None]:
    """The wait's outcome at `now` (settled, refused for strangers, or suspended) and its
    deadline.

    `signal` holds the stored payload if the awaited signal exists; `children` the awaited
    jobs the store found among the job's children. A child that failed or was cancelled
    settles the wait at once (its parent raises `ChildFailed`).
    """
    until = request.until
    if until is None and request.seconds is not None:
        until = now + timedelta(seconds=request.seconds)
    if request.wait_for is WaitFor.SIGNAL and signal:
        return WaitOutcome(Signalled(signal[0])), until
    if request.wait_for is WaitFor.JOBS:
        found = {child.id: child for child in children}
        strangers = tuple(job for job in request.jobs if job not in found)
        if strangers:
            return WaitOutcome(None, strangers), until
        ordered = tuple(found[job] for job in request.jobs)
        if all(c.state in ENDED_STATES for c in ordered) or any(c.failed for c in ordered):
            return WaitOutcome(ChildrenEnded(ordered)), until
    if until is not None and until <= now:
        if request.wait_for is WaitFor.TIMER:
            return WaitOutcome(TimerFired(request.seconds)), until
        return WaitOutcome(TimedOut()), until
    return WaitOutcome(None), until


def wait_document(request: WaitRequest, until: datetime | None) -> dict[str, Any]:
    """The job's `wait` column while it waits: ids, names and times, and the question the
    handler chose to put to its caller (see `waited_event`)."""
    document: dict[str, Any] = {"for": request.wait_for.value, "position": request.position}
    if request.signal is not None:
        document["name"] = request.signal
    if request.ask is not None:
        document["ask"] = request.ask.document()
    if request.jobs:
        document["jobs"] = list(request.jobs)
    if until is not None:
        document["until"] = until.isoformat()
    return document


def waited_event(document: dict[str, Any]) -> dict[str, Any]:
    """The `job_waiting` event's view of the wait: the question's method, never its words."""
    shown = {key: value for key, value in document.items() if key != "ask"}
    if "ask" in document:
        shown["ask"] = document["ask"]["method"]
    return shown
