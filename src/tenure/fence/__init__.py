"""The receiver side of fencing: `FenceGuard`, `FenceMiddleware` and the client's `headers`."""

from __future__ import annotations

from tenure.errors import StaleFence
from tenure.fence.guard import FenceGuard, Recorded, ledger_tokens
from tenure.fence.middleware import FenceMiddleware
from tenure.types import Effect

__all__ = ["FenceGuard", "FenceMiddleware", "Recorded", "StaleFence", "headers", "ledger_tokens"]


def headers(fx: Effect, scope: str | None = None) -> dict[str, str]:
    """The headers a receiver behind `FenceMiddleware` expects, from an effect's `fx`.

    Works with httpx and requests alike: `client.post(url, json=…, headers=headers(fx))`.
    The scope defaults to the job id, the unit whose highest fence the receiver keeps. With
    tracing on (`tenure[otel]`), `traceparent` carries the effect's span.
    """
    sent = {
        "Idempotency-Key": fx.key,
        "X-Execution-Fence": str(fx.fence),
        "X-Execution-Scope": scope or fx.job_id,
    }
    if fx.traceparent is not None:  # the effect's span: the receiver continues the trace
        sent["traceparent"] = fx.traceparent
    return sent
