"""PostgreSQL URLs: the connection string tenure opens (with its client-side bounds), a
description for messages without the password, and the URL through a proxy (demo, chaos)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from urllib.parse import quote, unquote, urlencode

import psycopg
from psycopg import conninfo

from tenure.errors import UnsupportedDatabase
from tenure.storage.postgres.pooling import split_choices


def tenure_settings(timeout: float, *, prepare: bool = True) -> list[tuple[str, str]]:
    """The settings tenure runs every statement under: server-side bounds and UTC."""
    millis = str(max(1, int(timeout * 1000)))
    settings = [("statement_timeout", millis), ("lock_timeout", millis), ("TimeZone", "UTC")]
    if prepare:
        # psycopg prepares a statement after its fifth use; a generic plan is then reused
        # instead of a custom plan per call (a quarter millisecond of planning on each claim).
        # Our statements' plans do not depend on their parameters: partial indexes decide them.
        settings.append(("plan_cache_mode", "force_generic_plan"))
    return settings


def parse_url(url: str) -> dict[str, str | int | None]:
    """libpq's reading of a URL, as an error of tenure's when it cannot read it or when a
    parameter libpq reads as an integer is not one (libpq would say so only on connecting,
    or not at all for those tenure sets itself)."""
    try:
        params: dict[str, str | int | None] = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise UnsupportedDatabase(f"cannot parse the PostgreSQL URL: {exc}") from exc
    for name in _INTEGER_PARAMETERS:
        value = params.get(name)
        if value is not None and not _is_int(str(value)):
            raise UnsupportedDatabase(
                f"{name}={value} in the PostgreSQL URL is not a whole number; libpq reads "
                f"{name} as one"
            )
    for port in str(params.get("port") or "").split(","):
        if port.strip() and not (_is_int(port) and 1 <= int(port) <= 65535):
            # Not repeated: a password with an unescaped "/" reads as host:port ("app:s3cret").
            raise UnsupportedDatabase(
                "the PostgreSQL URL's port is not a whole number from 1 to 65535 (one per "
                "host, comma-separated); a password with /, ? or # in it must be "
                "percent-encoded (/ is %2F)"
            )
    return params


# libpq's connection parameters that are integers (besides `port`, a list of them).
_INTEGER_PARAMETERS = (
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
)
# What libpq's own parsing accepts: a signed decimal int with spaces around it.
_INT = re.compile(r"\s*[+-]?\d{1,10}\s*")


def _is_int(text: str) -> bool:
    return _INT.fullmatch(text) is not None and -(2**31) <= int(text) < 2**31


def build_conninfo(url: str, timeout: float, *, startup_options: bool = True) -> str:
    """The URL plus client-side bounds (connect timeout, keepalives) and, on a direct
    connection, tenure's settings as startup options. Without `startup_options` (through a
    pooler) the URL's `options` are left out: the store sets them per transaction."""
    params = parse_url(url)
    _check_session_attrs(params)
    millis = max(1, int(timeout * 1000))
    if startup_options:
        options = str(params.get("options") or "")
        options += "".join(f" -c {name}={value}" for name, value in tenure_settings(timeout))
        params["options"] = options.strip()
    else:
        params.pop("options", None)
    params.update(
        connect_timeout=max(1, round(timeout)),
        application_name=params.get("application_name") or "tenure",
        keepalives=1,
        keepalives_idle=max(1, round(timeout)),
        keepalives_interval=1,
        keepalives_count=max(1, round(timeout)),
        tcp_user_timeout=millis,
    )
    return conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})


def url_options(url: str) -> str:
    """The URL's own libpq `options` (a pooler gets them per transaction)."""
    return str(parse_url(url).get("options") or "")


# Every tenure connection writes (claims, renewals, the migration at connect), so only a server
# that accepts writes will do: libpq's names for one.
_WRITABLE = ("read-write", "primary")


def _check_session_attrs(params: dict[str, str | int | None]) -> None:
    """A URL of several hosts finds the writable one: `target_session_attrs=read-write` unless
    the URL says `primary`; any other choice would let tenure land on a standby."""
    attrs = params.get("target_session_attrs")
    if attrs is None:
        if "," in str(params.get("host") or ""):
            params["target_session_attrs"] = "read-write"
        return
    if attrs not in _WRITABLE:
        raise UnsupportedDatabase(
            f"target_session_attrs={attrs} lets tenure connect to a server that cannot write; "
            "tenure writes on every connection (claims, renewals, results): use read-write "
            "or primary, or leave it out (a URL with several hosts gets read-write)"
        )


# libpq puts the server's own severity before what the server said.
_SERVER_SAID = re.compile(r"\b(?:FATAL|ERROR|PANIC):  ")


def describe(url: str) -> str:
    """Hosts and database of a URL for messages, without the password."""
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "PostgreSQL"
    hosts = str(params.get("host") or "localhost").split(",")
    ports = str(params.get("port") or "").split(",")
    if len(ports) == 1:  # libpq: one port serves every host
        ports *= len(hosts)
    where = ",".join(
        f"{h}:{p}" if p else h for h, p in itertools.zip_longest(hosts, ports, fillvalue="")
    )
    return f"PostgreSQL at {where}/{params.get('dbname', '')}"


def explain_connect_error(error: psycopg.Error, where: str) -> str:
    """What a failed first connection means, in the words a user acts on."""
    text = str(error).strip()
    lowered = text.lower()
    if "hot standby" in lowered or "read-only" in lowered or "not a primary" in lowered:
        return (
            f"no server of {where} accepts writes (each that answered is a standby or "
            "read-only): tenure needs the primary among the URL's hosts"
        )
    if "does not exist" in lowered and "database" in lowered:
        return f"{where} answered that the database does not exist (create it first): {text}"
    if "authentication" in lowered or "password" in lowered or "role" in lowered:
        return f"{where} refused the login: {text}"
    if _SERVER_SAID.search(text):
        # The server is running and answered: what it said is the reason (a bad `options`
        # setting, too many connections, ...), not a question of whether it is there.
        return f"{where} refused the connection: {text}"
    return (
        f"cannot connect to {where}: is it running, and does the URL name the right host, "
        f"user and database? ({text.splitlines()[0] if text else type(error).__name__})"
    )


def postgres_upstream(url: str) -> tuple[tuple[str, int] | str, Callable[[int], str]]:
    """Where a proxy in front of this PostgreSQL forwards to, and the URL through it (with
    the URL's own `pooler=` and `prepare=`, which are tenure's, not libpq's)."""
    stripped, _ = split_choices(url)
    ours = [
        part
        for part in url.partition("?")[2].split("&")
        if unquote(part.partition("=")[0]) in ("pooler", "prepare")
    ]
    params = parse_url(stripped)
    host = str(params.pop("host", None) or "/var/run/postgresql")
    port = int(params.pop("port", None) or 5432)
    user = quote(str(params.pop("user", None) or "postgres"))
    password = params.pop("password", None)
    dbname = quote(str(params.pop("dbname", None) or "postgres"))
    upstream: tuple[str, int] | str = (
        f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
    )
    auth = f"{user}:{quote(str(password))}" if password else user
    # Percent-encoded (`%20`, never `+`, which libpq reads as a plus sign).
    query = "&".join(
        filter(None, [urlencode({k: str(v) for k, v in params.items()}, quote_via=quote), *ours])
    )

    def through(proxy_port: int) -> str:
        return f"postgresql://{auth}@127.0.0.1:{proxy_port}/{dbname}" + (
            f"?{query}" if query else ""
        )

    return upstream, through
