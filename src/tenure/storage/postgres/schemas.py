"""A schema of its own in a PostgreSQL database, made and dropped whole: `tenure demo` runs in
one so that it leaves nothing in a database it was given (its tables, jobs and events go with
the schema, and its workers never see the database's other jobs)."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

import psycopg
from psycopg import sql

from tenure.errors import StoreUnavailable, UnsupportedDatabase
from tenure.storage.postgres.pooling import split_choices
from tenure.storage.postgres.urls import build_conninfo, describe, explain_connect_error

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def in_schema(url: str, schema: str) -> str:
    """The URL with `search_path` set to `schema`, after the URL's own options (the last
    setting wins). The rest of the URL is kept byte for byte (see `split_choices`)."""
    setting = f"-csearch_path={_checked(schema)}"
    head, _, query = url.partition("?")
    parts = query.split("&") if query else []
    for i, part in enumerate(parts):
        name, _, value = part.partition("=")
        if unquote(name) == "options":
            parts[i] = f"{name}={value}{quote(' ' + setting, safe='')}"
            break
    else:
        parts.append(f"options={quote(setting, safe='')}")
    return f"{head}?{'&'.join(parts)}"


def create_schema(url: str, schema: str, *, timeout: float = 10.0) -> None:
    """CREATE SCHEMA `schema` in the URL's database."""
    _run(url, sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(_checked(schema))), timeout)


def drop_schema(url: str, schema: str, *, timeout: float = 10.0) -> None:
    """DROP SCHEMA `schema` CASCADE (if it exists), waiting at most `timeout` for its locks."""
    statement = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
    _run(url, statement.format(sql.Identifier(_checked(schema))), timeout)


def _checked(schema: str) -> str:
    if not _NAME.fullmatch(schema):
        raise UnsupportedDatabase(f"{schema!r} is not a schema name tenure makes")
    return schema


def _run(url: str, statement: sql.Composed, timeout: float) -> None:
    stripped, _ = split_choices(url)
    # Without startup options: a transaction pooler refuses them; the bounds are set below.
    conninfo = build_conninfo(stripped, timeout, startup_options=False)
    millis = str(max(1, int(timeout * 1000)))
    try:
        connection = psycopg.connect(conninfo, autocommit=True)
    except psycopg.Error as exc:
        raise StoreUnavailable(explain_connect_error(exc, describe(stripped))) from exc
    try:
        with connection as conn, conn.transaction():
            for setting in ("lock_timeout", "statement_timeout"):
                conn.execute("SELECT set_config(%s, %s, true)", (setting, millis))
            conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise UnsupportedDatabase(
            f"{describe(stripped)} refused {statement.as_string(None)}: the user may not; "
            "`tenure demo --db` runs in a schema of its own there (grant CREATE on the "
            "database, or leave --db out)"
        ) from exc
    except psycopg.Error as exc:
        raise StoreUnavailable(
            f"{describe(stripped)}: {statement.as_string(None)} failed: {exc}"
        ) from exc
