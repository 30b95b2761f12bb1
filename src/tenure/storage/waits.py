"""Runs that wait: what a wait asks the store, and how the store decides it.

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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tenure.errors import NonRetryable
from tenure.types import JSON, JobState

# run_after of a wait without a deadline: never due by time (only a signal or a child wakes it).
NEVER = datetime.fromisoformat("9999-01-01T00:00:00+00:00")


class WaitFor(enum.StrEnum):
    """What a job waits for."""

    SIGNAL = "signal"
    JOBS = "jobs"
    TIMER = "timer"


@dataclass(frozen=True, slots=True)
class WaitRequest:
    """One wait of a handler: the stage at `position` named `name`.

    `seconds` is a timer's length or a wait's timeout (None: no timeout); `until` is the
    deadline an earlier suspend of this same wait fixed (a resumed wait keeps it).
    """

    position: int
    name: str
    wait_for: WaitFor
    signal: str | None = None
    jobs: tuple[str, ...] = ()
    seconds: float | None = None
    until: datetime | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    # The question put to an MCP caller for the signal (`tenure.Ask.document()`).
    ask: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    """`result` (the recorded outcome) when the wait settled; else the job is suspended."""

    result: dict[str, Any] | None

    @property
    def suspended(self) -> bool:
        """True when the job now waits (the handler must stop)."""
        return self.result is None


class SignalOutcome(enum.StrEnum):
    """What storing a signal did."""

    STORED = "stored"  # the first of its name
    REPEATED = "repeated"  # the same payload again: answered as the first
    CONFLICT = "conflict"  # a different payload under a name already stored
    NO_JOB = "no_job"  # unknown or terminal


_ENDED = frozenset({JobState.SUCCEEDED.value, JobState.FAILED.value, JobState.CANCELLED.value})
FAILED = frozenset({JobState.FAILED.value, JobState.CANCELLED.value})


def decide(
    request: WaitRequest,
    now: datetime,
    signal: Sequence[JSON],
    children: Sequence[dict[str, Any]],
) -> tuple[dict[str, Any] | None, datetime | None]:
    """The wait's outcome at `now` (None: not yet) and its deadline.

    `signal` holds the stored payload if the awaited signal exists; `children` the awaited
    jobs as {"id", "state", "result", "error"}. A child that failed or was cancelled settles
    the wait at once (its parent raises `ChildFailed`).
    """
    until = request.until
    if until is None and request.seconds is not None:
        until = now + timedelta(seconds=request.seconds)
    if request.wait_for is WaitFor.SIGNAL and signal:
        return {"signal": signal[0]}, until
    if request.wait_for is WaitFor.JOBS:
        found = {child["id"]: child for child in children}
        strangers = [job for job in request.jobs if job not in found]
        if strangers:
            raise NonRetryable(
                f"job {strangers[0]} is not a child of this job: a job waits only for the "
                "jobs it spawned",
                code="not_a_child",
            )
        ordered = [found[job] for job in request.jobs]
        if all(c["state"] in _ENDED for c in ordered) or any(c["state"] in FAILED for c in ordered):
            return {"jobs": ordered}, until
    if until is not None and until <= now:
        if request.wait_for is WaitFor.TIMER:
            return {"timer": request.seconds}, until
        return {"timeout": True}, until
    return None, until


def wait_document(request: WaitRequest, until: datetime | None) -> dict[str, Any]:
    """The job's `wait` column while it waits: ids, names and times, and the question the
    handler chose to put to its caller (see `waited_event`)."""
    document: dict[str, Any] = {"for": request.wait_for.value, "position": request.position}
    if request.signal is not None:
        document["name"] = request.signal
    if request.ask is not None:
        document["ask"] = request.ask
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
