"""Which database a process uses, and where that choice came from.

One precedence for every door: `--db` on the command line, else the URL given to `App(url)`,
else `$TENURE_DATABASE_URL`, else `sqlite:///tenure.db`. A process without an app (`tenure
submit`, `status`, `serve`) has no `App(url)` in that list. Every process of one app must use
the same database, or jobs queue where no worker looks: `differs_from_environment` is the check
a process makes at start.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import parse_qsl, unquote, unquote_plus

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
    """`url` with every password replaced by `***`: the user part's (`user:***@host`), a query's
    `password=` or `sslpassword=` (however its name is escaped), and a libpq keyword/value
    string's (`password=***`). Safe to print and to log."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _KEYWORD_PASSWORD.sub(r"\g<1>***", url)
    before_query, question, query = rest.partition("?")
    user, at, after = before_query.rpartition("@")
    if at and ":" in user:
        before_query = f"{user.split(':', 1)[0]}:***@{after}"
    if question:
        query = "&".join(_masked_parameter(part) for part in query.split("&"))
    return f"{scheme}{sep}{before_query}{question}{query}"


_KEYWORD_PASSWORD = re.compile(r"(\b\w*password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.I)


def _masked_parameter(part: str) -> str:
    name, equals, _ = part.partition("=")
    if equals and unquote_plus(name).strip().lower().endswith("password"):
        return f"{name}=***"
    return part


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
    """What names a PostgreSQL database in a URL, as libpq reads it: each host with its port
    (5432 when none is given; the query's `host`, `hostaddr`, `port` and `dbname` win over the
    URL's), the database, the user, a `service`, and the `search_path` of its `options`
    (tenure's schemas); connection settings such as timeouts are left out."""
    before_query, _, query_text = url.split("://", 1)[1].partition("?")
    user_part, at, rest = before_query.rpartition("@")
    host_part, _, path = rest.partition("/")
    query = dict(parse_qsl(query_text, keep_blank_values=True))
    hosts = [unquote(h) for h in (query.get("host") or host_part).split(",")]
    ports = [p for p in query.get("port", "").split(",") if p]
    if not ports:
        hosts_ports = [_host_port(host) for host in hosts]
    else:
        ports *= len(hosts) if len(ports) == 1 else 1
        hosts_ports = [(_host_port(h)[0], p) for h, p in zip(hosts, ports, strict=False)]
    user = query.get("user") or (unquote(user_part.split(":", 1)[0]) if at else "")
    dbname = query.get("dbname") or unquote(path)
    search_path = re.search(r"search_path\s*=\s*([^\s]+)", unquote(query.get("options", "")))
    return (
        ",".join(f"{host.lower()}:{port or '5432'}" for host, port in hosts_ports),
        query.get("hostaddr", ""),
        dbname,
        user,
        query.get("service", ""),
        search_path.group(1) if search_path else "",
    )


def _host_port(text: str) -> tuple[str, str]:
    """`host:port`, `[v6]:port` or `host` as (host, port or "")."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, rest.removeprefix(":")
    host, _, port = text.partition(":")
    return host, port


def differs_from_environment(chosen: ChosenDatabase, *, folder: Path | None = None) -> str | None:
    """A warning when `$TENURE_DATABASE_URL` is set and names another database than the one
    this process chose (None: no warning): jobs submitted by `tenure submit`, `status` or a
    client that reads the environment would then queue where this process does not look."""
    from_environment = environment_url()
    if from_environment is None or same_database(chosen.url, from_environment, folder=folder):
        return None
    return (
        f"this process uses {chosen.shown} (from {chosen.source}), but {URL_ENV} names "
        f"{shown_url(from_environment)}: processes that read the environment (tenure submit, "
        "tenure status, other workers) use another database than this one. Give every "
        "process the same database: write App() without a URL and set "
        f"{URL_ENV}, or pass the same --db to each (`tenure doctor` lists them)"
    )
