"""An app with one scheduled kind, for tests/integration/test_schedules.py's worker
processes: `tick` fires every second, its payload the slot's time (a slot that a busy machine
reaches late still runs: missed_slots="all")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import tenure

app = tenure.App()


def _slot(slot: datetime) -> dict[str, str]:
    return {"slot": slot.isoformat()}


@app.job("tick", schedule=tenure.Every(1), schedule_payload=_slot, missed_slots="all")
def tick(ctx: tenure.JobContext, payload: Any) -> Any:
    return payload
