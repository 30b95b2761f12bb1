"""The fault proxy ends what it cuts: when it cuts or closes, the upstream end of each
connection hears it, even while a pump thread is blocked reading that socket (a database
backend left waiting for the rest of a statement would keep its locks forever)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tenure.testing.proxy import TcpProxy, proxy_to
from tests.support.waiting import poll


class Upstream:
    """A server that accepts one connection and records what it reads, ending with b"" (the
    peer's end) or the name of the error that ended it."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.read: list[bytes | str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(20)
        with conn:
            while True:
                try:
                    data = conn.recv(100)
                except OSError as exc:
                    self.read.append(type(exc).__name__)
                    return
                self.read.append(data)
                if not data:
                    return

    def ended(self) -> bool:
        self.thread.join(10)
        return not self.thread.is_alive()


@contextmanager
def upstream(kind: str, tmp_path: Path) -> Iterator[tuple[Upstream, tuple[str, int] | str]]:
    if kind == "unix":
        path = str(tmp_path / "upstream.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        address: tuple[str, int] | str = path
    else:
        listener = socket.create_server(("127.0.0.1", 0))
        address = listener.getsockname()[:2]
    listener.listen()
    with listener:
        yield Upstream(listener), address


def _half_sent(proxy: TcpProxy, server: Upstream) -> socket.socket:
    """A client whose first bytes reached the upstream, the rest never sent (a statement cut
    in the middle): the proxy's upstream pump is now blocked reading the server."""
    client = socket.create_connection(("127.0.0.1", proxy.port))
    client.sendall(b"half a message")
    poll(lambda: server.read, 10, "the upstream to read the first bytes")
    return client


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_closing_the_proxy_ends_the_upstream_connection(kind: str, tmp_path: Path) -> None:
    with upstream(kind, tmp_path) as (server, address):
        with proxy_to(address) as proxy:
            client = _half_sent(proxy, server)
        with client:  # the client is still alive, as a worker would be
            assert server.ended(), "the upstream was never told the connection ended"
            assert server.read[0] == b"half a message"
            assert server.read[-1] in (b"", "ConnectionResetError")


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_a_cut_ends_both_sides(kind: str, tmp_path: Path) -> None:
    with upstream(kind, tmp_path) as (server, address), proxy_to(address) as proxy:
        client = _half_sent(proxy, server)
        with client:
            proxy.cut()
            assert server.ended(), "the upstream was never told the connection was cut"
            assert server.read[-1] in (b"", "ConnectionResetError")
            client.settimeout(10)
            try:
                heard: bytes | str = client.recv(100)
            except ConnectionResetError as exc:  # a reset, as a dead path gives
                heard = type(exc).__name__
            assert heard in (b"", "ConnectionResetError")
