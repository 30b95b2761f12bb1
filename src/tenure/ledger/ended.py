"""Waiters for jobs to end: one listener per ledger, however many wait (`ledger.wait`, the
service's long-poll), started on first use. PostgreSQL: LISTEN on the channel that a job's end
and a cancel NOTIFY; SQLite: the ends made in this process. A lost notification costs only a
waiter's fallback poll."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tenure.errors import StoreUnavailable
from tenure.storage import Store


class EndedWatch:
    """Calls each waiter's callback when its job ends."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._waiters: dict[str, list[Callable[[], None]]] = {}
        self._stop: Callable[[], None] | None = None
        self._closed = False

    def watch(self, job_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` (on the listener's thread: keep it short) when `job_id` ends;
        returns the function that stops watching."""
        with self._lock:
            self._waiters.setdefault(job_id, []).append(callback)
            start = self._stop is None and not self._closed
            if start:
                self._stop = lambda: None  # one starter; the others go on polling meanwhile
        if start:
            self._start()

        def unwatch() -> None:
            with self._lock:
                callbacks = self._waiters.get(job_id, [])
                if callback in callbacks:
                    callbacks.remove(callback)
                if not callbacks:
                    self._waiters.pop(job_id, None)

        return unwatch

    def waiting(self) -> int:
        """How many waiters are registered now."""
        with self._lock:
            return sum(len(callbacks) for callbacks in self._waiters.values())

    def close(self) -> None:
        """Stop listening (idempotent)."""
        with self._lock:
            self._closed = True
            stop, self._stop = self._stop, None
        if stop is not None:
            stop()

    def _start(self) -> None:
        try:
            stop = self._store.listen_ended(self._ended)
        except StoreUnavailable:
            with self._lock:
                self._stop = None  # the next waiter tries again; this one polls
            return
        with self._lock:
            if self._closed:
                closing = True
            else:
                closing, self._stop = False, stop
        if closing:
            stop()

    def _ended(self, job_ids: list[str]) -> None:
        with self._lock:
            callbacks = [cb for job_id in job_ids for cb in self._waiters.get(job_id, ())]
        for callback in callbacks:
            callback()
