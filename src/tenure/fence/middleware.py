"""An ASGI middleware that puts a FenceGuard in front of a receiver's endpoints."""

from __future__ import annotations

import base64
from typing import Any

from tenure.asgi import ASGIApp, Message, Receive, Scope, Send, send_json
from tenure.errors import StaleFence, TenureError, error_body
from tenure.fence.guard import FenceGuard

FENCE, SCOPE, KEY = b"x-execution-fence", b"x-execution-scope", b"idempotency-key"
TRACEPARENT = b"traceparent"
REPLAYED = b"x-fence-replayed"
BAD_HEADERS = "bad_fence_headers"


class _NotStored(Exception):
    """A server error from the app: passed on as it is, never stored for replay."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(response["status"])
        self.response = response


class FenceMiddleware:
    """Reads `X-Execution-Fence`, `X-Execution-Scope` and `Idempotency-Key`.

    A stale fence gets 409 with the service's JSON error shape (`{"error": {"code":
    "stale_fence", "message", "scope", "fence"}}`); a repeated key gets the stored status and body
    (with `X-Fence-Replayed: true`); requests without the headers pass through, or get 428 when
    `require=True`. A 5xx answer from the app is passed on and not stored, so a retry runs again.

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
        self, command: tuple[int, str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        fence, fence_scope, key = command

        async def run() -> dict[str, Any]:
            response = await _capture(self.app, scope, receive)
            if response["status"] >= 500:
                raise _NotStored(response)
            return response

        try:
            response, replayed = await self.guard.aapply(
                fence_scope, fence, key, run, traceparent=_traceparent(scope)
            )
        except StaleFence as exc:
            body = error_body(StaleFence.error_code, str(exc), scope=fence_scope, fence=fence)
            await send_json(send, StaleFence.http_status, body)
        except _NotStored as failed:
            await _replay(send, failed.response, replayed=False)
        except TenureError as exc:
            await send_json(send, 400, error_body(BAD_HEADERS, str(exc)))
        else:
            await _replay(send, response, replayed=replayed)


def _fence_headers(scope: Scope) -> tuple[int, str, str] | None:
    """(fence, scope, key) from the request headers; None when none of them is there."""
    headers = {name.lower(): value for name, value in scope.get("headers", [])}
    present = [name for name in (FENCE, SCOPE, KEY) if name in headers]
    if not present:
        return None
    if len(present) != 3:
        raise ValueError("X-Execution-Fence, X-Execution-Scope and Idempotency-Key go together")
    try:
        return (int(headers[FENCE].decode()), headers[SCOPE].decode(), headers[KEY].decode())
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
