"""LISTEN for the wake-ups that submits, releases and requeues NOTIFY (see storage.wakeup)."""

from __future__ import annotations

import logging
import threading

import psycopg
from psycopg import sql

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.logs import emit
from tenure.storage.wakeup import (
    CancelCallback,
    EndedCallback,
    ListeningCallback,
    WakeCallback,
    cancel_channel_of,
    channel_of,
    ended_channel_of,
    read_cancel,
)

log = logging.getLogger("tenure.worker")

# After a lost listening connection, try again this often; workers poll meanwhile.
_RECONNECT_SECONDS = 1.0
# A quiet listening connection is checked this often.
_PROBE_SECONDS = 5.0


class PostgresListener:
    """A thread with its own connection: LISTEN, then call back for each notification.

    A broken connection is reopened every second; notifications sent meanwhile are lost, which
    is why workers keep polling (at their poll interval) as the fallback.
    """

    def __init__(
        self,
        conninfo: str,
        schema: str,
        callback: WakeCallback | None,
        on_cancelled: CancelCallback | None = None,
        *,
        on_ended: EndedCallback | None = None,
        on_listening: ListeningCallback | None = None,
        wait: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self._conninfo = conninfo
        self._schema = schema
        self._on_listening = on_listening
        self._callback = callback
        self._on_cancelled = on_cancelled
        self._on_ended = on_ended
        self._stop = threading.Event()
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenure-pg-listen", daemon=True)
        self._thread.start()
        # Listening before the caller's first claim: a job submitted in between wakes it.
        # Not connected within `wait`: go on (the worker polls) while the thread keeps trying.
        self.connected.wait(wait)

    def _run(self) -> None:
        failures = 0  # in a row: the first is a warning, the rest (every second) are not
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    # The store's schema, read through the store: a LISTEN URL of its own
                    # (beside a pooler) need not set the same search_path.
                    schema = self._schema
                    channel, cancels = channel_of(schema), cancel_channel_of(schema)
                    ended = ended_channel_of(schema)
                    listening = [
                        name
                        for name, wanted in (
                            (channel, self._callback),
                            (cancels, self._on_cancelled or self._on_ended),
                            (ended, self._on_ended),
                        )
                        if wanted is not None
                    ]
                    for name in listening:
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
                    self.connected.set()
                    failures = 0
                    if self._on_listening is not None:
                        self._on_listening(True)
                    emit(log, logging.DEBUG, "listen_started", channel=listening[0])
                    probed = self._clock.monotonic()
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self._dispatch(note.channel, note.payload, cancels, ended)
                        if self._clock.monotonic() - probed > _PROBE_SECONDS:
                            # A reset connection is not reported by notifies() itself; a
                            # round trip finds it (and tcp_user_timeout a silent one).
                            conn.execute("SELECT 1")
                            probed = self._clock.monotonic()
            except psycopg.Error as exc:
                self.connected.clear()
                if self._on_listening is not None:
                    self._on_listening(False)
                if self._stop.is_set():
                    return
                failures += 1
                # A standby refuses LISTEN ("cannot execute LISTEN during recovery") until the
                # failover ends: one warning, not one a second.
                level = logging.WARNING if failures == 1 else logging.DEBUG
                emit(log, level, "listen_lost", error_type=type(exc).__name__, failures=failures)
                self._stop.wait(_RECONNECT_SECONDS)

    def _dispatch(self, channel: str, payload: str, cancels: str, ended: str) -> None:
        if channel == ended:
            if self._on_ended is not None:
                self._on_ended(payload.split(","))
        elif channel == cancels:
            if self._on_cancelled is not None:
                read_cancel(payload, self._on_cancelled)
            if self._on_ended is not None:
                self._on_ended([payload.rpartition(":")[0]])
        elif self._callback is not None:
            self._callback(payload)

    def close(self) -> None:
        """Stop listening and close the connection (within about half a second)."""
        self._stop.set()
        self._thread.join()
