"""Schedules, as values: when a job class fires (a cron expression in a time zone, or a fixed
interval), which slots are due between two moments, and what a scheduler that was away does
with the slots it missed. The slots' jobs are keyed by the slot's time, so that any number of
processes may fire one slot and one job exists (`slot_key`). Pure: no clock, no database."""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tenure.errors import InvalidArgument
from tenure.types import JSON

MISSED_POLICIES = ("skip", "once", "all")
MAX_CATCH_UP = 1000
# A slot is on time while the scheduler reaches it within this long: later, it was missed.
ON_TIME = timedelta(seconds=60)
MIN_GRACE = timedelta(seconds=5)
# A scheduler away longer than this (a year) passes over older slots without counting them.
MAX_LOOK_BACK = timedelta(days=366)
MAX_INTERVAL = 366 * 86_400
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Every:
    """A fixed interval, in seconds: slots at every multiple of it since 1970-01-01 UTC (so
    every process agrees on them, whenever it started)."""

    seconds: float

    def __post_init__(self) -> None:
        seconds = self.seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise InvalidArgument(f"Every takes a number of seconds, got {seconds!r}")
        if not math.isfinite(seconds) or not 1 <= seconds <= MAX_INTERVAL:
            raise InvalidArgument(
                f"Every takes at least 1 second and at most a year ({MAX_INTERVAL} s), "
                f"got {seconds!r}"
            )


@dataclass(frozen=True, slots=True)
class Slots:
    """What a scheduler does at one moment: the slots to fire (oldest first), how many it
    missed and leaves, and the slot it has then dealt with (the next pass starts after it)."""

    fire: tuple[datetime, ...]
    missed: int
    through: datetime


