"""A TCP proxy on loopback that the demo, the fault tests and the chaos harness own: it can
cut a worker off its database or turn the path into a blackhole."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a TCP address or a Unix socket path.

    `cut()` resets every connection and refuses new ones (a dead network path that errors);
    `blackhole()` keeps sockets open but forwards nothing (a silent database);
    `restore()` forwards again.
    """

    def __init__(self, upstream: tuple[str, int] | str) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._mode = "forward"
        # Connections refused while cut: a client that tried to reconnect shows up here.
        self.refused = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    @property
    def mode(self) -> str:
        """forward, cut or blackhole."""
        return self._mode

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.upstream, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.upstream)
            return sock
        return socket.create_connection(self.upstream)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._mode == "cut":
                _reset(client)
                with self._lock:
                    self.refused += 1
                continue
            with self._lock:
                self._sockets.add(client)
            if self._mode == "blackhole":
                continue
            try:
                server = self._connect_upstream()
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._sockets.add(server)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                while self._mode == "blackhole" and not self._closed:
                    # Hold the bytes: the peer hears nothing until restore() or cut().
                    threading.Event().wait(0.01)
                if self._mode == "cut" or self._closed:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Reset every open connection and refuse new ones."""
        self._mode = "cut"
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            _reset(sock)

    def blackhole(self) -> None:
        """Keep connections open but let nothing through, either way."""
        self._mode = "blackhole"

    def restore(self) -> None:
        """Forward again (connections that were cut stay dead; new ones work)."""
        self._mode = "forward"

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self._closed = True
        self.cut()
        self._listener.close()


def _reset(sock: socket.socket) -> None:
    """Drop a connection with a reset. A pump thread may be blocked in `recv` on it: closing
    the descriptor alone would not wake it, and the socket would live on inside that call (the
    peer never told, a database backend left waiting mid-statement with its locks). Shutting
    the read side first wakes the call (sending nothing), so the close takes effect."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def proxy_to(upstream: tuple[str, int] | str) -> Iterator[TcpProxy]:
    """A proxy for the duration of the block."""
    proxy = TcpProxy(upstream)
    try:
        yield proxy
    finally:
        proxy.close()
