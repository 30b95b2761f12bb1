"""`tenure.Client` and `tenure.AsyncClient` against a real server on loopback (uvicorn, both
backends) with a real worker: every call, every error mapping, and a server that is down."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import JobState
from tenure.service.settings import ServiceSettings
from tests.support.service import LiveServer, free_port
from tests.support.timing import FAST


@pytest.fixture
def served(make_app: Callable[[], tenure.App]) -> Iterator[tuple[tenure.App, LiveServer, str]]:
    """An app with a worker running `echo`, `broken` and `approve`, served on loopback."""
    app = make_app()

    @app.job("echo", **FAST)
    def echo(ctx: tenure.JobContext, payload: Any) -> Any:
        return {"echo": payload}

    @app.job("broken", max_attempts=1, **FAST)
    def broken(ctx: tenure.JobContext, payload: Any) -> Any:
        raise tenure.NonRetryable("refused", code="broken")

    @app.job("approve", **FAST)
    def approve(ctx: tenure.JobContext, payload: Any) -> Any:
        return ctx.wait_for("approval")

    key = app.ledger.operations.create_tenant("acme")
    settings = ServiceSettings(max_body_bytes=4096)
    with LiveServer(app.ledger, settings) as server, tenure.Worker(app, poll_interval=0.05):
        yield app, server, key


def test_every_call_of_the_client(served: tuple[tenure.App, LiveServer, str]) -> None:
    app, server, key = served
    with tenure.Client(server.url, key) as client:
        job_id = client.submit("echo", {"n": 1}, idempotency_key="k-1", priority=3)
        assert client.submit("echo", {"n": 1}, idempotency_key="k-1") == job_id
        assert client.result(job_id, timeout=20) == {"echo": {"n": 1}}
        job = client.get(job_id)
        assert (job.state, job.tenant, job.priority, job.idempotency_key) == (
            JobState.SUCCEEDED,
            "acme",
            3,
            "k-1",
        )
        assert job == app.ledger.get(job_id)
        # The wait answered once the job had ended: its end is in the record it returned.
        types = [event.type for event in client.events(job_id)]
        assert types[0] == "job_submitted" and types[-1] == "job_succeeded"
        assert client.wait(job_id, timeout=1).state is JobState.SUCCEEDED

        waiting = client.submit("approve", {})
        assert client.wait(waiting, timeout=0.2).state in {JobState.QUEUED, JobState.WAITING}
        assert client.signal(waiting, "approval", {"ok": True}) is True
        assert client.signal(waiting, "approval", {"ok": True}) is False  # even once ended
        assert client.result(waiting, timeout=20) == {"ok": True}

        doomed = client.submit("nobody_runs_this", {})
        client.cancel(doomed)
        assert client.get(doomed).state is JobState.CANCELLED


def test_submit_options_reach_the_job_through_the_service(
    served: tuple[tenure.App, LiveServer, str],
) -> None:
    """A `SubmitOptions` value and keywords over it travel as the request body's fields; an
    option the HTTP API does not take is refused before anything is sent."""
    app, server, key = served
    options = tenure.SubmitOptions(max_attempts=2, priority=1, principal="user:42")
    with tenure.Client(server.url, key) as client:
        job_id = client.submit("nobody_runs_this", {}, options, priority=7, idempotency_key="o-1")
        job = app.ledger.get(job_id)
        assert (job.max_attempts, job.priority, job.principal, job.idempotency_key) == (
            2,
            7,
            "user:42",
            "o-1",
        )
        before = len(app.ledger.list(limit=500))
        with pytest.raises(tenure.InvalidArgument, match="run_after"):
            client.submit("echo", {}, run_after=5)
        with pytest.raises(TypeError, match="options must be a SubmitOptions"):
            client.submit("echo", {}, {"priority": 1})  # type: ignore[arg-type]
        assert len(app.ledger.list(limit=500)) == before


def test_errors_become_tenure_exceptions(served: tuple[tenure.App, LiveServer, str]) -> None:
    app, server, key = served
    other = app.ledger.operations.create_tenant("globex")
    theirs = app.ledger.submit("echo", {}, tenant="globex")
    with tenure.Client(server.url, key) as client:
        with pytest.raises(tenure.JobNotFound):
            client.get("00000000-0000-4000-8000-000000000000")
        with pytest.raises(tenure.JobNotFound):
            client.get("not-a-uuid")
        with pytest.raises(tenure.JobNotFound):  # another tenant's job is unknown here
            client.cancel(theirs)
        job_id = client.submit("echo", {"n": 1}, idempotency_key="same")
        with pytest.raises(tenure.IdempotencyConflict):
            client.submit("echo", {"n": 2}, idempotency_key="same")
        with pytest.raises(tenure.InvalidArgument):
            client.submit("", {})
        with pytest.raises(tenure.PayloadTooLarge):
            client.submit("echo", {"blob": "x" * 10_000})
        client.result(job_id, timeout=20)
        with pytest.raises(tenure.TerminalJob):
            client.cancel(job_id)
        approval = client.submit("nobody_runs_this", {})  # stays queued: signals still count
        client.signal(approval, "approval", 1)
        with pytest.raises(tenure.SignalConflict):
            client.signal(approval, "approval", 2)
        failing = client.submit("broken", {})
        with pytest.raises(tenure.JobFailed) as failed:
            client.result(failing, timeout=20)
        assert failed.value.job.error["code"] == "broken"
        stuck = client.submit("nobody_runs_this", {})
        with pytest.raises(TimeoutError):
            client.result(stuck, timeout=0.3)
    with tenure.Client(server.url, "tnr_not_a_key") as stranger, pytest.raises(tenure.AccessDenied):
        stranger.get(job_id)
    with tenure.Client(server.url, other) as them:
        assert them.get(theirs).tenant == "globex"


def test_a_database_that_is_away_is_service_unavailable(tmp_path: Path) -> None:
    """SQLite held by another writer: the server answers 503 and the client raises
    `ServiceUnavailable` (a `tenure.Unavailable`, as `StoreUnavailable` is)."""
    db = tmp_path / "held.db"
    ledger = tenure.connect(f"sqlite:///{db}", timeout=0.3)
    key = ledger.operations.create_tenant("acme")
    try:
        with LiveServer(ledger) as server, tenure.Client(server.url, key, retries=0) as client:
            holder = sqlite3.connect(db, isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")
            try:
                with pytest.raises(tenure.ServiceUnavailable, match="503") as away:
                    client.submit("echo", {})
                assert isinstance(away.value, tenure.Unavailable)
                assert not isinstance(away.value, tenure.StoreUnavailable)
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            assert client.submit("echo", {})  # and back once the file is free
    finally:
        ledger.close()


def test_a_server_that_is_down_is_a_clear_error_within_the_timeout() -> None:
    """Nothing listens on the port: every call raises `ServiceUnavailable` naming the URL, in
    bounded time; a submit without a key is not retried (it could make a second job)."""
    url = f"http://127.0.0.1:{free_port()}"
    with tenure.Client(url, "tnr_x", timeout=1.0, retries=2) as client:
        started = time.monotonic()
        with pytest.raises(tenure.ServiceUnavailable, match=url):
            client.submit("echo", {})
        unkeyed = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(tenure.ServiceUnavailable, match="is it running"):
            client.get("00000000-0000-4000-8000-000000000000")
        retried = time.monotonic() - started
    # The read was retried twice (0.2 s, then 0.4 s pauses); the unkeyed submit never was.
    assert retried >= 0.6 > unkeyed


def test_the_async_client_makes_the_same_calls(served: tuple[tenure.App, LiveServer, str]) -> None:
    _, server, key = served

    async def scenario() -> None:
        async with tenure.AsyncClient(server.url, key) as client:
            job_id = await client.submit("echo", [1, 2], idempotency_key="async-1")
            assert await client.submit("echo", [1, 2], idempotency_key="async-1") == job_id
            assert await client.result(job_id, timeout=20) == {"echo": [1, 2]}
            assert (await client.get(job_id)).state is JobState.SUCCEEDED
            assert (await client.events(job_id))[-1].type == "job_succeeded"
            waiting = await client.submit("approve", {})
            assert await client.signal(waiting, "approval", "yes") is True
            assert (await client.wait(waiting, timeout=20)).result == "yes"
            doomed = await client.submit("nobody_runs_this", {})
            await client.cancel(doomed)
            with pytest.raises(tenure.TerminalJob):
                await client.cancel(doomed)
            with pytest.raises(tenure.JobFailed):
                await client.result(await client.submit("broken", {}), timeout=20)

    asyncio.run(scenario())
