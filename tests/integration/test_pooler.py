"""Through a real PgBouncer in transaction mode (Debian's package, its defaults but the pool
mode): tenure recognises the pooler, sets its settings per transaction, prepares nothing, and
LISTENs only on a direct URL, which it checks. The whole ledger suite runs through PgBouncer in
CI as well (`TENURE_TEST_POOLER=1 pytest -m postgres …`, see .ci/run)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

import tenure
from tenure import JobState
from tenure.errors import UnsupportedDatabase
from tenure.testing.pooler import PgBouncer
from tests.support.cli import tenure_cli
from tests.support.databases import PostgresServer, drop_schema, new_schema, with_schema
from tests.support.waiting import poll
from tests.support.workers import Workers

pytestmark = [pytest.mark.pooler, pytest.mark.postgres]


@pytest.fixture
def schema(postgres_server: PostgresServer) -> Iterator[str]:
    name = new_schema(postgres_server)
    yield name
    drop_schema(postgres_server, name)


@pytest.fixture
def pooled_url(pgbouncer: PgBouncer, postgres_server: PostgresServer, schema: str) -> str:
    """The test's schema through PgBouncer (its search_path in the URL's options, which
    PgBouncer refuses as a startup parameter: tenure sets it in each transaction)."""
    return with_schema(pgbouncer.url(postgres_server.dbname), schema)


@pytest.fixture
def direct_url(postgres_server: PostgresServer, schema: str) -> str:
    return with_schema(postgres_server.url, schema)


def test_pgbouncer_refuses_what_tenure_used_to_send(pooled_url: str) -> None:
    """The failure the issue saw, from the real PgBouncer: startup options are refused."""
    with pytest.raises(psycopg.OperationalError, match="unsupported startup parameter"):
        psycopg.connect(pooled_url, connect_timeout=5).close()


def test_a_ledger_through_pgbouncer_is_recognised_and_works(
    pooled_url: str, direct_url: str, schema: str
) -> None:
    """No switch needed: the pooler's refusal is recognised, the migrations run under a
    transaction-level lock, the URL's search_path holds in every transaction (the jobs are
    in the test's schema), and a statement run far past psycopg's prepare threshold works
    (nothing is prepared on a server connection the next transaction may not get)."""
    with tenure.connect(pooled_url) as ledger:
        assert ledger._store.pooled  # type: ignore[attr-defined]
        ids = [ledger.submit("k", {"n": n}) for n in range(12)]
        for _ in range(12):
            lease = ledger.claim("w", kinds=["k"], lease_seconds=30)
            assert lease is not None
            ledger.complete(lease, {"ok": True})
        assert {ledger.get(i).state for i in ids} == {JobState.SUCCEEDED}
    with psycopg.connect(direct_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = 'tenure_jobs'",
            (schema,),
        ).fetchone()
        assert row is not None and row[0] == 1
        done = conn.execute("SELECT count(*) FROM tenure_jobs WHERE state = 'succeeded'")
        assert done.fetchone() == (12,)


def test_the_url_says_pooler_and_prepare_and_bad_values_are_refused(pooled_url: str) -> None:
    with tenure.connect(pooled_url + "&pooler=transaction&prepare=0") as ledger:
        assert ledger._store.pooled  # type: ignore[attr-defined]
        assert ledger.get(ledger.submit("k", {})).state is JobState.QUEUED
    for bad, said in (("pooler=bouncy", "pooler="), ("prepare=maybe", "prepare=")):
        with pytest.raises(UnsupportedDatabase, match=said):
            tenure.connect(f"{pooled_url}&{bad}")


def test_a_listen_url_through_the_pooler_is_refused_with_the_reason(
    pooled_url: str, tmp_path: Path
) -> None:
    """LISTEN through a transaction pooler silently receives nothing: refused at start, by
    the library and by `tenure worker --listen-db` (exit 2, no traceback)."""
    with pytest.raises(UnsupportedDatabase, match="pooler"):
        tenure.connect(pooled_url, listen_url=pooled_url)
    done = tenure_cli(
        "worker", "tests.support.apps:app", "--db", pooled_url, "--listen-db", pooled_url
    )
    assert done.returncode == 2, done.stderr
    assert "LISTEN" in done.stderr and "Traceback" not in done.stderr


def test_a_listen_url_of_another_database_is_refused(
    pooled_url: str, postgres_server: PostgresServer
) -> None:
    """The probe NOTIFYs through the store and waits to hear it on the LISTEN URL: a URL of
    another database hears nothing and is refused."""
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS tenure_other_db")
        conn.execute("CREATE DATABASE tenure_other_db")
    try:
        other = urlunsplit(urlsplit(postgres_server.url)._replace(path="/tenure_other_db"))
        started = time.monotonic()
        with pytest.raises(UnsupportedDatabase, match="did not hear"):
            tenure.connect(pooled_url, listen_url=other, timeout=1.0)
        assert time.monotonic() - started < 30
    finally:
        with psycopg.connect(postgres_server.url, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS tenure_other_db")


def test_a_worker_through_pgbouncer_hears_submits_on_its_listen_url(
    pooled_url: str, direct_url: str, tmp_path: Path
) -> None:
    """`tenure worker --db <PgBouncer> --listen-db <direct>`, polling only every 30 s: a
    submit through PgBouncer is taken up at once, woken by LISTEN on the direct connection."""
    workers = Workers(tmp_path)
    try:
        workers.start(pooled_url, "W", "--poll", "30", "--listen-db", direct_url)
        with tenure.connect(pooled_url) as ledger:
            job_id = ledger.submit("tick", {})
            job = ledger.wait(job_id, timeout=20)
            assert job.state is JobState.SUCCEEDED
    finally:
        workers.stop_all()
    events = {e["event"] for e in workers.log_events("W")}
    assert "listen_unavailable" not in events


def test_without_a_listen_url_a_worker_polls_and_says_so_once(
    pooled_url: str, tmp_path: Path
) -> None:
    workers = Workers(tmp_path)
    try:
        workers.start(pooled_url, "W", "--poll", "0.2")
        with tenure.connect(pooled_url) as ledger:
            job = ledger.wait(ledger.submit("tick", {}), timeout=20)
            assert job.state is JobState.SUCCEEDED
    finally:
        workers.stop_all()
    said = [e for e in workers.log_events("W") if e["event"] == "listen_unavailable"]
    assert len(said) == 1 and said[0]["reason"] == "pooler"


def test_a_waiter_through_pgbouncer_without_listen_is_answered_by_the_sweep(
    pooled_url: str,
) -> None:
    """No LISTEN: the end made by another ledger is found by the waiters' sweep."""
    with tenure.connect(pooled_url) as waiting, tenure.connect(pooled_url) as working:
        job_id = waiting.submit("k", {})
        lease = working.claim("w", kinds=["k"], lease_seconds=30)
        assert lease is not None
        answers: list[tenure.Job] = []
        waiter = threading.Thread(target=lambda: answers.append(waiting.wait(job_id, 20)))
        waiter.start()
        poll(lambda: waiting._ended.waiting() == 1, 10, "the waiter to wait")
        working.complete(lease, "done")
        waiter.join(20)
        assert answers and answers[0].state is JobState.SUCCEEDED
        assert not waiting._ended.heard
