"""`tenure serve`'s application on a real uvicorn server on loopback, in a background thread."""

from __future__ import annotations

import socket
import threading
from types import TracebackType

import httpx
import uvicorn

import tenure
from tenure.service import ServiceSettings, create_app
from tests.support.waiting import poll


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """`with LiveServer(ledger) as server:` serves on `server.url` until the block ends."""

    def __init__(self, ledger: tenure.Ledger, settings: ServiceSettings | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            create_app(ledger, settings),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self._thread.start()
        poll(lambda: self._server.started, 10, "the server to start")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)
        assert not self._thread.is_alive(), "the server did not stop"

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)
