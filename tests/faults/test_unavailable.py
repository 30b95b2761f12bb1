"""A database that cannot be reached: lease operations raise OwnershipUnknown promptly, the
`ownership_unknown` event is written once the database answers again, and nothing is lost."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

import tenure
from tenure import JobState
from tenure.testing.proxy import TcpProxy, proxy_to
from tests.support.databases import PostgresServer, drop_schema, new_schema, with_schema

pytestmark = pytest.mark.slow
T = TypeVar("T")


@pytest.fixture
def proxied(postgres_server: PostgresServer) -> Iterator[tuple[TcpProxy, str, str]]:
    """A proxy in front of PostgreSQL; yields it, the proxied URL and the direct URL."""
    schema = new_schema(postgres_server)
    try:
        with proxy_to(postgres_server.upstream()) as proxy:
            yield (
                proxy,
                postgres_server.proxied_url(schema, proxy.port),
                with_schema(postgres_server.url, schema),
            )
    finally:
        drop_schema(postgres_server, schema)


@pytest.mark.parametrize("fault", ["cut", "blackhole"])
def test_postgres_out_of_reach_makes_ownership_unknown(
    proxied: tuple[TcpProxy, str, str], fault: str
) -> None:
    """Cut or silenced between worker and PostgreSQL: extend and complete raise
    OwnershipUnknown within the timeout; after restore the lease is confirmed again and the
    held-back ownership_unknown event is in the job's timeline."""
    proxy, url, direct_url = proxied
    worker = tenure.connect(url, timeout=1.0)
    operator = tenure.connect(direct_url)
    try:
        job_id = operator.submit("pay", {"invoice": 7})
        lease = worker.claim("W1", lease_seconds=60)
        assert lease is not None
        getattr(proxy, fault)()
        started = time.monotonic()
        with pytest.raises(tenure.OwnershipUnknown):
            worker.extend(lease)
        assert time.monotonic() - started < 5.0
        with pytest.raises(tenure.OwnershipUnknown):
            worker.complete(lease, {"paid": True})
        assert operator.get(job_id).state is JobState.RUNNING
        assert "ownership_unknown" not in [e.type for e in operator.events(job_id)]

        proxy.restore()
        confirmed = _retry_until_reachable(lambda: worker.extend(lease))
        assert confirmed > lease.lease_until
        unknown = [e for e in operator.events(job_id) if e.type == "ownership_unknown"]
        # Each failed operation is recorded; a retry that met a connection the fault broke
        # before the pool replaced it is an unconfirmed renewal too.
        assert [e.detail["operation"] for e in unknown][:2] == ["extend", "complete"]
        assert {e.detail["operation"] for e in unknown} == {"extend", "complete"}
        assert all(e.token == lease.token and e.detail["request_id"] for e in unknown)
        assert unknown[0].detail["last_confirmed_lease_until"] == lease.lease_until.isoformat()
        worker.complete(lease, {"paid": True})
        assert operator.get(job_id).state is JobState.SUCCEEDED
    finally:
        worker.close()
        operator.close()


def _retry_until_reachable(call: Callable[[], T], timeout: float = 15.0) -> T:
    """Retry while the pool replaces the connections the fault broke."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except tenure.OwnershipUnknown:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_sqlite_locked_past_timeout_makes_ownership_unknown(tmp_path: Path) -> None:
    """Another process holding SQLite's write lock past the timeout: extend raises
    OwnershipUnknown; once the lock is gone the lease is confirmed and the event recorded."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    ledger = tenure.connect(url, timeout=0.3)
    try:
        job_id = ledger.submit("ocr", {})
        lease = ledger.claim("W1", lease_seconds=60)
        assert lease is not None
        blocker = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(tenure.OwnershipUnknown):
            ledger.extend(lease)
        blocker.execute("ROLLBACK")
        blocker.close()
        ledger.extend(lease)
        types = [e.type for e in ledger.events(job_id)]
        assert types == ["job_submitted", "job_claimed", "ownership_unknown"]
    finally:
        ledger.close()
