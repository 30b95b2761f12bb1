"""Runs that wait, as types: what a handler's wait asks the store (`WaitRequest`), what a
waiting job waits for (`WaitState`, parsed once from its stored `wait` document), and what a
settled wait gave the handler (`WaitResult`: `Signalled`, `ChildrenEnded`, `TimerFired` or
`TimedOut`). The store keeps only the transaction (`storage/waits.py`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tenure.asking import Ask
from tenure.errors import ChildFailed, InvalidArgument, WaitTimeout
from tenure.types import JSON, Event, EventType, Job, JobState
from tenure.validation import check_name
from tenure.wait_state import WaitFor, WaitState

# A job a tripped `hold` rollout holds waits for this signal (`tenure rollouts release`).
HELD_SIGNAL = "release"
FAILED_STATES = frozenset({JobState.FAILED, JobState.CANCELLED})
ENDED_STATES = frozenset({JobState.SUCCEEDED, *FAILED_STATES})
# A wait for several signals keeps their names and questions in the job's row.
MAX_SIGNALS_AT_ONCE = 16


@dataclass(frozen=True, slots=True)
class WaitRequest:
    """One wait of a handler: the stage at `position` named `name`.

    `signals` are the signals it waits for: one (`wait_for`), or several taken as they come
    (`together`, `wait_for_all`: settled once all are stored, its value a dict by name);
    `seconds` is a timer's length or a wait's timeout (None: no timeout); `until` is the
    deadline an earlier suspend of this same wait fixed (a resumed wait keeps it); `asks` are
    the questions put to an MCP caller for the signals, by name.
    """

    position: int
    name: str
    wait_for: WaitFor
    signals: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()
    seconds: float | None = None
    until: datetime | None = None
    asks: Mapping[str, Ask] = field(default_factory=dict)
    together: bool = False

    @property
    def signal(self) -> str | None:
        """The signal a wait for one waits for (the first of several)."""
        return self.signals[0] if self.signals else None

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


def awaited_signals(job: Job) -> tuple[str, ...]:
    """Every signal a waiting job still waits for (a wait for several drops each as it is
    stored), in the order its handler named them."""
    state = wait_state(job)
    return state.signals if state is not None and state.wait_for is WaitFor.SIGNAL else ()


def awaited_ask(job: Job, signal: str) -> Ask | None:
    """The question a job waiting for `signal` puts to its caller, if its handler gave one."""
    state = wait_state(job)
    return state.asks.get(signal) if state is not None else None


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


def signals_value(
    result: WaitResult, names: tuple[str, ...], timeout: float | None
) -> dict[str, JSON]:
    """What `wait_for_all` returns for a settled wait: the payloads by name, or
    `WaitTimeout`."""
    if isinstance(result, Signalled) and isinstance(result.payload, dict):
        return result.payload
    raise WaitTimeout(f"signals {', '.join(names)} did not all arrive within {timeout or 0:g}s")


def signal_questions(questions: Any) -> tuple[tuple[str, ...], dict[str, Ask]]:
    """The names and questions of a wait for several signals (`wait_for_all`), checked: a
    mapping of 1 to MAX_SIGNALS_AT_ONCE signal names to a `tenure.Ask` or None."""
    if not isinstance(questions, Mapping) or not questions:
        raise InvalidArgument(
            "wait_for_all takes a non-empty mapping of signal names to a tenure.Ask or None"
        )
    if len(questions) > MAX_SIGNALS_AT_ONCE:
        raise InvalidArgument(
            f"wait_for_all waits for at most {MAX_SIGNALS_AT_ONCE} signals, got {len(questions)}"
        )
    names = tuple(check_name(name, "signal name") for name in questions)
    asks: dict[str, Ask] = {}
    for name, ask in zip(names, questions.values(), strict=True):
        if ask is not None and not isinstance(ask, Ask):
            raise InvalidArgument(f"the question for {name!r} must be a tenure.Ask or None")
        if ask is not None:
            asks[name] = ask
    return names, asks


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
    signals: Mapping[str, JSON],
    children: Sequence[ChildEnd],
) -> tuple[WaitOutcome, datetime | None]:
    """The wait's outcome at `now` (settled, refused for strangers, or suspended) and its
    deadline: what every store decides inside the wait's transaction.

    `signals` holds the stored payloads of the awaited signals that exist, by name;
    `children` the awaited jobs the store found among the job's children. A child that failed
    or was cancelled settles the wait at once (its parent raises `ChildFailed`).
    """
    until = request.until
    if until is None and request.seconds is not None:
        until = now + timedelta(seconds=request.seconds)
    names = request.signals
    if request.wait_for is WaitFor.SIGNAL and names and all(n in signals for n in names):
        return WaitOutcome(_signalled(request, signals)), until
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


def _signalled(request: WaitRequest, signals: Mapping[str, JSON]) -> Signalled:
    """A settled signal wait: the payload, or for several (`together`) the payloads by name."""
    if request.together:
        return Signalled({name: signals[name] for name in request.signals})
    return Signalled(signals[request.signals[0]])


def wait_document(
    request: WaitRequest, until: datetime | None, received: Collection[str] = ()
) -> dict[str, Any]:
    """The job's `wait` column while it waits: ids, names and times, and the questions the
    handler chose to put to its caller (see `waited_event`). A wait for several signals keeps
    the names not yet `received` as `pending`: a signal's statement drops its own name and
    wakes the job when none is left."""
    document: dict[str, Any] = {"for": request.wait_for.value, "position": request.position}
    if request.together:
        document["names"] = list(request.signals)
        document["pending"] = [name for name in request.signals if name not in received]
        if request.asks:
            document["asks"] = {name: ask.document() for name, ask in request.asks.items()}
    elif request.signal is not None:
        document["name"] = request.signal
        ask = request.asks.get(request.signal)
        if ask is not None:
            document["ask"] = ask.document()
    if request.jobs:
        document["jobs"] = list(request.jobs)
    if until is not None:
        document["until"] = until.isoformat()
    return document


def waited_event(document: dict[str, Any]) -> dict[str, Any]:
    """The `job_waiting` event's view of the wait: the questions' methods, never their words."""
    shown = {key: value for key, value in document.items() if key not in ("ask", "asks")}
    if "ask" in document:
        shown["ask"] = document["ask"]["method"]
    if "asks" in document:
        shown["asks"] = {name: ask["method"] for name, ask in document["asks"].items()}
    return shown


def wait_seconds(value: float | None) -> float | None:
    """A wait's timeout: None, or a finite number of seconds >= 0 (infinity is None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidArgument(f"a timeout must be a number of seconds >= 0, got {value!r}")
    if value == float("inf"):
        return None
    return float(value)
