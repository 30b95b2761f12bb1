"""The no-op job class that `tenure worker` processes drain in bench/run.py's process drains."""

from __future__ import annotations

from typing import Any

import tenure

app = tenure.App()


@app.job("noop")
def noop(ctx: tenure.JobContext, payload: Any) -> None:
    return None
