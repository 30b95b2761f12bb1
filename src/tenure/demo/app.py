"""The demo's job class: price an invoice, charge it at the bank (a fenced effect).

Run by `tenure worker tenure.demo.app:app` processes that `tenure demo` starts. The charge
announces itself once the lease check has passed and waits for the demo's go-ahead: the demo
stalls the worker exactly there, between the check and the send, where only the receiver's
fence can still stop a stale owner.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import tenure
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.testing.fenced import post_fenced

DIR = Path(os.environ.get("TENURE_DEMO_DIR", "."))
BANK = os.environ.get("TENURE_DEMO_BANK", "http://127.0.0.1:0")
# The demo's own kind in a SQLite file it was given, so that it claims none of the file's jobs.
KIND = os.environ.get("TENURE_DEMO_KIND", "invoice")
# The clock the jobs' waits for the demo's signal files pass on.
CLOCK: Clock = SYSTEM_CLOCK

app = tenure.App()


def bank_post(path: str, fx: tenure.Effect, body: dict[str, Any], key: str | None = None) -> Any:
    """POST to the demo's bank (`post_fenced`), with the effect's key or `key`."""
    return post_fenced(f"{BANK}{path}", fx, body, key)


def wait_for(name: str) -> None:
    while not (DIR / name).exists():
        CLOCK.sleep(0.01)


@app.job(KIND, lease=2.0, heartbeat=0.5, missed=1, jitter=0.5, backoff=0.05, stage_timeout=60)
def invoice(ctx: tenure.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """Price, then charge once; an in-doubt charge asks the bank to reconcile."""
    price = ctx.step(
        "price", lambda: {"amount_cents": payload["amount_cents"], "invoice": payload["invoice"]}
    )

    def charge(fx: tenure.Effect) -> Any:
        if fx.in_doubt:
            # An earlier owner started this charge: charge only if it never reached the bank.
            # Reconciling is its own command, so it has its own key.
            return bank_post(
                "/payments/reconcile",
                fx,
                {"original_key": fx.key, **price},
                key=f"{fx.key}:reconcile",
            )
        (DIR / f"checked-{os.getpid()}").write_text(str(fx.token))
        wait_for(f"go-{os.getpid()}")
        return bank_post("/payments", fx, price)

    payment = ctx.effect("charge", charge)
    return {"payment": payment["payment_id"], "worker_pid": os.getpid()}
