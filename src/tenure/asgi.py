"""The one way tenure's ASGI middlewares answer with JSON themselves (the service's request
limits, the fence receiver's middleware), without any web framework."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def send_json(
    send: Send,
    status: int,
    payload: Any,
    *,
    close: bool = False,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """A whole response: `payload` as JSON with its length, `headers` added (and `Connection:
    close` when the rest of the request body will not be read)."""
    data = json.dumps(payload).encode()
    length = str(len(data)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", length),
        *(headers or []),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
