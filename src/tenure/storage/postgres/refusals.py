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

from tenure.errors import StoreUnavailable
from tenure.storage.postgres.urls import explain_connect_error

POOL_NAME = "tenure"


class ConnectRefusals:
    """The last refusal since a connection last succeeded, for one store's pool."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._last: psycopg.Error | None = None
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

    def unavailable(self, exc: psycopg_pool.PoolTimeout, waited: str) -> StoreUnavailable:
        """The error for a wait for a connection that timed out: the refusal's reason when the
        pool's attempts were refused, else the pool's own words (every connection busy)."""
        with self._lock:
            last = self._last
        if last is None:
            return StoreUnavailable(f"no connection to {self._where} {waited}: {exc}")
        return StoreUnavailable(
            f"no connection to {self._where} {waited}: {explain_connect_error(last, self._where)}"
        )


class _QuietTenurePools(logging.Filter):
    """Drops psycopg_pool's warnings about connection attempts of tenure's pools: their
    reason reaches the caller in `StoreUnavailable`, in tenure's words."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or not args or args[0] != POOL_NAME:
            return True
        return not str(record.msg).startswith(("error connecting", "reconnection attempt"))


_quiet = _QuietTenurePools()
logging.getLogger("psycopg.pool").addFilter(_quiet)
