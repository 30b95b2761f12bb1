"""Request limits enforced before any handler runs: body size (413) and JSON only (415)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenure.asgi import send_json
from tenure.errors import error_body

_JSON_TYPES = ("application/json",)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    await send_json(send, status, error_body(code, message), close=True)


class RequestLimits:
    """ASGI middleware: a body over `max_body_bytes` is a 413 (by Content-Length at once, else
    counted as it streams), and a body whose Content-Type is not JSON is a 415."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    def _refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        """The answer to a request refused by its headers alone, or None."""
        length = _header(scope, b"content-length")
        chunked = _header(scope, b"transfer-encoding") is not None
        if length is not None and not length.isdigit():
            return 400, "bad_request", "Content-Length is not a number"
        if length is not None and int(length) > self.max_body_bytes:
            return (
                413,
                "body_too_large",
                f"the request body is over the limit of {self.max_body_bytes} bytes",
            )
        has_body = chunked or (length is not None and int(length) > 0)
        content_type = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
        if has_body and content_type not in _JSON_TYPES:
            return (
                415,
                "unsupported_media_type",
                "send the body as JSON with Content-Type: application/json",
            )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await _refuse(send, *refusal)
            return
        chunked = _header(scope, b"transfer-encoding") is not None
        too_large = f"the request body is over the limit of {self.max_body_bytes} bytes"
        if not chunked:
            await self.app(scope, receive, send)
            return
        # No length announced: read the body here (it is small by definition) and replay it.
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_body_bytes:
                await _refuse(send, 413, "body_too_large", too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)
