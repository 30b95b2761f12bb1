"""A client-side deadline for statements.

statement_timeout is enforced by the server, so it cannot fire when the server is unreachable
or silent (a network blackhole, a stopped process): the kernel still acknowledges what we send
and the client would wait forever. One watchdog thread per store shuts down the socket of a
connection whose statement outlives its deadline; libpq then fails the call at once, the store
reports StoreUnavailable, and the pool discards the connection.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tenure.clock import SYSTEM_CLOCK, Clock


class Watchdog:
    """Runs `on_expiry(target)` for every armed target whose deadline passes before disarm."""

    def __init__(self, on_expiry: Callable[[object], None], clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._on_expiry = on_expiry
        self._heap: list[tuple[float, int, object]] = []
        self._armed: set[int] = set()
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    @contextmanager
    def deadline(self, seconds: float, target: object) -> Iterator[None]:
        """Arm a deadline for `target` for the duration of the block."""
        ident = next(self._ids)
        with self._cond:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(
                    target=self._run, name="tenure-pg-watchdog", daemon=True
                )
                self._thread.start()
            due = self._clock.monotonic() + seconds
            # Deadlines mostly arrive in order; only one earlier than the next due needs a wake-up.
            wake = not self._heap or due < self._heap[0][0]
            heapq.heappush(self._heap, (due, ident, target))
            self._armed.add(ident)
            if wake:
                self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._armed.discard(ident)

    def stop(self) -> None:
        """Stop the thread (idempotent)."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                due, ident, target = self._heap[0]
                wait = due - self._clock.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                self._armed.discard(ident)
                self._on_expiry(target)


def sever_socket(fileno: int) -> None:
    """Shut down (not close) a socket another thread is blocked on, so its read fails now."""
    try:
        dup = socket.socket(fileno=socket.dup(fileno))
    except OSError:
        return
    try:
        dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        dup.close()
