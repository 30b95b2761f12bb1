"""Waiters for jobs to end: one listener and one sweep per ledger, however many wait
(`ledger.wait`, the service's long-poll, MCP calls, durable tools), started on first use.

A waiter costs no statement while it waits: it reads its job when it starts, when it is woken
and at its deadline. It is woken by the end's announcement (PostgreSQL: LISTEN on the channel a
job's end and a cancel NOTIFY; SQLite: the ends made in this process) or by the sweep: one
statement that asks which of all the awaited jobs have ended, for an announcement that was
lost. The sweep runs every `SWEEP_HEARD` seconds while every process's ends are heard, and
every `SWEEP_UNHEARD` seconds while they are not (SQLite, whose other processes announce
nothing; PostgreSQL through a pooler without a LISTEN URL; a LISTEN connection being
re-opened): one statement per sweep for all the process's waiters, none when nobody waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tenure.errors import StoreUnavailable
from tenure.storage import Store

SWEEP_HEARD = 5.0
SWEEP_UNHEARD = 0.25
# Ids per sweep statement: a bound on its size, not on the waiters.
SWEEP_CHUNK = 5000


class EndedWatch:
    """Calls each waiter's callback when its job ends."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._waiters: dict[str, list[Callable[[], None]]] = {}
        self._stop_listening: Callable[[], None] | None = None
        self._started = False
        self._closed = False
        self._heard = False
        self._kick = threading.Event()
        self._sweeper: threading.Thread | None = None
        self.sweeps = 0

    def watch(self, job_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` (on the listener's or the sweep's thread: keep it short) when
        `job_id` ends; returns the function that stops watching."""
        with self._lock:
            self._waiters.setdefault(job_id, []).append(callback)
            start = not self._started and not self._closed
            self._started = True
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

    @property
    def heard(self) -> bool:
        """True while the ends of every process are announced to this one."""
        return self._heard

    def close(self) -> None:
        """Stop listening and sweeping (idempotent)."""
        with self._lock:
            self._closed = True
            stop, self._stop_listening = self._stop_listening, None
            sweeper, self._sweeper = self._sweeper, None
        self._kick.set()
        if stop is not None:
            stop()
        if sweeper is not None and sweeper is not threading.current_thread():
            sweeper.join()

    def _start(self) -> None:
        sweeper = threading.Thread(target=self._sweep_loop, name="tenure-ended-sweep", daemon=True)
        with self._lock:
            self._sweeper = sweeper
        sweeper.start()
        try:
            stop = self._store.listen_ended(self._ended, self._listening)
        except StoreUnavailable:
            return  # the sweep finds the ends meanwhile, at its faster pace
        with self._lock:
            closing = self._closed
            if not closing:
                self._stop_listening = stop
        if closing:
            stop()

    def _listening(self, heard: bool) -> None:
        self._heard = heard
        if heard:
            self._kick.set()  # ends announced while the connection was down were missed

    def _sweep_loop(self) -> None:
        while not self._closed:
            self._kick.wait(SWEEP_HEARD if self._heard else SWEEP_UNHEARD)
            self._kick.clear()
            with self._lock:
                awaited = list(self._waiters)
            if not awaited or self._closed:
                continue
            for start in range(0, len(awaited), SWEEP_CHUNK):
                try:
                    ended = self._store.ended_among(awaited[start : start + SWEEP_CHUNK])
                except StoreUnavailable:
                    break
                self.sweeps += 1
                if ended:
                    self._ended(sorted(ended))

    def _ended(self, job_ids: list[str]) -> None:
        with self._lock:
            callbacks = [cb for job_id in job_ids for cb in self._waiters.get(job_id, ())]
        for callback in callbacks:
            callback()
