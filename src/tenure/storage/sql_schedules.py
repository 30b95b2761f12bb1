"""The schedules aggregate written once for both SQL dialects (named queries `schedule_*`)."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import Any

from tenure.storage.schedules import Advance, ScheduleRow, ScheduleStore
from tenure.storage.seam import SqlSeam


class SqlSchedules(ScheduleStore, SqlSeam):
    """`ScheduleStore` over the dialect seam of `SqlStore`."""

    @abstractmethod
    def _time_param(self, when: datetime) -> Any:
        """A time as the dialect binds it."""

    def _when(self, when: datetime | None) -> Any:
        return None if when is None else self._time_param(when)

    def _maybe_time(self, value: Any) -> datetime | None:
        return None if value is None else self.decode.time(value)

    def schedules(self) -> list[ScheduleRow]:
        return [
            ScheduleRow(
                kind=str(row["kind"]),
                description=str(row["description"]),
                paused=bool(row["paused"]),
                through=self._maybe_time(row["through"]),
                next_slot=self._maybe_time(row["next_slot"]),
                last_fired_at=self._maybe_time(row["last_fired_at"]),
                last_slot=self._maybe_time(row["last_slot"]),
                fired=int(row["fired"]),
                missed=int(row["missed"]),
                triggered_at=self._maybe_time(row["triggered_at"]),
            )
            for row in self._read_rows("schedules")
        ]

    def schedule_declare(self, kind: str, description: str, next_slot: datetime | None) -> None:
        params = {"kind": kind, "description": description, "next_slot": self._when(next_slot)}
        self._write_rows("schedule_declare", params)

    def schedule_advance(self, advance: Advance) -> bool:
        params = {
            "kind": advance.kind,
            "was": self._when(advance.was),
            "through": self._when(advance.through),
            "next_slot": self._when(advance.next_slot),
            "fired": advance.fired,
            "missed": advance.missed,
            "last_slot": self._when(advance.last_slot),
        }
        return bool(self._write_rows("schedule_advance", params))

    def schedule_pause(self, kind: str, paused: bool) -> bool:
        return bool(self._write_rows("schedule_pause", {"kind": kind, "paused": paused}))

    def schedule_trigger(self, kind: str) -> bool:
        return bool(self._write_rows("schedule_trigger", {"kind": kind}))

    def schedule_clear_trigger(self, kind: str, seen: datetime) -> None:
        self._write_rows("schedule_clear_trigger", {"kind": kind, "seen": self._time_param(seen)})
