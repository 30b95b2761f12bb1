"""An app whose scheduler can be stopped in the middle of a slot, for
tests/integration/test_schedules.py: `tock` fires every second; while the file `stall` exists
in $TENURE_TEST_DIR, the slot's payload function writes the slot to `in-pass` there and never
returns, so the process is inside its pass (the slot reached, its job not yet submitted) when
the test kills it."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import tenure

app = tenure.App()
FOLDER = Path(os.environ.get("TENURE_TEST_DIR", "."))


def _slot(slot: datetime) -> dict[str, str]:
    if (FOLDER / "stall").exists():
        (FOLDER / "in-pass").write_text(slot.isoformat())
        while True:  # until SIGKILL
            time.sleep(1)
    return {"slot": slot.isoformat()}


@app.job("tock", schedule=tenure.Every(1), schedule_payload=_slot, missed_slots="all")
def tock(ctx: tenure.JobContext, payload: Any) -> Any:
    return payload
