"""Runs that wait, as types: what a handler's wait asks the store (`WaitRequest`), what a
waiting job waits for (`WaitState`, parsed once from its stored `wait` document), and what a
settled wait gave the handler (`WaitResult`: `Signalled`, `ChildrenEnded`, `TimerFired` or
`TimedOut`). The store keeps only the transaction (`storage/waits.py`)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenure.asking import Ask
from tenure.errors import ChildFailed, InvalidArgument, WaitTimeout
from tenure.types import JSON, Event, EventType, Job, JobState

# A job a tripped `hold` rollout holds waits for this signal (`tenure rollouts release`).
HELD_SIGNAL = "release"
# The stage position of that wait: it belongs to no stage of the handler's.
HELD_POSITION = -1
FAILED_STATES = frozenset({JobState.FAILED.value, JobState.CANCELLED.value})
ENDED_STATES = frozenset({JobState.SUCCEEDED.value, *FAILED_STATES})


class WaitFor(enum.StrEnum):
    """What a job waits for."""

    SIGNAL = "signal"
    JOBS = "jobs"
    TIMER = "timer"


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


@dataclass(frozen=True, slots=True)
class WaitState:
    """What a waiting job waits for: its `wait` document, parsed once."""

    wait_for: WaitFor
    position: int
    signal: str | None = None
    jobs: tuple[str, ...] = ()
    until: datetime | None = None
    ask: Ask | None = None
    held: bool = False  # held by a tripped rollout, not by a wait of its handler

    @classmethod
    def parse(cls, document: Mapping[str, Any] | None) -> WaitState | None:
        """The state a stored document describes (None: none, or one this version cannot
        read)."""
        if not document:
            return None
        try:
            wait_for = WaitFor(str(document.get("for")))
        except ValueError:
            return None
        position = document.get("position")
        position = position if isinstance(position, int) else 0
        signal = document.get("name")
        until = document.get("until")
        return cls(
            wait_for=wait_for,
            position=position,
            signal=signal if isinstance(signal, str) else None,
            jobs=tuple(str(job) for job in document.get("jobs") or ()),
            until=datetime.fromisoformat(until) if isinstance(until, str) else None,
            ask=Ask.from_document(document.get("ask")),
            held=bool(document.get("held")) or position == HELD_POSITION,
        )

    def describe(self) -> str:
        """The condition in words: 'signal approval', '2 child jobs', 'timer', with its
        deadline."""
        if self.wait_for is WaitFor.SIGNAL:
            text = f"signal {self.signal}"
        elif self.wait_for is WaitFor.JOBS:
            count = len(self.jobs)
            text = f"{count} child job" + ("" if count == 1 else "s")
        else:
            text = "timer"
        return f"{text} until {self.until.isoformat()}" if self.until else text


def wait_state(job: Job) -> WaitState | None:
    """What the job waits for, if it waits."""
    return WaitState.parse(job.wait) if job.state is JobState.WAITING else None


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


def describe_wait(wait: Mapping[str, Any] | None) -> str:
    """A `wait` document's condition in words ('' for none)."""
    state = WaitState.parse(wait)
    return state.describe() if state is not None else ""


# -- what a settled wait gave -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Signalled:
    payload: JSON


@dataclass(frozen=True, slots=True)
class ChildEnd:
    """An awaited child as the wait found it: ended, or failed or cancelled."""

    id: str
    state: str
    result: JSON
    error: JSON

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
                    {"id": c.id, "state": c.state, "result": c.result, "error": c.error}
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
            return ChildrenEnded(tuple(ChildEnd(**child) for child in record["jobs"]))
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
