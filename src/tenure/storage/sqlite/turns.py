"""Write turns shared by every process on one SQLite file.

SQLite's busy handler makes a waiting writer sleep (1, 2, 5 … 100 ms) and try again; a process
that commits and begins again at once retakes the lock while the other sleeps, so one worker
process can starve another. Before BEGIN IMMEDIATE, each tenure writer takes an exclusive
`flock` on a sidecar file (`<db>-turn`): the kernel queues the waiters and wakes one as soon as
the lock is released, so processes take turns. Within a process a thread lock comes first
(`flock` does not exclude threads sharing one open file).

A blocking `flock` has no timeout, and a holder may be paused (SIGSTOP) or hung: a waiter
that finds the lock taken hands the blocking call to a helper thread and waits for it with the
store's timeout, like the busy timeout it stands in for.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager

try:
    import fcntl
except ImportError:  # Windows: no flock; SQLite's busy handler alone decides
    fcntl = None  # type: ignore[assignment]

from tenure.errors import StoreUnavailable


class _Request:
    def __init__(self) -> None:
        self.granted = threading.Event()
        self.abandoned = False
        self.lock = threading.Lock()


class WriteTurns:
    """`with turns.hold():` around one write transaction."""

    def __init__(self, db_path: str, timeout: float) -> None:
        self._timeout = timeout
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        if fcntl is not None:
            self._fd = os.open(f"{db_path}-turn", os.O_RDWR | os.O_CREAT, 0o644)
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._helper: threading.Thread | None = None
        # Requests the helper has not finished: while one is pending (an abandoned one, still
        # blocked in flock), a direct flock on the shared descriptor would be wrongly granted.
        self._state = threading.Lock()
        self._pending = 0
        self._holding = False
        self._closing = False

    @contextmanager
    def hold(self) -> Iterator[None]:
        """This process's and then this file's write turn, or StoreUnavailable on timeout."""
        if not self._thread_lock.acquire(timeout=self._timeout):
            raise StoreUnavailable(f"no write turn within {self._timeout:g}s (this process)")
        try:
            fd = self._take_file_turn()
            try:
                yield
            finally:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    with self._state:
                        self._holding = False
                        self._close_if_done()
        finally:
            self._thread_lock.release()

    def _take_file_turn(self) -> int | None:
        with self._state:
            fd = self._fd
            if fd is None or self._closing:
                return None
            if not self._pending:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    self._holding = True
                    return fd
                except BlockingIOError:
                    pass
            self._pending += 1
            if self._helper is None:
                self._helper = threading.Thread(
                    target=self._wait_for_turns, args=(fd,), name="tenure-sqlite-turn", daemon=True
                )
                self._helper.start()
        request = _Request()
        self._requests.put(request)
        request.granted.wait(self._timeout)
        with request.lock:
            if request.granted.is_set():
                return fd
            request.abandoned = True
        raise StoreUnavailable(
            f"no write turn within {self._timeout:g}s: another process holds the database"
        )

    def _wait_for_turns(self, fd: int) -> None:
        while True:
            request = self._requests.get()
            if request is None:
                return
            fcntl.flock(fd, fcntl.LOCK_EX)
            with request.lock:
                if request.abandoned:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                else:
                    with self._state:
                        self._holding = True
                    request.granted.set()
            with self._state:
                self._pending -= 1
                if self._close_if_done():
                    return

    def close(self) -> None:
        """Close the sidecar file (after a blocked helper, if any, returns)."""
        with self._state:
            self._closing = True
            self._close_if_done()
            if self._helper is not None:
                self._requests.put(None)

    def _close_if_done(self) -> bool:
        """Under `_state`: close the file once closing and nobody holds or waits."""
        if not self._closing or self._pending or self._holding:
            return False
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        return True
