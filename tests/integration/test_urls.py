"""PostgreSQL URLs reach libpq byte for byte: tenure strips and adds its own query parameters
without decoding and encoding the rest again (libpq decodes `%20`, and reads `+` as a plus
sign), and a server that answered with an error is said to have answered."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import tenure
from tenure import JobState
from tenure.storage.postgres.urls import postgres_upstream
from tenure.testing.pooler import PgBouncer
from tenure.testing.proxy import proxy_to
from tests.support.databases import PostgresServer, drop_schema, new_schema

pytestmark = pytest.mark.postgres


@pytest.fixture
def schema(postgres_server: PostgresServer) -> Iterator[str]:
    name = new_schema(postgres_server)
    yield name
    drop_schema(postgres_server, name)


def search_path_url(base: str, schema: str, *more: str) -> str:
    """`base` with `options=-c search_path=<schema>` written as psql users write it."""
    query = "&".join([f"options=-c%20search_path%3D{schema}", *more])
    return f"{base}{'&' if '?' in base else '?'}{query}"


def jobs_in(server: PostgresServer, schema: str) -> int:
    with psycopg.connect(server.url) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".tenure_jobs').fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("tenure_parameter", [None, "prepare=0"])
def test_percent_encoded_options_land_in_the_schema_they_name(
    postgres_server: PostgresServer, schema: str, tenure_parameter: str | None
) -> None:
    """`?options=-c%20search_path%3D<schema>` (fine in psql) works: the ledger's tables and
    jobs are in that schema, also when tenure strips a parameter of its own from the URL."""
    more = [tenure_parameter] if tenure_parameter else []
    with tenure.connect(search_path_url(postgres_server.url, schema, *more)) as ledger:
        job_id = ledger.submit("k", {})
        assert ledger.get(job_id).state is JobState.QUEUED
    assert jobs_in(postgres_server, schema) == 1


@pytest.mark.pooler
def test_percent_encoded_options_through_pgbouncer(
    pgbouncer: PgBouncer, postgres_server: PostgresServer, schema: str
) -> None:
    """Through a transaction pooler the URL's options are set in each transaction: the
    percent-encoded search_path holds there too."""
    url = search_path_url(pgbouncer.url(postgres_server.dbname), schema, "pooler=transaction")
    with tenure.connect(url) as ledger:
        assert ledger._store.pooled  # type: ignore[attr-defined]
        ledger.submit("k", {})
    assert jobs_in(postgres_server, schema) == 1


def test_a_url_through_a_proxy_keeps_its_options(
    postgres_server: PostgresServer, schema: str
) -> None:
    """The URL made for a proxy in front of the server (the demo's, chaos's) carries the
    options percent-encoded: a space stays a space."""
    upstream, through = postgres_upstream(search_path_url(postgres_server.url, schema))
    with proxy_to(upstream) as proxy, tenure.connect(through(proxy.port)) as ledger:
        ledger.submit("k", {})
    assert jobs_in(postgres_server, schema) == 1


def test_a_server_that_answered_with_an_error_is_not_asked_whether_it_runs(
    postgres_server: PostgresServer,
) -> None:
    """An unknown setting in the URL's options: the message is the server's own answer, not
    "is it running?"."""
    base = postgres_server.url
    url = f"{base}{'&' if '?' in base else '?'}options=-c%20tenure_no_such_setting%3D1"
    with pytest.raises(tenure.StoreUnavailable) as raised:
        tenure.connect(url)
    message = str(raised.value)
    assert "is it running" not in message
    assert "refused the connection" in message
    assert 'unrecognized configuration parameter "tenure_no_such_setting"' in message
