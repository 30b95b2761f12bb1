"""Schedules in the store: one row per scheduled kind (`tenure_schedules`), written by every
worker that runs the kind and by operators (pause, resume, trigger)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A scheduled kind as stored: `through` is the last slot dealt with (fired or missed)."""

    kind: str
    description: str
    paused: bool
    through: datetime | None
    next_slot: datetime | None
    last_fired_at: datetime | None
    last_slot: datetime | None
    fired: int
    missed: int
    triggered_at: datetime | None


@dataclass(frozen=True, slots=True)
class Advance:
    """A pass over a kind's slots, written only if no other pass moved `was` first."""

    kind: str
    was: datetime | None
    through: datetime
    next_slot: datetime | None
    fired: int
    missed: int
    last_slot: datetime | None


class ScheduleStore(Protocol):
    """What schedules ask of a store."""

    def schedules(self) -> list[ScheduleRow]:
        """Every scheduled kind, by kind."""
        ...

    def schedule_declare(self, kind: str, description: str, next_slot: datetime | None) -> None:
        """The kind's row, made if missing; its description and next slot as given."""
        ...

    def schedule_advance(self, advance: Advance) -> bool:
        """Move the kind's `through` from `was` (False: another pass moved it first)."""
        ...

    def schedule_pause(self, kind: str, paused: bool) -> bool:
        """Pause or resume the kind's schedule (False: no such schedule)."""
        ...

    def schedule_trigger(self, kind: str) -> bool:
        """Ask for a run now (False: no such schedule)."""
        ...

    def schedule_clear_trigger(self, kind: str, seen: datetime) -> None:
        """Clear the request `seen` (a newer one stays)."""
        ...
