"""An ASGI middleware that puts a FenceGuard in front of a receiver's endpoints."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any

from tenure.asgi import ASGIApp, Message, Receive, Scope, Send, send_json
from tenure.errors import StaleFence, StoreUnavailable, TenureError, error_body
from tenure.fence.guard import FenceGuard

FENCE, SCOPE, KEY = b"x-execution-fence", b"x-execution-scope", b"idempotency-key"
CLAIM = b"x-execution-claim"
TRACEPARENT = b"traceparent"
# A fence is a plain decimal: no sign, no underscores, no spaces, no other digits than ASCII.
_DIGITS = re.compile(rb"[0-9]{1,19}")
# The guard's database did not answer: the sender should retry after this many seconds.
RETRY_AFTER_SECONDS = 1
REPLAYED = b"x-fence-replayed"
BAD_HEADERS = "bad_fence_headers"


class _NotStored(Exception):
    """A server error from the app: passed on as it is, never stored for replay."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(response["status"])
        self.response = response


class FenceMiddleware:
    """Reads `X-Execution-Fence`, `X-Execution-Scope`, `Idempotency-Key` and, when the sender
    has one, `X-Execution-Claim` (the claim that holds the fence).

    A stale fence gets 409 with the service's JSON error shape (`{"error": {"code":
    "stale_fence", "message", "scope", "fence", "highest"}}`), a second holder of the highest
    token 409 with code `fence_conflict`; `tenure.fence.raise_for_refusal` turns either back
    into its exception. A repeated key gets the stored status and body (with
    `X-Fence-Replayed: true`); requests without the headers pass through, or get 428 when
    `require=True`. Malformed headers get 400 `bad_fence_headers`; the guard's database away
    gets 503 `database_unavailable` with `Retry-After`. A 5xx answer from the app is passed on
    and not stored, so a retry runs again.

    `exempt_methods` and `exempt_paths` name what `require=True` leaves alone: HTTP methods
    (reads, say `("GET", "HEAD")`) and path prefixes (say `("/healthz", "/docs")`); none by
    default. A request on an exempt path that does carry the headers is still fenced.
    """

    def __init__(
        self,
        app: ASGIApp,
        guard: FenceGuard,
        *,
        require: bool = False,
        exempt_methods: tuple[str, ...] = (),
        exempt_paths: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.guard = guard
        self.require = require
        self.exempt_methods = frozenset(method.upper() for method in exempt_methods)
        self.exempt_paths = tuple(exempt_paths)

    def _exempt(self, scope: Scope) -> bool:
        path = str(scope.get("path", ""))
        return str(scope.get("method", "")).upper() in self.exempt_methods or any(
            path == prefix or path.startswith(prefix.rstrip("/") + "/")
            for prefix in self.exempt_paths
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            command = _fence_headers(scope)
        except ValueError as exc:
            await send_json(send, 400, error_body(BAD_HEADERS, str(exc)))
            return
        if command is not None:
            await self._guarded(command, scope, receive, send)
        elif self.require and not self._exempt(scope):
            await send_json(
                send,
                428,
                error_body(
                    "fence_required",
                    "send X-Execution-Fence, X-Execution-Scope and Idempotency-Key",
                ),
            )
        else:
            await self.app(scope, receive, send)

    async def _guarded(
        self, command: _FencedRequest, scope: Scope, receive: Receive, send: Send
    ) -> None:
        async def run() -> dict[str, Any]:
            response = await _capture(self.app, scope, receive)
            if response["status"] >= 500:
                raise _NotStored(response)
            return response

        try:
            response, replayed = await self.guard.aapply(
                command.scope,
                command.token,
                command.key,
                run,
                claim=command.claim,
                traceparent=_traceparent(scope),
            )
        except StaleFence as exc:  # FenceConflict too: each answers with its own code
            body = error_body(
                exc.error_code,
                str(exc),
                scope=command.scope,
                fence=command.token,  # the wire's name for it, as the header's
                highest=exc.highest,
            )
            await send_json(send, exc.http_status, body)
        except _NotStored as failed:
            await _replay(send, failed.response, replayed=False)
        except StoreUnavailable as exc:
            body = error_body(StoreUnavailable.error_code, str(exc))
            retry = [(b"retry-after", str(RETRY_AFTER_SECONDS).encode())]
            await send_json(send, StoreUnavailable.http_status, body, headers=retry)
        except TenureError as exc:
            await send_json(send, 400, error_body(BAD_HEADERS, str(exc)))
        else:
            await _replay(send, response, replayed=replayed)


@dataclass(frozen=True, slots=True)
class _FencedRequest:
    """The fence headers of one request, parsed once."""

    token: int
    scope: str
    key: str
    claim: str | None


def _fence_headers(scope: Scope) -> _FencedRequest | None:
    """The fence headers of the request; None when none of the three is there."""
    headers: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", []):
        lowered = bytes(name).lower()
        if lowered in (FENCE, SCOPE, KEY, CLAIM) and lowered in headers:
            raise ValueError(f"{lowered.decode()} is given twice")
        headers[lowered] = bytes(value)
    present = [name for name in (FENCE, SCOPE, KEY) if name in headers]
    if not present:
        if CLAIM in headers:
            raise ValueError("X-Execution-Claim comes with the fence headers")
        return None
    if len(present) != 3:
        raise ValueError("X-Execution-Fence, X-Execution-Scope and Idempotency-Key go together")
    if not _DIGITS.fullmatch(headers[FENCE]) or int(headers[FENCE]) > 2**63 - 1:
        raise ValueError("X-Execution-Fence must be a whole number from 0 to 2^63 - 1 in digits")
    try:
        claim = headers[CLAIM].decode() if CLAIM in headers else None
        return _FencedRequest(
            int(headers[FENCE]), headers[SCOPE].decode(), headers[KEY].decode(), claim
        )
    except UnicodeDecodeError as exc:
        raise ValueError(f"fence headers must be text: {exc}") from exc


def _traceparent(scope: Scope) -> str | None:
    """The sender's trace context (a malformed one is ignored: it starts no trace)."""
    for name, value in scope.get("headers", []):
        if name.lower() == TRACEPARENT:
            return bytes(value).decode("latin-1")
    return None


async def _capture(app: ASGIApp, scope: Scope, receive: Receive) -> dict[str, Any]:
    """Run the app and keep its response as JSON-safe data."""
    status, headers, body = 500, [], bytearray()

    async def keep(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = [
                [k.decode("latin-1"), v.decode("latin-1")] for k, v in message.get("headers", [])
            ]
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    await app(scope, receive, keep)
    try:
        text, encoding = bytes(body).decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(bytes(body)).decode(), "base64"
    return {"status": status, "headers": headers, "body": text, "encoding": encoding}


async def _replay(send: Send, response: dict[str, Any], *, replayed: bool) -> None:
    body = response["body"]
    data = base64.b64decode(body) if response["encoding"] == "base64" else body.encode("utf-8")
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response["headers"]]
    if replayed:
        headers.append((REPLAYED, b"true"))
    await send({"type": "http.response.start", "status": response["status"], "headers": headers})
    await send({"type": "http.response.body", "body": data})
