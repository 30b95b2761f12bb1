"""The job class the chaos harness runs: two steps around two fenced effects.

Run by `tenure worker tenure.chaos.app:app` processes that `tenure chaos` starts.
"""

from __future__ import annotations

import os
import random
from typing import Any

import tenure
from tenure.chaos.failover import report_claim
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.testing.fenced import post_fenced

RECEIVER = os.environ.get("TENURE_CHAOS_RECEIVER", "http://127.0.0.1:0")
LEASE = float(os.environ.get("TENURE_CHAOS_LEASE", "2.0"))
# Where handlers report their claims (job, token): a token handed out twice shows up there.
CLAIMS = os.environ.get("TENURE_CHAOS_CLAIMS", "")
# The clock the jobs' simulated work passes on (a test may set one it moves).
CLOCK: Clock = SYSTEM_CLOCK

app = tenure.App()


def send(fx: tenure.Effect, path: str, body: dict[str, Any]) -> Any:
    """Send the effect to the harness's receiver (`post_fenced`)."""
    return post_fenced(f"{RECEIVER}{path}", fx, body)


# Both classes of the run: short leases (faults are felt fast), many attempts, quick backoff.
POLICY: dict[str, Any] = {
    "lease": LEASE,
    "heartbeat": LEASE / 4,
    "missed": 1,
    "jitter": LEASE / 4,
    "max_attempts": 25,
    "backoff": 0.05,
    "backoff_cap": 1.0,
    "stage_timeout": 30,
}


@app.job("chaos.order", **POLICY)
def order(ctx: tenure.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """fetch (a step), charge and receipt (two effects: two commands of one holder, so that a
    second holder of the same token would be seen by the receiver as a new command, not a
    replay), summarise (a step); each takes a little while."""
    rng = random.Random(payload["seed"] * 1000 + ctx.attempt)
    if CLAIMS:
        report_claim(CLAIMS, ctx.job_id, ctx.token)

    def work(result: Any) -> Any:
        CLOCK.sleep(rng.uniform(0.02, 0.2))
        return result

    fetched = ctx.step("fetch", lambda: work({"amount": payload["amount"]}))
    payment = ctx.effect("charge", lambda fx: send(fx, "/payments", fetched))
    ctx.effect("receipt", lambda fx: send(fx, "/receipts", {"payment": payment["payment_id"]}))
    ctx.step("summarise", lambda: work(None))
    return {"payment": payment["payment_id"], "token": ctx.token}


@app.job("chaos.parent", spawns=["chaos.order"], **POLICY)
def parent(ctx: tenure.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """Waits for the harness's signal, spawns one order as a child, waits for it, sleeps."""
    ctx.step("plan", lambda: {"seed": payload["seed"]})
    go = ctx.wait_for("go", timeout=600)
    child = ctx.spawn("chaos.order", {"seed": payload["seed"], "amount": payload["amount"]})
    result = ctx.wait_job(child, timeout=600)
    ctx.sleep(payload["nap"])
    return {"child": child, "payment": result["payment"], "go": go, "token": ctx.token}
