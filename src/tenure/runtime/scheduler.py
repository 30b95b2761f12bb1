"""A worker's scheduler: for the scheduled kinds the worker runs, declare each schedule at
start, then pass over their due slots (`Schedules.fire_due`), waking at the next slot by the
database's clock and at least every MAX_NAP seconds (so that a pause, a trigger or a slot
another worker fired is seen). Every worker runs one: a slot's job is keyed by the slot, so
their passes make one job per slot, and a worker that dies leaves the next pass to the rest."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Protocol

from tenure.logs import emit
from tenure.schedules import Schedule, SchedulePass

log = logging.getLogger("tenure.worker")
MAX_NAP = 5.0
MIN_NAP = 0.2


class Firing(Protocol):
    """What a scheduler asks of the ledger (`ledger.operations.schedules`)."""

    def declare(self, kind: str, schedule: Schedule) -> None: ...

    def fire_all(self, schedules: Mapping[str, Schedule]) -> list[SchedulePass]: ...


class Scheduler:
    def __init__(
        self,
        schedules: Firing,
        kinds: Mapping[str, Schedule],
        stopping: threading.Event,
        worker_id: str,
    ) -> None:
        self.schedules = schedules
        self.kinds = dict(kinds)
        self.stopping = stopping
        self.worker_id = worker_id

    def run(self) -> None:
        declared: set[str] = set()
        nap = 0.0
        while not self.stopping.wait(nap):
            nap = MAX_NAP
            for kind, schedule in self.kinds.items():
                if kind not in declared and self._declared(kind, schedule):
                    declared.add(kind)
            try:
                passes = self.schedules.fire_all(self.kinds)
            except Exception:  # each kind alone, so that one that fails fails alone
                passes = [p for kind in self.kinds if (p := self._one(kind)) is not None]
            for done in passes:
                if done.next_in is not None:
                    nap = max(MIN_NAP, min(nap, done.next_in))

    def _declared(self, kind: str, schedule: Schedule) -> bool:
        try:
            self.schedules.declare(kind, schedule)
        except Exception as exc:  # the database away: the next pass declares it
            self._failed(kind, exc)
            return False
        return True

    def _one(self, kind: str) -> SchedulePass | None:
        """One kind's pass; its failure (the database away or refusing, a payload function
        that raised) is logged and the next pass tries again: a scheduler never stops its
        worker."""
        try:
            return self.schedules.fire_all({kind: self.kinds[kind]})[0]
        except Exception as exc:
            self._failed(kind, exc)
            return None

    def _failed(self, kind: str, exc: Exception) -> None:
        emit(
            log,
            logging.WARNING,
            "schedule_pass_failed",
            worker=self.worker_id,
            kind=kind,
            error_type=type(exc).__name__,
        )
