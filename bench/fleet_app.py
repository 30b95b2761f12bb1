"""The no-op job class that `tenure worker` processes run in bench/fleet.py."""

from __future__ import annotations

from typing import Any

import tenure

app = tenure.App()


@app.job("short")
def short(ctx: tenure.JobContext, payload: Any) -> None:
    return None
