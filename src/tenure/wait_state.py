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
    signal: str | None = None
    jobs: tuple[str, ...] = ()
    until: datetime | None = None
    ask: Ask | None = None
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
            document=dict(document),
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
