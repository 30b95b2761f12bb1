"""Which database a process uses, and where that choice came from.

One precedence for every door: `--db` on the command line, else the URL given to `App(url)`,
else `$TENURE_DATABASE_URL`, else `sqlite:///tenure.db`. A process without an app (`tenure
submit`, `status`, `serve`) has no `App(url)` in that list. Every process of one app must use
the same database, or jobs queue where no worker looks: `differs_from_environment` is the check
a process makes at start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

DEFAULT_URL = "sqlite:///tenure.db"
URL_ENV = "TENURE_DATABASE_URL"
_SQLITE = "sqlite:///"
_POSTGRES = ("postgresql://", "postgres://")


class UrlSource(StrEnum):
    """Where a process's database URL came from."""

    OPTION = "--db"
    APP = "App(url)"
    ENVIRONMENT = "$TENURE_DATABASE_URL"
    DEFAULT = "the default"


@dataclass(frozen=True)
class ChosenDatabase:
    """A process's database URL and where it came from."""

    url: str
    source: UrlSource

    @property
    def shown(self) -> str:
        """The URL for a message: any password left out."""
        return shown_url(self.url)


def environment_url() -> str | None:
    """`$TENURE_DATABASE_URL`, or None when it is unset or empty."""
    return os.environ.get(URL_ENV) or None


def without_app(option: str | None) -> ChosenDatabase:
    """The database of a process that has no app: `--db`, else the environment's, else the
    default."""
    if option:
        return ChosenDatabase(option, UrlSource.OPTION)
    from_environment = environment_url()
    if from_environment:
        return ChosenDatabase(from_environment, UrlSource.ENVIRONMENT)
    return ChosenDatabase(DEFAULT_URL, UrlSource.DEFAULT)


def shown_url(url: str) -> str:
    """`url` with the password of its user part replaced by `***` (a query's `password=` too):
    safe to print and to log."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    user, at, host = authority.rpartition("@")
    if at and ":" in user:
        authority = f"{user.split(':', 1)[0]}:***@{host}"
    path, question, query = tail.partition("?")
    if question:
        query = "&".join(
            "password=***" if part.lower().startswith("password=") else part
            for part in query.split("&")
        )
    return f"{scheme}{sep}{authority}{slash}{path}{question}{query}"


def same_database(first: str, second: str, *, folder: Path | None = None) -> bool:
    """Whether two URLs name one database: SQLite files compared as absolute paths (relative
    ones from `folder`, default the working folder); PostgreSQL URLs compared by host, port,
    database, user and `options` (so `postgres://` and `postgresql://`, or another timeout,
    are the same database). Two routes to one server (a pooler and a direct URL) count as two:
    no process can tell them apart without connecting."""
    return _identity(first, folder) == _identity(second, folder)


def _identity(url: str, folder: Path | None) -> tuple[str, ...]:
    if url.startswith(_SQLITE):
        path = url.removeprefix(_SQLITE).split("?", 1)[0]
        if path.startswith("/"):  # sqlite:////absolute
            return ("sqlite", os.path.normpath(path))
        return ("sqlite", os.path.normpath((folder or Path.cwd()) / path))
    if url.startswith(_POSTGRES):
        return ("postgresql", *_postgres_identity(url))
    return ("other", url)


def _postgres_identity(url: str) -> tuple[str, ...]:
    """Host(s) with port(s), database, user and options, as a URL or its query says them."""
    parts = urlsplit(url)
    authority = parts.netloc.rpartition("@")
    user = unquote(authority[0].split(":", 1)[0])
    query = {name: value for name, value in parse_qsl(parts.query)}
    hosts = query.get("host") or unquote(authority[2]).lower()
    if query.get("port"):
        hosts = f"{hosts}:{query['port']}"
    if hosts.endswith(":5432"):
        hosts = hosts.removesuffix(":5432")
    dbname = query.get("dbname") or unquote(parts.path.lstrip("/"))
    return (hosts, dbname, query.get("user") or user, query.get("options") or "")


def differs_from_environment(chosen: ChosenDatabase, *, folder: Path | None = None) -> str | None:
    """A warning when `$TENURE_DATABASE_URL` is set and names another database than the one
    this process chose (None: no warning): jobs submitted by `tenure submit`, `status` or a
    client that reads the environment would then queue where this process does not look."""
    from_environment = environment_url()
    if from_environment is None or chosen.source is UrlSource.ENVIRONMENT:
        return None
    if same_database(chosen.url, from_environment, folder=folder):
        return None
    return (
        f"this process uses {chosen.shown} (from {chosen.source}), but {URL_ENV} names "
        f"{shown_url(from_environment)}: processes that read the environment (tenure submit, "
        "tenure status, other workers) use another database than this one. Give every "
        "process the same database: write App() without a URL and set "
        f"{URL_ENV}, or pass the same --db to each (`tenure doctor` lists them)"
    )
