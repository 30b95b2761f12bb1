"""Why the pool could not connect. The pool opens connections in the background and, when a
pooler or the server refuses one (PgBouncer's "no more connections allowed (max_client_conn)",
PostgreSQL's "too many clients"), only logs it; a caller then waits out its timeout and hears
"couldn't get a connection". Each refusal is remembered here until the next connection
succeeds, so that the caller's `StoreUnavailable` carries the pooler's or server's reason, and
the pool's own warning lines for tenure's pools stay out of the application's log."""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import DictRow

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import StoreUnavailable
from tenure.storage.postgres.urls import explain_connect_error

POOL_NAME = "tenure"


class ConnectRefusals:
    """The last refusal since a connection last succeeded, for one store's pool, and when it
    came (by `clock`): a refusal older than the wait that timed out is not its reason."""

    def __init__(self, where: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self._where = where
        self._clock = clock
        self._last: psycopg.Error | None = None
        self._noted_at = 0.0
        self._lock = threading.Lock()

    def connection_class(self) -> type[psycopg.Connection[DictRow]]:
        """The pool's connection class: psycopg's, noting each refusal here."""
        refusals = self

        class NotingConnection(psycopg.Connection[DictRow]):
            @classmethod
            def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
                try:
                    connection = super().connect(conninfo, **kwargs)
                except psycopg.Error as exc:
                    refusals._note(exc)
                    raise
                refusals._note(None)
                return connection

        return NotingConnection

    def _note(self, error: psycopg.Error | None) -> None:
        with self._lock:
            self._last = error
            self._noted_at = self._clock.monotonic()

    def unavailable(self, exc: psycopg_pool.PoolTimeout, waited: float) -> StoreUnavailable:
        """The error for a wait of `waited` seconds for a connection that timed out: the
        reason of a refusal during that wait, else the pool's own words (every connection
        busy)."""
        with self._lock:
            recent = self._clock.monotonic() - self._noted_at <= waited + 1.0
            last = self._last if recent else None
        if last is None:
            return StoreUnavailable(f"no connection to {self._where} within {waited:g}s: {exc}")
        return StoreUnavailable(
            f"no connection to {self._where} within {waited:g}s: "
            f"{explain_connect_error(last, self._where)}"
        )


class _QuietTenurePools(logging.Filter):
    """Drops psycopg_pool's warning for each failed connection attempt of tenure's pools (the
    driver's text, once per retry): its reason reaches the caller in `StoreUnavailable`, in
    tenure's words. The pool's line when it gives up retrying stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or not args or args[0] != POOL_NAME:
            return True
        return not str(record.msg).startswith("error connecting")


_quiet = _QuietTenurePools()
logging.getLogger("psycopg.pool").addFilter(_quiet)
