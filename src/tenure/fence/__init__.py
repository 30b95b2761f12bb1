"""The receiver side of fencing: `FenceGuard`, `FenceMiddleware`, and the sender's `headers`
and `raise_for_refusal`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tenure.errors import FenceConflict, StaleFence
from tenure.fence.guard import FenceGuard, Recorded, ledger_tokens
from tenure.fence.middleware import FenceMiddleware
from tenure.types import Effect

__all__ = [
    "FenceConflict",
    "FenceGuard",
    "FenceMiddleware",
    "Recorded",
    "StaleFence",
    "headers",
    "ledger_tokens",
    "raise_for_refusal",
]


def headers(fx: Effect, scope: str | None = None) -> dict[str, str]:
    """The headers a receiver behind `FenceMiddleware` expects, from an effect's `fx`.

    Works with httpx and requests alike: `client.post(url, json=…, headers=headers(fx))`.
    The scope defaults to the job id, the unit whose highest fence the receiver keeps;
    `X-Execution-Claim` names the claim that holds the fence, so that a receiver refuses a
    second holder of the same token. With tracing on (`tenure[otel]`), `traceparent` carries
    the effect's span.
    """
    sent = {
        "Idempotency-Key": fx.key,
        "X-Execution-Fence": str(fx.token),
        "X-Execution-Scope": scope or fx.job_id,
    }
    if fx.claim:
        sent["X-Execution-Claim"] = fx.claim
    if fx.traceparent is not None:  # the effect's span: the receiver continues the trace
        sent["traceparent"] = fx.traceparent
    return sent


def raise_for_refusal(status: int, body: bytes | str | Mapping[str, Any] | None) -> None:
    """Raise what a receiver's refusal means, from its answer: `FenceConflict` or `StaleFence`
    (with the receiver's highest token) for a 409 in `FenceMiddleware`'s shape; nothing for
    any other answer. Raised out of an effect, either tells the worker to stop and, when the
    receiver has seen this token from another claim, to put the job's next claim above it:

        response = client.post(url, json=order, headers=headers(fx))
        raise_for_refusal(response.status_code, response.content)
    """
    if status != 409:
        return
    error = _error_of(body)
    code = error.get("code")
    if code not in (StaleFence.error_code, FenceConflict.error_code):
        return
    highest, token = error.get("highest"), error.get("fence")
    refusal = FenceConflict if code == FenceConflict.error_code else StaleFence
    raise refusal(
        str(error.get("message") or code),
        highest=highest if _is_token(highest) else None,
        scope=error.get("scope") if isinstance(error.get("scope"), str) else None,
        token=token if _is_token(token) else None,
    )


def _error_of(body: bytes | str | Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The `error` object of a JSON error body, or an empty one."""
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            return {}
    error = body.get("error") if isinstance(body, Mapping) else None
    return error if isinstance(error, Mapping) else {}


def _is_token(value: object) -> bool:
    return type(value) is int and 0 <= value < 2**63
