"""Storage backends. `open_store` is the only place that names both of them."""

from __future__ import annotations

import os

from tenure.database_url import shown_url
from tenure.errors import UnsupportedDatabase
from tenure.storage.base import (
    FenceRecord,
    FenceStatus,
    FenceStore,
    FenceTx,
    KeyedJob,
    NewJob,
    Store,
)
from tenure.storage.migrate import FENCES

__all__ = [
    "FENCES",
    "FenceRecord",
    "FenceStatus",
    "FenceStore",
    "FenceTx",
    "KeyedJob",
    "NewJob",
    "Store",
    "check_url",
    "open_store",
]

SQLITE_PREFIX = "sqlite://"
LISTEN_URL_ENV = "TENURE_LISTEN_URL"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


def open_store(
    url: str, *, timeout: float = 5.0, pool_size: int = 4, listen_url: str | None = None
) -> Store:
    """Open the store a URL names: `sqlite:///path.db` or `postgresql://user@host/db`.

    `timeout` bounds connecting, waiting for a lock and each statement, in seconds.
    `listen_url` (PostgreSQL) names a direct connection for LISTEN when `url` is a pooler's;
    without it, `$TENURE_LISTEN_URL`.
    """
    check_url(url)
    if listen_url is not None and (not isinstance(listen_url, str) or not listen_url):
        raise UnsupportedDatabase("the LISTEN URL must be a non-empty string")
    if url.startswith(SQLITE_PREFIX):
        if listen_url is not None:
            raise UnsupportedDatabase(
                "a LISTEN URL is for PostgreSQL behind a pooler; SQLite has no LISTEN"
            )
        from tenure.storage.sqlite.store import SqliteStore

        return SqliteStore(url, timeout=timeout)
    from tenure.storage.postgres.store import PostgresStore

    listen_url = listen_url or os.environ.get(LISTEN_URL_ENV) or None
    if listen_url is not None and not listen_url.startswith(POSTGRES_PREFIXES):
        raise UnsupportedDatabase(
            f"the LISTEN URL must be a postgresql:// URL of the same database, got "
            f"{_scheme_of(listen_url)!r}"
        )
    return PostgresStore(url, timeout=timeout, pool_size=pool_size, listen_url=listen_url)


def check_url(url: str) -> None:
    """Refuse a database URL tenure cannot use (`UnsupportedDatabase`), before connecting
    or creating anything."""
    if not isinstance(url, str) or not url:
        raise UnsupportedDatabase("the database URL must be a non-empty string")
    if url.startswith(SQLITE_PREFIX):
        rest = url.removeprefix(SQLITE_PREFIX).split("?", 1)[0]
        if rest and not rest.startswith("/"):
            raise UnsupportedDatabase(
                f"{url} names host {rest.split('/', 1)[0]!r}; a SQLite URL is "
                "sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
        from tenure.storage.sqlite.store import path_from_url

        path_from_url(url)
        return
    if url.startswith(POSTGRES_PREFIXES):
        from tenure.storage.postgres.pooling import split_choices
        from tenure.storage.postgres.urls import parse_url

        parse_url(split_choices(url)[0])
        return
    if url.startswith("sqlite:"):
        raise UnsupportedDatabase(
            f"{url!r} is missing the slashes: a SQLite URL is sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    raise UnsupportedDatabase(
        f"unknown database URL scheme {_scheme_of(url)!r}: use sqlite:///path/to/file.db "
        "or postgresql://user@host/dbname"
    )


def _scheme_of(url: str) -> str:
    """A URL's scheme for a message; a text without one (a libpq keyword/value string) shown
    with its password masked."""
    return url.split(":", 1)[0] if "://" in url else shown_url(url)
