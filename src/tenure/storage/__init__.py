"""Storage backends. `open_store` is the only place that names both of them."""

from __future__ import annotations

from tenure.errors import UnsupportedDatabase
from tenure.storage.base import FenceRecord, FenceTx, KeyedJob, NewJob, Store

__all__ = ["FenceRecord", "FenceTx", "KeyedJob", "NewJob", "Store", "open_store"]

SQLITE_PREFIX = "sqlite://"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


def open_store(url: str, *, timeout: float = 5.0, pool_size: int = 4) -> Store:
    """Open the store a URL names: `sqlite:///path.db` or `postgresql://user@host/db`.

    `timeout` bounds connecting, waiting for a lock and each statement, in seconds.
    """
    if not isinstance(url, str) or not url:
        raise UnsupportedDatabase("the database URL must be a non-empty string")
    if url.startswith(SQLITE_PREFIX):
        from tenure.storage.sqlite.store import SqliteStore

        return SqliteStore(url, timeout=timeout)
    if url.startswith(POSTGRES_PREFIXES):
        from tenure.storage.postgres.store import PostgresStore

        return PostgresStore(url, timeout=timeout, pool_size=pool_size)
    if url.startswith("sqlite:"):
        raise UnsupportedDatabase(
            f"{url!r} is missing the slashes: a SQLite URL is sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise UnsupportedDatabase(
        f"unknown database URL scheme {scheme!r}: use sqlite:///path/to/file.db "
        "or postgresql://user@host/dbname"
    )
