"""PostgreSQL URLs: the connection string tenure opens (with its client-side bounds), a
description for messages without the password, and the URL through a proxy (demo, chaos)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote, urlencode

import psycopg
from psycopg import conninfo

from tenure.errors import UnsupportedDatabase


def build_conninfo(url: str, timeout: float) -> str:
    """The URL plus client-side bounds: connect timeout, statement timeout, UTC, keepalives."""
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise UnsupportedDatabase(f"cannot parse the PostgreSQL URL: {exc}") from exc
    millis = max(1, int(timeout * 1000))
    options = str(params.get("options") or "")
    options += f" -c statement_timeout={millis} -c lock_timeout={millis} -c TimeZone=UTC"
    # psycopg prepares a statement after its fifth use; a generic plan is then reused instead
    # of a custom plan per call (a quarter millisecond of planning on each claim). Our
    # statements' plans do not depend on their parameters: partial indexes decide them.
    options += " -c plan_cache_mode=force_generic_plan"
    params.update(
        options=options.strip(),
        connect_timeout=max(1, round(timeout)),
        application_name=params.get("application_name") or "tenure",
        keepalives=1,
        keepalives_idle=max(1, round(timeout)),
        keepalives_interval=1,
        keepalives_count=max(1, round(timeout)),
        tcp_user_timeout=millis,
    )
    return conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})


def describe(url: str) -> str:
    """Host and database of a URL for messages, without the password."""
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "PostgreSQL"
    return f"PostgreSQL at {params.get('host', 'localhost')}/{params.get('dbname', '')}"


def postgres_upstream(url: str) -> tuple[tuple[str, int] | str, Callable[[int], str]]:
    """Where a proxy in front of this PostgreSQL forwards to, and the URL through it."""
    params = conninfo.conninfo_to_dict(url)
    host = str(params.pop("host", None) or "/var/run/postgresql")
    port = int(params.pop("port", None) or 5432)
    user = quote(str(params.pop("user", None) or "postgres"))
    password = params.pop("password", None)
    dbname = quote(str(params.pop("dbname", None) or "postgres"))
    upstream: tuple[str, int] | str = (
        f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
    )
    auth = f"{user}:{quote(str(password))}" if password else user
    query = urlencode({k: str(v) for k, v in params.items()})

    def through(proxy_port: int) -> str:
        return f"postgresql://{auth}@127.0.0.1:{proxy_port}/{dbname}" + (
            f"?{query}" if query else ""
        )

    return upstream, through
