"""A traced process for tests/integration/test_tracing.py: `tenure worker
tests.support.traced:app`, or `python -m tests.support.traced receiver PORT DB` (a fenced
receiver on loopback).

Each process sets the real OpenTelemetry SDK up with a span processor that writes every ended
span as one JSON line to $TENURE_TEST_SPANS (the SDK's console exporter, pointed at a file).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import tenure
from tenure.fence import FenceGuard, FenceMiddleware, headers
from tests.support.asgi import read_body, send_json

DIR = Path(os.environ.get("TENURE_TEST_DIR", "."))
RECEIVER = os.environ.get("TENURE_TEST_RECEIVER", "")


def export_spans_to(path: str) -> None:
    """Every span this process ends, one JSON object per line, in `path`."""
    spans = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's lifetime
    exporter = ConsoleSpanExporter(
        out=spans, formatter=lambda span: span.to_json(indent=None) + "\n"
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


if os.environ.get("TENURE_TEST_SPANS"):
    export_spans_to(os.environ["TENURE_TEST_SPANS"])

app = tenure.App()


@app.job(
    "traced_charge",
    lease=2.0,
    heartbeat=0.4,
    missed=1,
    jitter=0.5,
    backoff=0.01,
    labels={"tool": "payments", "model": None},
)
def traced_charge(ctx: tenure.JobContext, payload: Any) -> Any:
    """Two steps and a fenced effect. The first attempt waits inside its first step for the
    test (which pauses the process there until its lease is gone)."""

    def quote() -> dict[str, Any]:
        if ctx.attempt == 1:
            (DIR / "in-quote").write_text(str(os.getpid()))
            while not (DIR / "go").exists():
                time.sleep(0.01)
        return {"amount": payload["amount"]}

    priced = ctx.step("quote", quote)
    receipt = ctx.effect("charge", lambda fx: _charge(fx, priced["amount"]))
    return ctx.step("summary", lambda: {"receipt": receipt["receipt"]})


def _charge(fx: tenure.Effect, amount: int) -> Any:
    request = urllib.request.Request(  # noqa: S310 - the test's receiver on loopback
        f"{RECEIVER}/charge",
        data=json.dumps({"amount": amount}).encode(),
        method="POST",
        headers={**headers(fx), "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback only
        return json.loads(response.read())


async def _bank(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    """The receiver's own endpoint: answers a receipt (behind the fence middleware)."""
    amount = json.loads(await read_body(receive))["amount"]
    await send_json(send, 200, json.dumps({"receipt": f"r-{amount}"}).encode())


def serve_receiver(port: int, db: str) -> None:
    import uvicorn

    guard = FenceGuard(db)
    uvicorn.run(
        FenceMiddleware(_bank, guard, require=True),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
    )


if __name__ == "__main__" and sys.argv[1:2] == ["receiver"]:
    serve_receiver(int(sys.argv[2]), sys.argv[3])
