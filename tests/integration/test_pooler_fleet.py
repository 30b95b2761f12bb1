"""A pooler sized for a fleet (docs/how-to/pooler.md): the page's `pgbouncer.ini` run by a real
PgBouncer carries eight worker processes, a submitter and `tenure serve`; its numbers cover the
pool sizes the code opens; and a pooler that is full is `StoreUnavailable` with the pooler's
reason (503 JSON over HTTP), with no driver warning in the application's log."""

from __future__ import annotations

import configparser
import inspect
import logging
import re
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

import tenure
from tenure import JobState
from tenure.runtime.sizing import worker_pool_size
from tenure.service.serve import serve
from tenure.testing.pooler import PgBouncer
from tests.support.cli import tenure_cli, tenure_process
from tests.support.databases import PostgresServer, drop_schema, new_schema, with_schema
from tests.support.service import LiveServer
from tests.support.waiting import poll
from tests.support.workers import Workers

pytestmark = [pytest.mark.pooler, pytest.mark.postgres]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "pooler.md"
# The page's keys that size the pooler; the rest (addresses, auth) are the machine's.
SIZING = ("pool_mode", "max_client_conn", "default_pool_size", "reserve_pool_size",
          "reserve_pool_timeout")  # fmt: skip
WORKERS, CONCURRENCY = 8, 16


def default_pool_size(function: Callable[..., object]) -> int:
    """The `pool_size` a function opens when not told (`tenure serve`'s, `tenure.connect`'s)."""
    return int(inspect.signature(function).parameters["pool_size"].default)


def documented_settings() -> dict[str, str]:
    """The `[pgbouncer]` section of the page's ini block."""
    block = re.search(r"```ini\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert block is not None, "docs/how-to/pooler.md has no ini block"
    parser = configparser.ConfigParser(inline_comment_prefixes=(";",), comment_prefixes=(";",))
    parser.read_string(block.group(1))
    return {name: parser["pgbouncer"][name] for name in SIZING}


@pytest.fixture
def schema(postgres_server: PostgresServer) -> Iterator[str]:
    name = new_schema(postgres_server)
    yield name
    drop_schema(postgres_server, name)


def test_the_documented_sizes_cover_the_fleet_they_describe() -> None:
    """The page's arithmetic, with the pool sizes the code opens: eight workers at 16, serve
    and two submitters, twice over for a rolling restart."""
    settings = documented_settings()
    clients = (
        WORKERS * worker_pool_size(CONCURRENCY)
        + default_pool_size(serve)
        + 2 * default_pool_size(tenure.connect)
    )
    assert f"= {clients} clients" in PAGE.read_text(encoding="utf-8")
    assert int(settings["max_client_conn"]) >= 2 * clients
    assert settings["pool_mode"] == "transaction"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_documented_pgbouncer_carries_eight_workers_a_submitter_and_serve(
    postgres_server: PostgresServer, schema: str, tmp_path: Path
) -> None:
    direct = with_schema(postgres_server.url, schema)
    workers = Workers(tmp_path)
    with PgBouncer(postgres_server.url, settings=documented_settings()) as bouncer:
        pooled = with_schema(bouncer.url(postgres_server.dbname), schema)
        with tenure.connect(pooled) as submitter:
            key = submitter.operations.create_tenant("fleet")
            port = _free_port()
            serve_log = tmp_path / "serve.log"
            with open(serve_log, "wb") as out:
                service = tenure_process("serve", "--db", pooled, "--port", str(port), output=out)
            try:
                for index in range(WORKERS):
                    workers.start(pooled, f"W{index}", "--concurrency", str(CONCURRENCY),
                                  "--listen-db", direct)  # fmt: skip
                ids = [
                    submitter.submit("tally", {"nap": 0.05}, idempotency_key=f"k{n}")
                    for n in range(600)
                ]
                base = f"http://127.0.0.1:{port}"
                http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"})

                def answering() -> bool:
                    try:
                        return http.get("/healthz").status_code == 200
                    except httpx.TransportError:
                        assert service.poll() is None, serve_log.read_text()
                        return False

                poll(answering, 30, "tenure serve to answer")
                posted = [http.post("/v1/jobs", json={"kind": "tick"}) for _ in range(40)]
                assert {answer.status_code for answer in posted} == {202}
                http_ids = [answer.json()["id"] for answer in posted]
                for job_id in ids + http_ids:
                    assert submitter.wait(job_id, timeout=120).state is JobState.SUCCEEDED
                for job_id in http_ids:
                    shown = http.get(f"/v1/jobs/{job_id}")
                    assert shown.status_code == 200, shown.text
                    assert shown.json()["state"] == "succeeded"
            finally:
                workers.stop_all()
                service.send_signal(signal.SIGTERM)
                service.wait(timeout=30)
        refusals = bouncer.log.read_text(encoding="utf-8", errors="replace")
    applied = (tmp_path / "tally").read_text().split()
    assert sorted(applied) == sorted(set(applied)) and len(applied) == 600
    logs = [serve_log.read_text()] + [
        (tmp_path / f"W{index}.log").read_text() for index in range(WORKERS)
    ]
    assert "no more connections allowed" not in refusals
    for text in logs:
        assert "max_client_conn" not in text and "Traceback" not in text


def test_a_full_pooler_is_unavailable_with_its_reason(
    postgres_server: PostgresServer, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two client connections admitted: a third ledger is refused at connect, and a ledger
    whose pool must grow waits out its timeout and says the pooler's reason, over HTTP too
    (503 JSON); psycopg_pool's own warnings stay out of the log."""
    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    with PgBouncer(postgres_server.url, settings={"max_client_conn": "2"}) as bouncer:
        pooled = with_schema(bouncer.url(postgres_server.dbname), schema)
        with tenure.connect(pooled, timeout=1.5) as first, tenure.connect(pooled, timeout=1.5):
            with pytest.raises(tenure.StoreUnavailable, match=r"max_client_conn"):
                tenure.connect(pooled, timeout=1.5)
            key = first.operations.create_tenant("full")
            # The one connection of `first`'s pool is taken, as a long statement would: the
            # next operation must open another, which the pooler refuses.
            held = first._store._pool.getconn()  # type: ignore[attr-defined]
            try:
                with pytest.raises(tenure.StoreUnavailable, match=r"max_client_conn") as raised:
                    first.submit("tick", {})
                assert "couldn't get a connection" not in str(raised.value)
                with LiveServer(first) as server, server.client(key) as http:
                    answer = http.post("/v1/jobs", json={"kind": "tick"})
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["code"] == "database_unavailable"
                assert "max_client_conn" in answer.json()["error"]["message"]
                assert answer.headers["Retry-After"] == "1"
            finally:
                first._store._pool.putconn(held)  # type: ignore[attr-defined]
            assert first.submit("tick", {})  # the pool's own connection serves again
    assert [r for r in caplog.records if r.name == "psycopg.pool"] == []


def test_a_process_started_through_a_full_pooler_exits_with_the_reason(
    postgres_server: PostgresServer, schema: str, tmp_path: Path
) -> None:
    """`tenure jobs` through a pooler with no room: one line with the pooler's reason."""
    with PgBouncer(postgres_server.url, settings={"max_client_conn": "1"}) as bouncer:
        pooled = with_schema(bouncer.url(postgres_server.dbname), schema)
        with tenure.connect(pooled, timeout=1.5):
            result = tenure_cli("jobs", "--db", pooled)
    assert result.returncode == 1, result.stderr
    assert "max_client_conn" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
