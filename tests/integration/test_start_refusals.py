"""What cannot work is refused at start with the reason, by the library (`InvalidArgument`) and
by the real CLI (exit 2, one line, no traceback): one of tenure's URL parameters given twice,
`--listen-db` beside a SQLite database, and `?prepare=1` on a pooler that would lose the
prepared statements (the real PgBouncer 1.18 of Debian 12)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure.testing.pooler import PgBouncer
from tests.support.cli import tenure_cli
from tests.support.databases import (
    PostgresServer,
    drop_schema,
    new_schema,
    table_names,
    with_schema,
)


@pytest.fixture
def schema(postgres_server: PostgresServer) -> Iterator[str]:
    name = new_schema(postgres_server)
    yield name
    drop_schema(postgres_server, name)


def assert_refused(done: subprocess.CompletedProcess[str], *said: str) -> None:
    """Exit 2, no traceback, and a last line `tenure: error: …` naming `said` (a worker's JSON
    log lines may come before it)."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tenure: error: "), done.stderr
    for words in said:
        assert words in last, done.stderr


@pytest.mark.parametrize(
    "twice", ["pooler=none&pooler=transaction", "prepare=0&prepare=1", "pooler=none&pooler=none"]
)
def test_a_tenure_url_parameter_given_twice_is_refused(
    postgres_server: PostgresServer, schema: str, twice: str
) -> None:
    """`pooler=` (or `prepare=`) twice in the URL is refused, naming it, rather than the last
    one silently winning; nothing is created in the database."""
    url = f"{with_schema(postgres_server.url, schema)}&{twice}"
    name = twice.split("=", 1)[0]
    with pytest.raises(tenure.InvalidArgument, match=f"{name}= is given twice"):
        tenure.connect(url)
    assert_refused(tenure_cli("jobs", "--db", url), f"{name}= is given twice")
    assert_refused(
        tenure_cli("worker", "tests.support.apps:app", "--db", url), f"{name}= is given twice"
    )
    assert table_names(with_schema(postgres_server.url, schema)) == set()


def test_listen_db_beside_sqlite_is_refused(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """`--listen-db` with a SQLite `--db` (which has no LISTEN) is refused by `tenure worker`,
    `tenure serve` and `tenure mcp`, as `listen_url` is by the library, instead of being
    ignored without a word."""
    db = f"sqlite:///{tmp_path / 'tenure.db'}"
    listen = postgres_server.url
    with pytest.raises(tenure.InvalidArgument, match="SQLite has no LISTEN"):
        tenure.connect(db, listen_url=listen)
    for command in (
        ("worker", "tests.support.apps:app", "--db", db, "--listen-db", listen),
        ("serve", "--db", db, "--listen-db", listen, "--port", "9"),
        ("mcp", "tests.support.apps:app", "--db", db, "--listen-db", listen),
    ):
        assert_refused(tenure_cli(*command), "--listen-db", "no LISTEN")
    assert not (tmp_path / "tenure.db").exists()


@pytest.mark.pooler
def test_prepare_on_a_pooler_that_loses_prepared_statements_is_refused(
    pgbouncer: PgBouncer, postgres_server: PostgresServer, schema: str
) -> None:
    """`?prepare=1` through PgBouncer 1.18 (no `max_prepared_statements`) is refused at
    connect, naming the setting, instead of workers failing once statements are prepared."""
    url = with_schema(pgbouncer.url(postgres_server.dbname), schema) + "&prepare=1"
    with pytest.raises(tenure.InvalidArgument, match="max_prepared_statements"):
        tenure.connect(url)
    assert_refused(
        tenure_cli("worker", "tests.support.apps:app", "--db", url), "max_prepared_statements"
    )
    with tenure.connect(url.replace("&prepare=1", "&prepare=0")) as ledger:
        assert ledger.get(ledger.submit("k", {})).state is tenure.JobState.QUEUED
