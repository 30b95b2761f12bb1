"""What a waiting job waits for, as a typed value (`Job.wait`, `Lease.wait`): parsed once,
where the row is read, from the `wait` document the database keeps."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenure.asking import Ask

# The stage position of a rollout's hold: it belongs to no stage of the handler's.
HELD_POSITION = -1


class WaitFor(enum.StrEnum):
    """What a job waits for."""

    SIGNAL = "signal"
    JOBS = "jobs"
    TIMER = "timer"


@dataclass(frozen=True, slots=True)
class WaitState:
    """What a waiting job waits for: its `wait` document, parsed once."""

    wait_for: WaitFor
    position: int
    signal: str | None = None  # the first signal it still waits for
    jobs: tuple[str, ...] = ()
    until: datetime | None = None
    ask: Ask | None = None  # the question for `signal`
    # Every signal it still waits for (a wait for several takes them as they come), and the
    # question for each that has one.
    signals: tuple[str, ...] = ()
    asks: Mapping[str, Ask] = field(default_factory=dict, compare=False)
    held: bool = False  # held by a tripped rollout, not by a wait of its handler
    # The document as stored: what the HTTP API and the MCP tools show (the wire's shape).
    document: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

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
        name = document.get("name")
        until = document.get("until")
        signals, asks = _signals(document, name if isinstance(name, str) else None)
        signal = signals[0] if signals else None
        return cls(
            wait_for=wait_for,
            position=position,
            signal=signal,
            jobs=tuple(str(job) for job in document.get("jobs") or ()),
            until=datetime.fromisoformat(until) if isinstance(until, str) else None,
            ask=asks.get(signal) if signal is not None else None,
            signals=signals,
            asks=asks,
            held=bool(document.get("held")) or position == HELD_POSITION,
            document=dict(document),
        )

    def describe(self) -> str:
        """The condition in words: 'signal approval', '2 child jobs', 'timer', with its
        deadline."""
        if self.wait_for is WaitFor.SIGNAL and not self.signals:
            text = "signals, all received (resuming)"
        elif self.wait_for is WaitFor.SIGNAL and len(self.signals) > 1:
            text = "signals " + ", ".join(self.signals)
        elif self.wait_for is WaitFor.SIGNAL:
            text = f"signal {self.signal}"
        elif self.wait_for is WaitFor.JOBS:
            count = len(self.jobs)
            text = f"{count} child job" + ("" if count == 1 else "s")
        else:
            text = "timer"
        return f"{text} until {self.until.isoformat()}" if self.until else text


def _signals(
    document: Mapping[str, Any], name: str | None
) -> tuple[tuple[str, ...], dict[str, Ask]]:
    """The signals a wait still waits for and their questions: a wait for one keeps its
    `name` and `ask`; a wait for several its `pending` names (each signal stored removes its
    own, in the same statement) and its `asks` by name."""
    pending = document.get("pending")
    if isinstance(pending, list):
        signals = tuple(str(each) for each in pending)
        stored = document.get("asks")
        asks = {
            str(key): ask
            for key, value in (stored.items() if isinstance(stored, dict) else ())
            if (ask := Ask.from_document(value)) is not None
        }
        return signals, asks
    ask = Ask.from_document(document.get("ask"))
    if name is None:
        return (), {}
    return (name,), ({name: ask} if ask is not None else {})
