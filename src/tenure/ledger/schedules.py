"""Schedules: every worker that runs a scheduled kind passes over its due slots and submits
each slot's job under the slot's key (`schedules.slot_key`), so that any number of workers,
on any number of hosts, make one job per slot with no leader; the kind's row in the store says
what has been dealt with, its pause, and an operator's request for a run now."""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from tenure.errors import IdempotencyConflict, InvalidArgument
from tenure.ledger.core import LedgerCore, Part
from tenure.ledger.submission import Submission
from tenure.logs import emit
from tenure.options import SubmitOptions
from tenure.schedules import Schedule, SchedulePass, run_key, slot_key, utc_text
from tenure.storage.base import JobStore
from tenure.storage.schedules import Advance, ScheduleRow, ScheduleStore
from tenure.types import EventType
from tenure.validation import check_name

log = logging.getLogger("tenure")


class ScheduleParts(ScheduleStore, JobStore, Protocol):
    """What `Schedules` uses of the store."""


class Schedules(Part[ScheduleParts]):
    """`declare`, `fire_due`, `fire_all`, `list`, `pause`, `resume`, `trigger`."""

    def __init__(self, core: LedgerCore, store: ScheduleParts, submission: Submission) -> None:
        super().__init__(core, store)
        self.submission = submission

    def declare(self, kind: str, schedule: Schedule) -> None:
        """Make the kind's row if it is missing, with the schedule in words and its next slot
        (a worker does this at start; pausing and what was fired stay as they were)."""
        kind = check_name(kind, "kind")
        if not isinstance(schedule, Schedule):
            raise InvalidArgument(f"declare takes a tenure Schedule, got {type(schedule).__name__}")
        self.store.schedule_declare(kind, schedule.describe(), schedule.next_after(self.core.now()))

    def fire_due(self, kind: str, schedule: Schedule, now: datetime | None = None) -> SchedulePass:
        """Submit the jobs of the slots due now by the database's clock (`now`: a moment the
        caller names, for tests on a fake clock) unless the schedule is paused, and of an
        operator's request for a run now (paused or not); count the slots missed."""
        return self.fire_all({kind: schedule}, now)[0]

    def fire_all(
        self, schedules: Mapping[str, Schedule], now: datetime | None = None
    ) -> builtins.list[SchedulePass]:
        """`fire_due` for several kinds, with one read of their rows and of the clock."""
        if now is not None and now.tzinfo is None:
            raise InvalidArgument("now must be an aware datetime (with a time zone)")
        for kind, schedule in schedules.items():
            check_name(kind, "kind")
            if not isinstance(schedule, Schedule):
                raise InvalidArgument(
                    f"the schedule of {kind!r} must be a tenure Schedule, "
                    f"got {type(schedule).__name__}"
                )
        now = self.core.now() if now is None else now
        rows = {row.kind: row for row in self.store.schedules()}
        return [
            self._pass(kind, schedule, rows.get(kind), now) for kind, schedule in schedules.items()
        ]

    def _pass(
        self, kind: str, schedule: Schedule, row: ScheduleRow | None, now: datetime
    ) -> SchedulePass:
        next_slot = schedule.next_after(now)
        next_in = None if next_slot is None else (next_slot - now).total_seconds()
        if row is None:
            return SchedulePass(kind, (), 0, next_in)
        jobs = []
        if row.triggered_at is not None:
            jobs.append(self._submit(kind, schedule, row.triggered_at, manual=True))
            self.store.schedule_clear_trigger(kind, row.triggered_at)
        if row.paused:
            return SchedulePass(kind, tuple(jobs), 0, next_in)
        due = schedule.due(row.through, now)
        fired = [(slot, self._submit(kind, schedule, slot)) for slot in due.fire]
        jobs += [job_id for _, job_id in fired]
        advance = Advance(
            kind=kind,
            was=row.through,
            through=due.through,
            next_slot=next_slot,
            fired=len(due.fire),
            missed=due.missed,
            last_slot=due.fire[-1] if due.fire else None,
        )
        if due.through == row.through or not self.store.schedule_advance(advance):
            # Nothing new, or another pass wrote it first (and counted the missed slots).
            return SchedulePass(kind, tuple(jobs), 0, next_in)
        if due.missed:
            emit(log, logging.WARNING, "schedule_missed", kind=kind, missed=due.missed)
            if fired and fired[0][1]:  # the first job fired (none: the log and the count)
                detail = {
                    "missed": due.missed,
                    "since": _utc(row.through),
                    "policy": schedule.missed_slots,
                }
                self._event(fired[0][1], EventType.SCHEDULE_MISSED, detail)
        return SchedulePass(kind, tuple(jobs), due.missed, next_in)

    def list(self) -> builtins.list[ScheduleRow]:
        """Every scheduled kind a worker has declared, with its next and last slot (a kind
        whose class no longer has a schedule stays listed: it is fired by no one)."""
        return self.store.schedules()

    def pause(self, kind: str) -> None:
        """Fire no slot of `kind` until `resume` (kept across restarts; the slots that pass
        meanwhile are missed, as the schedule's `missed_slots` says once resumed)."""
        self._set(kind, paused=True)

    def resume(self, kind: str) -> None:
        self._set(kind, paused=False)

    def trigger(self, kind: str) -> None:
        """Ask for one run of `kind` now, paused or not: the next pass of a worker running it
        submits it (two requests before that pass make one run)."""
        if not self.store.schedule_trigger(check_name(kind, "kind")):
            raise InvalidArgument(_unknown(kind))

    def _set(self, kind: str, *, paused: bool) -> None:
        if not self.store.schedule_pause(check_name(kind, "kind"), paused):
            raise InvalidArgument(_unknown(kind))

    def _submit(self, kind: str, schedule: Schedule, slot: datetime, manual: bool = False) -> str:
        """The slot's job (an operator's run now is keyed by the moment it was asked for)."""
        key = run_key(kind, slot) if manual else slot_key(kind, slot)
        options = SubmitOptions(idempotency_key=key, run_after=schedule.start_of(slot))
        try:
            job_id, new = self.submission.submit_or_find(kind, schedule.payload_for(slot), options)
        except IdempotencyConflict:
            # The slot's job exists with another payload (a payload function that is not a
            # function of the slot alone): the slot has its one job.
            found = self.store.find_by_key(options.tenant, key)
            return found.id if found is not None else ""
        if new:
            emit(log, logging.INFO, "schedule_fired", kind=kind, job=job_id, slot=slot.isoformat())
            self._event(job_id, EventType.SCHEDULE_FIRED, {"slot": _utc(slot), "run_now": manual})
        return job_id

    def _event(self, job_id: str, event: EventType, detail: dict[str, Any]) -> None:
        self.store.record_event(job_id, event, None, None, json.dumps(detail, sort_keys=True))


def _unknown(kind: str) -> str:
    return (
        f"no schedule for kind {kind!r}: a worker running a job class declared with "
        "schedule=... makes it"
    )


def _utc(moment: datetime | None) -> str | None:
    return None if moment is None else utc_text(moment)
