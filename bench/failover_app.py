"""Job classes for bench/failover.py: the default class and a short one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import tenure

DIR = Path(os.environ.get("TENURE_BENCH_DIR", "."))
app = tenure.App()


def hold(ctx: tenure.JobContext, payload: Any) -> str:
    """Announce the start (this process's pid), then work until told to stop."""
    (DIR / f"started-{os.getpid()}").write_text(ctx.job_id)
    ctx.cancelled.wait(3600)
    return "stopped"


app.job("default_class")(hold)
app.job("short_class", lease=1.0, heartbeat=0.25, missed=1, jitter=0.3)(hold)


@app.job("tick")
def tick(ctx: tenure.JobContext, payload: Any) -> None:
    """A no-op for the fairness measurement."""
