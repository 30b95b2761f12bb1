"""What every part that writes a job's events outside a state change asks of a store."""

from __future__ import annotations

from typing import Protocol

from tenure.types import EventType


class EventRecorder(Protocol):
    """Appends one event to a job's flight recorder."""

    def record_event(
        self,
        job_id: str,
        type: EventType,
        token: int | None,
        owner_id: str | None,
        detail_json: str,
    ) -> bool:
        """Append an event in its own transaction; False if the job does not exist."""
        ...