@dataclass(frozen=True, slots=True)
class SchedulePass:
    """One pass over a kind's slots: the jobs it submitted or found (by slot key), and the
    slots it counted as missed (0 when another pass had dealt with them)."""

    kind: str
    jobs: tuple[str, ...]
    missed: int
    next_in: float | None = None  # seconds to the next slot by the database's clock


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a job class fires, checked where it is declared (`InvalidArgument`)."""

    when: str | Every
    timezone: str = "UTC"
    missed_slots: str = "skip"
    max_catch_up: int = 10
    payload: JSON | Callable[[datetime], JSON] = None
    jitter: float = 0.0
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "zone", _zone(self.timezone))
        if isinstance(self.when, str):
            _check_cron(self.when)
            try:  # croniter accepts some expressions that never match (30 February)
                ever = next(iter(self.slots(_EPOCH, _EPOCH + timedelta(days=4 * 366))), None)
            except Exception:
                ever = None
            if ever is None:
                raise InvalidArgument(f"the cron expression {self.when!r} never fires")
        elif not isinstance(self.when, Every):
            raise InvalidArgument(
                f"a schedule is a cron expression or tenure.Every(seconds), got {self.when!r}"
            )
        if self.missed_slots not in MISSED_POLICIES:
            raise InvalidArgument(
                f"missed_slots must be one of {', '.join(MISSED_POLICIES)}, "
                f"got {self.missed_slots!r}"
            )
        jitter = self.jitter
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)):
            raise InvalidArgument(f"jitter is a number of seconds, got {jitter!r}")
        if not math.isfinite(jitter) or not 0 <= jitter <= self.period.total_seconds():
            raise InvalidArgument(
                f"jitter must be from 0 to the schedule's period "
                f"({self.period.total_seconds():g} s), got {jitter!r}"
            )
        catch_up = self.max_catch_up
        if isinstance(catch_up, bool) or not isinstance(catch_up, int):
            raise InvalidArgument(f"max_catch_up must be an integer, got {catch_up!r}")
        if not 1 <= catch_up <= MAX_CATCH_UP:
            raise InvalidArgument(f"max_catch_up must be from 1 to {MAX_CATCH_UP}, got {catch_up}")

    @property
    def period(self) -> timedelta:
        """The interval's length; a minute for a cron (its finest step)."""
        if isinstance(self.when, Every):
            return timedelta(seconds=self.when.seconds)
        return timedelta(minutes=1)

    @property
    def grace(self) -> timedelta:
        """How late a slot may be reached and still be on time: ON_TIME, or less for a short
        interval (a one-second schedule stalled for half a minute missed its slots), but at
        least MIN_GRACE."""
        return min(ON_TIME, max(self.period, MIN_GRACE))

    def describe(self) -> str:
        """The schedule in words: 'cron 0 3 * * * (Asia/Almaty), missed: skip'."""
        if isinstance(self.when, Every):
            when = f"every {self.when.seconds:g} s"
        else:
            when = f"cron {self.when} ({self.timezone})"
        policy = self.missed_slots
        if policy == "all":
            policy = f"all (at most {self.max_catch_up})"
        return f"{when}, missed: {policy}"

    def slots(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """The slots strictly after `after` and at or before `until`, in UTC, oldest first."""
        if isinstance(self.when, Every):
            step = self.when.seconds
            n = math.floor((after - _EPOCH).total_seconds() / step) + 1
            while (slot := _EPOCH + timedelta(seconds=n * step)) <= until:
                if slot > after:
                    yield slot
                n += 1
            return
        from croniter import croniter  # type: ignore[import-untyped]  # the `cron` extra

        times = croniter(self.when, after.astimezone(self.zone))
        while (slot := times.get_next(datetime).astimezone(UTC)) <= until:
            yield slot

    def next_after(self, moment: datetime) -> datetime | None:
        """The first slot after `moment`, if there is one within a year and a day (a cron
        for 29 February has none in most years)."""
        return next(iter(self.slots(moment, moment + timedelta(days=367))), None)

    def due(self, through: datetime | None, now: datetime) -> Slots:
        """The slots due at `now` after the scheduler dealt with every slot up to `through`
        (None: it never ran; it fires the current slot if it is on time). A slot reached
        within `grace` fires; older ones were missed: `skip` fires none of them,
        `once` the latest (unless one is on time), `all` the latest `max_catch_up`. Slots
        older than MAX_LOOK_BACK are neither fired nor counted."""
        grace = self.grace
        if through is None:  # a first pass: the current slot, if it is on time
            current = max(self.slots(now - grace - self.period, now), default=None)
            if current is None or now - current > grace:
                return Slots((), 0, current or now - grace)
            return Slots((current,), 0, current)
        start = max(through, now - MAX_LOOK_BACK)
        missed = 0
        if isinstance(self.when, Every):  # only the slots that may fire are walked
            start, missed = self._skip_ahead(start, now)
        late: deque[datetime] = deque(maxlen=self.max_catch_up)
        on_time: list[datetime] = []
        last = None
        for slot in self.slots(start, now):
            last = slot
            if now - slot <= grace:
                on_time.append(slot)
            else:
                missed += 1
                late.append(slot)
        if last is None:
            return Slots((), 0, start)
        kept: list[datetime] = []
        if self.missed_slots == "all":
            kept = list(late)
        elif self.missed_slots == "once" and late and not on_time:
            kept = [late[-1]]
        return Slots(tuple(kept + on_time), missed - len(kept), last)

    def _skip_ahead(self, start: datetime, now: datetime) -> tuple[datetime, int]:
        """For an interval: a later start with the same outcome, and the slots it passed
        over (all late, and older than the latest `max_catch_up` late ones)."""
        assert isinstance(self.when, Every)
        step = self.when.seconds
        first = math.floor((start - _EPOCH).total_seconds() / step) + 1
        last = math.floor((now - _EPOCH).total_seconds() / step)
        keep = self.max_catch_up + math.ceil(self.grace.total_seconds() / step) + 1
        skip_to = last - keep
        if skip_to < first:
            return start, 0
        return _EPOCH + timedelta(seconds=skip_to * step), skip_to - first + 1

    def start_of(self, slot: datetime) -> datetime:
        """When the slot's job may start: the slot, delayed by its share of `jitter` (the
        same on every process: a function of the slot's key), to spread a fleet's slots."""
        if not self.jitter:
            return slot
        digest = hashlib.sha256(utc_text(slot).encode()).digest()
        share = int.from_bytes(digest[:8], "big") / 2**64
        return slot + timedelta(seconds=share * self.jitter)

    def payload_for(self, slot: datetime) -> JSON:
        """The payload of the slot's job: the schedule's value, or its function of the slot."""
        if callable(self.payload):
            return self.payload(slot)
        return self.payload


def slot_key(kind: str, slot: datetime) -> str:
    """The idempotency key of a slot's job: one job per kind and slot, whoever fires it."""
    return f"schedule:{kind}:{utc_text(slot)}"


def run_key(kind: str, asked_at: datetime) -> str:
    """The idempotency key of an operator's run now (`tenure schedule trigger`)."""
    return f"schedule-run:{kind}:{utc_text(asked_at)}"


def utc_text(moment: datetime) -> str:
    """The moment in UTC, ISO 8601 with `Z` (as slot keys name it)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _zone(name: Any) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"a time zone is an IANA name such as 'Asia/Almaty', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(
            f"no time zone {name!r} (an IANA name such as 'Asia/Almaty'; install tzdata where "
            "the system has none)"
        ) from None


def _check_cron(expression: str) -> None:
    try:
        from croniter import croniter
    except ImportError:
        raise InvalidArgument(
            "a cron schedule needs croniter: pip install 'tenure[cron]' (or use tenure.Every)"
        ) from None
    if "\x00" in expression or not croniter.is_valid(expression):
        raise InvalidArgument(f"not a cron expression: {expression!r}")
