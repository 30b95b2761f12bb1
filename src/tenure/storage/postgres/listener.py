"""LISTEN for the wake-ups that submits, releases and requeues NOTIFY (see storage.wakeup)."""

from __future__ import annotations

import logging
import threading
import time

import psycopg
from psycopg import sql

from tenure.logs import emit
from tenure.storage.wakeup import (
    CancelCallback,
    WakeCallback,
    cancel_channel_of,
    channel_of,
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
        callback: WakeCallback,
        on_cancelled: CancelCallback | None = None,
        *,
        wait: float = 5.0,
    ) -> None:
        self._conninfo = conninfo
        self._callback = callback
        self._on_cancelled = on_cancelled
        self._stop = threading.Event()
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenure-pg-listen", daemon=True)
        self._thread.start()
        # Listening before the caller's first claim: a job submitted in between wakes it.
        # Not connected within `wait`: go on (the worker polls) while the thread keeps trying.
        self.connected.wait(wait)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    row = conn.execute("SELECT current_schema()").fetchone()
                    schema = str(row[0]) if row else "public"
                    channel, cancels = channel_of(schema), cancel_channel_of(schema)
                    for name in (channel, cancels) if self._on_cancelled else (channel,):
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
                    self.connected.set()
                    emit(log, logging.DEBUG, "listen_started", channel=channel)
                    probed = time.monotonic()
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            if note.channel == cancels and self._on_cancelled is not None:
                                read_cancel(note.payload, self._on_cancelled)
                            else:
                                self._callback(note.payload)
                        if time.monotonic() - probed > _PROBE_SECONDS:
                            # A reset connection is not reported by notifies() itself; a
                            # round trip finds it (and tcp_user_timeout a silent one).
                            conn.execute("SELECT 1")
                            probed = time.monotonic()
            except psycopg.Error as exc:
                self.connected.clear()
                if self._stop.is_set():
                    return
                emit(log, logging.WARNING, "listen_lost", error_type=type(exc).__name__)
                self._stop.wait(_RECONNECT_SECONDS)

    def close(self) -> None:
        """Stop listening and close the connection (within about half a second)."""
        self._stop.set()
        self._thread.join()
