"""Fixtures: every ledger test runs against SQLite and PostgreSQL (real servers, real files)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.storage import LISTEN_URL_ENV
from tenure.testing.pooler import PgBouncer, PoolerError
from tests.support.databases import (
    PostgresServer,
    drop_schema,
    new_schema,
    pooled,
    sqlite_url,
    start_postgres,
    with_schema,
)

pytest_plugins = ["tests.support.fixtures", "tests.support.browser"]

# Set: every PostgreSQL test of the run reaches its database through PgBouncer in transaction
# mode (CI runs the ledger suite and the worker tests so, with -m postgres).
POOLER_ENV = "TENURE_TEST_POOLER"

BACKENDS = ["sqlite", "postgres"]

# The tiers: a test's folder under tests/ is its marker (`pytest -m unit` is `pytest tests/unit`).
TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "faults")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tier (`unit`, `integration`, `faults`: its folder), and every
    test that talks to PostgreSQL `postgres` (its backend parameter, or the server fixture
    anywhere in its fixtures), so that `-m postgres` runs all of them again on the embedded
    server."""
    for item in items:
        tier = _tier(Path(item.path))
        if tier is not None:
            item.add_marker(tier)
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("backend") == "postgres"
        if on_postgres or "postgres_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)


def _tier(path: Path) -> str | None:
    """The tier folder a test file sits in (tests/unit/..., tests/faults/...), if any."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The PostgreSQL the suite uses. With CI=true it is never skipped: no server fails."""
    try:
        server = start_postgres()
    except Exception as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no PostgreSQL for the tests: {exc}")
    yield server
    handle = server.handle
    if handle is not None:
        handle.cleanup()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: PostgresServer) -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction mode in front of the suite's PostgreSQL (installed by
    .ci/run; skipped elsewhere when the machine has none)."""
    try:
        bouncer = PgBouncer(postgres_server.url)
        bouncer.start()
    except PoolerError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no PgBouncer for the tests: {exc}")
    yield bouncer
    bouncer.stop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL to an empty database of the backend: a fresh SQLite file or PostgreSQL schema."""
    if backend == "sqlite":
        yield sqlite_url(tmp_path)
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    schema = new_schema(server)
    url = with_schema(server.url, schema)
    if os.environ.get(POOLER_ENV):
        bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
        url = pooled(with_schema(bouncer.url(server.dbname), schema), url)
        # LISTEN needs a session: the ledgers through PgBouncer listen on the server itself.
        os.environ[LISTEN_URL_ENV] = server.url
    try:
        yield url
    finally:
        os.environ.pop(LISTEN_URL_ENV, None)
        drop_schema(server, schema)


@pytest.fixture
def connect(db_url: str) -> Iterator[Callable[..., tenure.Ledger]]:
    """Open ledgers on the test's database; all are closed at the end."""
    opened: list[tenure.Ledger] = []

    def open_ledger(**options: object) -> tenure.Ledger:
        options.setdefault("backoff_base", 0.05)
        ledger = tenure.connect(db_url, **options)  # type: ignore[arg-type]
        opened.append(ledger)
        return ledger

    yield open_ledger
    for ledger in opened:
        ledger.close()


@pytest.fixture
def ledger(connect: Callable[..., tenure.Ledger]) -> tenure.Ledger:
    return connect()


@pytest.fixture
def mcp_server(db_url: str, tmp_path: Path) -> Iterator[Any]:
    """`tenure mcp tests.support.apps:app` on `db_url` (stdio for a client, or HTTP when the
    test starts it), stopped at the end of the test."""
    from tests.support.mcp_server import McpServer

    server = McpServer(db_url, tmp_path)
    yield server
    server.stop()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Any]:
    """`tenure worker tests.support.apps:app` processes, stopped at the end of the test."""
    from tests.support.workers import Workers

    group = Workers(tmp_path)
    yield group
    group.stop_all()
