"""The demo's job class: price an invoice, charge it at the bank (a fenced effect).

Run by `tenure worker tenure.demo.app:app` processes that `tenure demo` starts. The charge
announces itself once the lease check has passed and waits for the demo's go-ahead: the demo
stalls the worker exactly there, between the check and the send, where only the receiver's
fence can still stop a stale owner.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import tenure
from tenure.fence import headers, raise_for_refusal

DIR = Path(os.environ.get("TENURE_DEMO_DIR", "."))
BANK = os.environ.get("TENURE_DEMO_BANK", "http://127.0.0.1:0")

app = tenure.App()


def bank_post(path: str, fx: tenure.Effect, body: dict[str, Any], key: str | None = None) -> Any:
    """POST to the bank with the effect's key (or `key`), fence, scope and claim; a refusal
    is StaleFence (or FenceConflict), with the bank's highest token."""
    fenced = {**headers(fx), **({"Idempotency-Key": key} if key else {})}
    request = urllib.request.Request(  # noqa: S310 - the demo's own bank on loopback
        f"{BANK}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **fenced},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise_for_refusal(exc.code, exc.read())
        raise


def wait_for(name: str) -> None:
    while not (DIR / name).exists():
        time.sleep(0.01)


@app.job("invoice", lease=2.0, heartbeat=0.5, missed=1, jitter=0.5, backoff=0.05, stage_timeout=60)
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
        (DIR / f"checked-{os.getpid()}").write_text(str(fx.fence))
        wait_for(f"go-{os.getpid()}")
        return bank_post("/payments", fx, price)

    payment = ctx.effect("charge", charge)
    return {"payment": payment["payment_id"], "worker_pid": os.getpid()}
