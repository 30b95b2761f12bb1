"""The job classes bench/rates.py's worker processes run: `limited`, claimed at most
`$BENCH_RATE` times a second across every worker of the database, and `free`, unlimited."""

from __future__ import annotations

import os
from typing import Any

import tenure

app = tenure.App()
RATE = int(os.environ.get("BENCH_RATE", "50"))


@app.job("limited", rate=tenure.Rate(RATE, per=1.0))
def limited(ctx: tenure.JobContext, payload: Any) -> None:
    return None


@app.job("free")
def free(ctx: tenure.JobContext, payload: Any) -> None:
    return None
