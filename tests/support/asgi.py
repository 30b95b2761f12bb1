"""The two halves of a tiny ASGI receiver the fence tests serve: read a request's body, send a
JSON answer."""

from __future__ import annotations

from typing import Any


async def read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


async def send_json(send: Any, status: int, data: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": data})
