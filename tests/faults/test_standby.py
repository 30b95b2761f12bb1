"""A standby reached where the primary was expected (a single-host URL, or PgBouncer pointed at
it) is an unavailable database, not a bug in tenure: the library raises `StoreUnavailable`,
`tenure serve` answers 503 `database_unavailable` with `Retry-After` and `/readyz` 503, and a
`tenure worker` backs off without exiting until a primary answers. A real primary/standby
pair (`pg_basebackup -R`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure import JobState
from tenure.testing.pair import ReplicaPair
from tenure.testing.pooler import PgBouncer, PoolerError
from tenure.testing.proxy import TcpProxy, proxy_to
from tests.support.pairs import started_pair
from tests.support.service import LiveServer
from tests.support.waiting import poll
from tests.support.workers import LoggedWorker

pytestmark = [pytest.mark.failover, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicaPair]:
    """An asynchronous pair whose primary holds tenure's tables, a job and a tenant (its key in
    `KEYS`), all replayed on the standby."""
    with started_pair(synchronous=False) as pair:
        with tenure.connect(pair.node_url(pair.primary)) as ledger:
            ledger.submit("tick", {})
            KEYS["standby"] = ledger.operations.create_tenant("standby")
        pair.wait_replayed()
        yield pair


KEYS: dict[str, str] = {}


@pytest.fixture(params=["single-host", "pgbouncer"])
def standby_url(request: pytest.FixtureRequest, pair: ReplicaPair) -> Iterator[str]:
    """The standby as a single-host URL, or through a real PgBouncer in front of it."""
    url = pair.node_url(pair.standby)
    if request.param == "single-host":
        yield url
        return
    try:
        bouncer = PgBouncer(url)
        bouncer.start()
    except PoolerError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no PgBouncer for the tests: {exc}")
    try:
        yield bouncer.url("postgres")
    finally:
        bouncer.stop()


def test_a_standby_is_an_unavailable_database_not_a_bug(standby_url: str) -> None:
    """On a standby: a ledger opens (its tables are there) and reads, a submit and a claim raise
    StoreUnavailable (never StoreBug); over HTTP a submit answers 503 `database_unavailable`
    with Retry-After (never 500) and /readyz answers 503 saying the server is a standby."""
    with tenure.connect(standby_url) as ledger:
        assert [job.kind for job in ledger.list()] == ["tick"]
        for write in (
            lambda: ledger.submit("tick", {}),
            lambda: ledger.claim("W", kinds=["tick"], lease_seconds=30),
        ):
            with pytest.raises(tenure.StoreUnavailable) as raised:
                write()
            assert not isinstance(raised.value, tenure.StoreBug)
        with LiveServer(ledger) as server, server.client(KEYS["standby"]) as http:
            for _ in range(3):
                answer = http.post("/v1/jobs", json={"kind": "tick", "payload": {}})
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["code"] == "database_unavailable"
                assert answer.headers["Retry-After"]
            ready = http.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert "standby" in ready.json()["reason"]


def point(proxy: TcpProxy, port: int) -> None:
    """Send the proxy's new connections to `port` (a moved address, a repointed pooler)."""
    proxy.upstream = ("127.0.0.1", port)
    proxy.cut()
    proxy.restore()


def refused_writes(pair: ReplicaPair) -> int:
    """How many writes the standby refused, by its own log."""
    log = pair.folder / f"{pair.standby.name}.log"
    return log.read_text(errors="replace").count("read-only transaction") if log.exists() else 0


def test_a_worker_waits_out_a_standby_and_claims_from_the_primary(
    pair: ReplicaPair, tmp_path: Path
) -> None:
    """A `tenure worker` whose address leads to a standby does not exit: started there, it
    waits, then starts once the address leads to the primary and runs a job; sent to the
    standby again, its claim loop fails round after round (the standby's log counts them)
    and backs off, alive, and it claims again once the primary answers."""
    primary, standby = pair.primary, pair.standby
    with (
        proxy_to(("127.0.0.1", standby.port)) as proxy,
        tenure.connect(pair.node_url(primary)) as ledger,
    ):
        worker = LoggedWorker(
            "tests.support.apps:app",
            f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres",
            tmp_path,
            "--kinds",
            "tick",
            started=False,
        )
        try:
            poll(lambda: worker.logged("start_failed") or not worker.alive(), 30, "a failed start")
            assert worker.alive() and not worker.logged("worker_started")
            point(proxy, primary.port)
            first = ledger.submit("tick", {})
            poll(lambda: ledger.get(first).terminal, 30, "the first job to end")
            assert ledger.get(first).state is JobState.SUCCEEDED

            before = refused_writes(pair)
            point(proxy, standby.port)
            poll(lambda: refused_writes(pair) >= before + 5, 30, "five refused claim rounds")
            assert worker.alive() and worker.logged("claim_failed")
            point(proxy, primary.port)
            second = ledger.submit("tick", {})
            poll(lambda: ledger.get(second).terminal, 30, "the second job to end")
            assert ledger.get(second).state is JobState.SUCCEEDED
            assert worker.alive()
            assert len(worker.logged("worker_started")) == 1
            assert not worker.logged("side_task_crashed")
        finally:
            assert worker.stop() == 0
