"""Runs that wait, as types: what a handler's wait asks the store (`WaitRequest`), what a
waiting job waits for (`WaitState`, parsed once from its stored `wait` document), and what a
settled wait gave the handler (`WaitResult`: `Signalled`, `ChildrenEnded`, `TimerFired` or
`TimedOut`). The store keeps only the transaction (`storage/waits.py`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tenure.asking import Ask
from tenure.errors import ChildFailed, InvalidArgument, WaitTimeout
from tenure.types import JSON, Event, EventType, Job, JobState
from tenure.wait_state import WaitFor, WaitState

# A job a tripped `hold` rollout holds waits for this signal (`tenure rollouts release`).
HELD_SIGNAL = "release"
FAILED_STATES = frozenset({JobState.FAILED, JobState.CANCELLED})
ENDED_STATES = frozenset({JobState.SUCCEEDED, *FAILED_STATES})


@dataclass(frozen=True, slots=True)
class WaitRequest:
    """One wait of a handler: the stage at `position` named `name`.

    `seconds` is a timer's length or a wait's timeout (None: no timeout); `until` is the
    deadline an earlier suspend of this same wait fixed (a resumed wait keeps it); `ask` is the
    question put to an MCP caller for the signal.
    """

    position: int
    name: str
    wait_for: WaitFor
    signal: str | None = None
    jobs: tuple[str, ...] = ()
    seconds: float | None = None
    until: datetime | None = None
    ask: Ask | None = None

    @property
    def detail(self) -> dict[str, Any]:
        """What the wait's events say of it besides its outcome."""
        return {"position": self.position}


def wait_state(job: Job) -> WaitState | None:
    """What the job waits for, if it waits."""
    return job.wait if job.state is JobState.WAITING else None


def awaited_signal(job: Job) -> str | None:
    """The signal a waiting job waits for, if that is what it waits for."""
    state = wait_state(job)
    return state.signal if state is not None and state.wait_for is WaitFor.SIGNAL else None


def awaited_ask(job: Job) -> Ask | None:
    """The question a job waiting for a signal puts to its caller, if its handler gave one."""
    state = wait_state(job)
    return state.ask if state is not None and state.wait_for is WaitFor.SIGNAL else None


def signals_received(events: Iterable[Event]) -> list[str]:
    """The names of the signals a job took, in order, from its events."""
    return [str(e.detail.get("name")) for e in events if e.type is EventType.SIGNAL_RECEIVED]


def describe_wait(wait: WaitState | None) -> str:
    """A wait's condition in words ('' for none)."""
    return wait.describe() if wait is not None else ""


# -- what a settled wait gave -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Signalled:
    payload: JSON


@dataclass(frozen=True, slots=True)
class ChildEnd:
    """An awaited child as the wait found it: ended, or failed or cancelled."""

    id: str
    state: JobState
    result: JSON
    error: JSON

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ChildEnd:
        """A child as a settled wait's stage record holds it (`record_of`)."""
        return cls(record["id"], JobState(record["state"]), record["result"], record["error"])

    @property
    def failed(self) -> bool:
        return self.state in FAILED_STATES


@dataclass(frozen=True, slots=True)
class ChildrenEnded:
    children: tuple[ChildEnd, ...]


@dataclass(frozen=True, slots=True)
class TimerFired:
    seconds: float | None


@dataclass(frozen=True, slots=True)
class TimedOut:
    pass


WaitResult = Signalled | ChildrenEnded | TimerFired | TimedOut


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    """A wait's answer from the store: `result` when it settled; `strangers`, the awaited ids
    that are not the job's children (nothing was written); else the job is suspended."""

    result: WaitResult | None
    strangers: tuple[str, ...] = field(default=())

    @property
    def suspended(self) -> bool:
        """True when the job now waits (the handler must stop)."""
        return self.result is None and not self.strangers


def record_of(result: WaitResult) -> dict[str, Any]:
    """The settled wait's stage record, as stored (and read back by `result_of`)."""
    match result:
        case Signalled(payload):
            return {"signal": payload}
        case ChildrenEnded(children):
            return {
                "jobs": [
                    {"id": c.id, "state": c.state.value, "result": c.result, "error": c.error}
                    for c in children
                ]
            }
        case TimerFired(seconds):
            return {"timer": seconds}
        case TimedOut():
            return {"timeout": True}


def result_of(record: Any) -> WaitResult:
    """A settled wait's stage record as its result; `InvalidArgument` for anything else."""
    if isinstance(record, Mapping):
        if "signal" in record:
            return Signalled(record["signal"])
        if "jobs" in record:
            return ChildrenEnded(tuple(ChildEnd.from_record(child) for child in record["jobs"]))
        if "timer" in record:
            return TimerFired(record["timer"])
        if "timeout" in record:
            return TimedOut()
    raise InvalidArgument(f"not a settled wait's record: {type(record).__name__}")


def signal_value(result: WaitResult, name: str, timeout: float | None) -> JSON:
    """What `wait_for` returns for a settled wait: the payload, or `WaitTimeout`."""
    if isinstance(result, Signalled):
        return result.payload
    raise WaitTimeout(f"signal {name!r} did not arrive within {timeout or 0:g}s")


def children_value(result: WaitResult, single: bool, timeout: float | None) -> JSON:
    """What `wait_job` returns for a settled wait: the result (or the list of results), or
    `ChildFailed` for a child that failed or was cancelled, or `WaitTimeout`."""
    if not isinstance(result, ChildrenEnded):
        raise WaitTimeout(f"child job(s) did not end within {timeout or 0:g}s")
    for child in result.children:
        if child.failed:
            raise ChildFailed(child.id, child.state, child.error)
    results = [child.result for child in result.children]
    return results[0] if single else results


def decide(
    request: WaitRequest,
    now: datetime,
    signal: Sequence[JSON],
    children: Sequence[ChildEnd],
) -> tuple[WaitOutcome, datetime | None]:
    """The wait's outcome at `now` (settled, refused for strangers, or suspended) and its
    deadline: what every store decides inside the wait's transaction.

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
