"""The PostgreSQL store's boundary for failures: a driver error as tenure's, and the notice
that says a commit's wait for the synchronous standby was cancelled."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg_pool

from tenure.errors import CommitUnconfirmed, StoreBug, StoreConflict, StoreUnavailable, TenureError


def classify(exc: BaseException, where: str) -> TenureError | None:
    """The storage boundary: a driver error as tenure's (None: not a driver error).

    Connection trouble, timeouts, a closed pool and a server that cannot write now (a standby,
    read-only) mean the database is unavailable; a constraint violation is a conflict; any
    other database error is a bug, not an outage.
    """
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return StoreUnavailable(f"no connection to {where}: {exc}")
    if isinstance(exc, psycopg_pool.PoolClosed):
        return StoreUnavailable("this ledger is closed")
    if isinstance(exc, psycopg.Error):
        return _database_error(exc, where)
    return None


def _database_error(exc: psycopg.Error, where: str) -> TenureError:
    if cannot_write_now(exc):
        return StoreUnavailable(f"{where} cannot write now (a standby, or read-only): {exc}")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return StoreUnavailable(f"{where} did not answer: {exc}")
    if isinstance(exc, psycopg.IntegrityError):
        return StoreConflict(f"{where} refused a write that breaks a constraint: {exc}")
    return StoreBug(f"{where} could not run a statement: {type(exc).__name__}: {exc}")


# read_only_sql_transaction (a standby, or default_transaction_read_only), cannot_connect_now.
_CANNOT_WRITE_STATES = frozenset({"25006", "57P03"})
# What a hot standby says where its SQLSTATE is a generic one ("cannot assign TransactionIds
# during recovery" is XX000).
_CANNOT_WRITE_WORDS = ("recovery is in progress", "during recovery", "hot standby")


def cannot_write_now(exc: psycopg.Error) -> bool:
    """The server refused because it cannot write at present (it is a standby, in recovery, or
    read-only): an unavailable primary, which a failover or an operator ends, not a bug."""
    if exc.sqlstate in _CANNOT_WRITE_STATES:
        return True
    text = str(exc).lower()
    return any(words in text for words in _CANNOT_WRITE_WORDS)


class _CommitWatch:
    """A connection's notice handler: remembers PostgreSQL's WARNING that a commit's wait for
    the synchronous standby was cancelled (`pg_cancel_backend`): the commit stands on this
    server, but a failover now could lose it. Reset before each use of the connection and
    read after it, on the one thread that holds the connection meanwhile."""

    def __init__(self) -> None:
        self.unconfirmed = False

    def __call__(self, diag: psycopg.errors.Diagnostic) -> None:
        if _sync_wait_cancelled(diag):
            self.unconfirmed = True


def _sync_wait_cancelled(diag: psycopg.errors.Diagnostic) -> bool:
    # The routine's name is not translated (the message is, with lc_messages).
    if diag.source_function == "SyncRepWaitForLSN":
        return True
    text = f"{diag.message_primary or ''} {diag.message_detail or ''}".lower()
    return "synchronous replication" in text and "committed locally" in text


class CommitWatches:
    """The notice handler of each pooled connection, and the check after its use."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._watches: weakref.WeakKeyDictionary[psycopg.Connection[Any], _CommitWatch] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def watch(self, conn: psycopg.Connection[Any]) -> None:
        """The pool's hook for each new connection: watch its notices for a commit whose wait
        for the synchronous standby was cancelled."""
        watch = _CommitWatch()
        conn.add_notice_handler(watch)
        with self._lock:
            self._watches[conn] = watch

    @contextmanager
    def confirmed(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Raise `CommitUnconfirmed` when a commit on `conn` within the block was only local:
        PostgreSQL acknowledges such a commit with a WARNING, not an error."""
        with self._lock:
            watch = self._watches.get(conn)
        if watch is not None:
            watch.unconfirmed = False
        yield
        if watch is not None and watch.unconfirmed:
            raise CommitUnconfirmed(
                f"{self._where} committed locally but the wait for its synchronous standby "
                "was cancelled (a failover now could lose the write): not acknowledged; "
                "retry it (a submit with an idempotency key finds its job)"
            )
