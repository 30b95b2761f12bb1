"""Wake-ups instead of polling: PostgreSQL LISTEN/NOTIFY across processes (surviving a cut
connection), and submits in the same process on SQLite."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
import tenure.runtime.worker as worker_module
from tenure.ledger import lease_port
from tenure.testing.proxy import TcpProxy, proxy_to
from tests.support.cli import tenure_cli
from tests.support.databases import PostgresServer, drop_schema, new_schema, with_schema
from tests.support.waiting import poll

# Polling this slowly, a job the worker finds within a few seconds was found by a wake-up.
SLOW_POLL = 30.0


@pytest.fixture
def slow_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every idle wait of the claim loop lasts 15-30 s unless something wakes it."""
    monkeypatch.setattr(worker_module, "_FIRST_IDLE_WAIT", SLOW_POLL)


def submit_from_another_process(url: str, kind: str) -> str:
    done = tenure_cli("submit", kind, "--db", url)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.usefixtures("slow_polling")
def test_a_submit_wakes_an_idle_worker(db_url: str, backend: str) -> None:
    """An idle worker that would next poll in 15-30 s starts a new job within seconds:
    PostgreSQL notifies it from another process, SQLite from a submit in its own process."""
    app = tenure.App(db_url)
    started = threading.Event()
    seen: dict[str, float] = {}

    @app.job("ping")
    def ping(ctx: tenure.JobContext, payload: Any) -> None:
        seen["at"] = time.monotonic()
        started.set()

    try:
        with tenure.Worker(app, concurrency=2, poll_interval=SLOW_POLL) as worker:
            # After its first empty claim the loop waits 15-30 s for a poll, or for a wake-up
            # (a submit before the wait begins sets the wake event as well).
            poll(lambda: worker.claim_latency.count >= 1 or None, what="the first empty claim")
            claims_before = worker.claim_latency.count
            sent = time.monotonic()
            if backend == "postgres":
                job_id = submit_from_another_process(db_url, "ping")
            else:
                job_id = app.submit("ping", {})
            assert started.wait(10), "the worker was not woken"
            assert seen["at"] - sent < 5.0
            assert worker.claim_latency.count - claims_before <= 2
            poll(lambda: app.ledger.get(job_id).state is tenure.JobState.SUCCEEDED or None)
    finally:
        app.close()


@pytest.fixture
def proxied(postgres_server: PostgresServer) -> Iterator[tuple[TcpProxy, str, str]]:
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


def test_listening_resumes_after_a_cut_connection(proxied: tuple[TcpProxy, str, str]) -> None:
    """The listening connection is cut by a real proxy, then restored: notifications arrive
    again (the listener reconnects by itself; workers poll meanwhile)."""
    proxy, url, direct_url = proxied
    heard: list[str] = []
    listener_side = tenure.connect(url, timeout=1.0)
    operator = tenure.connect(direct_url)
    stop = lease_port(listener_side).on_claimable(heard.append)
    try:
        operator.submit("before", {})
        poll(lambda: "before" in heard or None, what="a notification before the cut")
        proxy.cut()
        # The listener noticed the loss once it tries to reconnect and is refused.
        poll(lambda: proxy.refused >= 1 or None, timeout=20, what="a refused reconnect")
        proxy.restore()

        def heard_after() -> bool | None:
            operator.submit("after", {})  # notifications sent while it was away are lost
            return "after" in heard or None

        poll(heard_after, timeout=20, what="a notification after the restore")
    finally:
        stop()
        listener_side.close()
        operator.close()


def test_sqlite_wakes_only_its_own_file(tmp_path: Any) -> None:
    """In-process wake-ups are per database file: a submit to another file wakes nobody."""
    one = tenure.connect(f"sqlite:///{tmp_path / 'one.db'}")
    other = tenure.connect(f"sqlite:///{tmp_path / 'other.db'}")
    same_file = tenure.connect(f"sqlite:///{tmp_path / 'one.db'}")
    heard: list[str] = []
    stop = lease_port(one).on_claimable(heard.append)
    try:
        other.submit("elsewhere", {})
        other.submit_many("elsewhere", [{}, {}])
        assert heard == []
        same_file.submit("here", {})
        same_file.submit_many("batch", [{}, {}])
        assert heard == ["here", "batch"]
    finally:
        stop()
        for ledger in (one, other, same_file):
            ledger.close()
    other_after = tenure.connect(f"sqlite:///{tmp_path / 'one.db'}")
    other_after.submit("after_stop", {})
    other_after.close()
    assert heard == ["here", "batch"]


@pytest.mark.usefixtures("slow_polling")
def test_a_signal_and_a_child_s_end_wake_an_idle_worker(db_url: str, backend: str) -> None:
    """A job waiting for a signal resumes within seconds of `tenure signal` from another
    process (PostgreSQL: NOTIFY; SQLite: a signal in the worker's own process), and a parent
    waiting for a child resumes as soon as the child ends, not at the next 15-30 s poll."""
    app = tenure.App(db_url)
    resumed: dict[str, float] = {}

    @app.job("child")
    def child(ctx: tenure.JobContext, payload: Any) -> str:
        return "done"

    @app.job("approver", spawns=["child"])
    def approver(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.wait_for("go")
        resumed["signal"] = time.monotonic()
        result = ctx.wait_job(ctx.spawn("child", {}))
        resumed["child"] = time.monotonic()
        return result

    try:
        with tenure.Worker(app, concurrency=2, poll_interval=SLOW_POLL):
            job_id = app.submit("approver", {})
            poll(lambda: app.ledger.get(job_id).state is tenure.JobState.WAITING, 20)
            sent = time.monotonic()
            if backend == "postgres":
                done = tenure_cli("signal", job_id, "go", "--db", db_url)
                assert done.returncode == 0, done.stderr
            else:
                app.ledger.signal(job_id, "go")
            job = poll(lambda: (j := app.ledger.get(job_id)).terminal and j, 10, "the resume")
        assert job.result == "done"
        assert resumed["signal"] - sent < 5.0
        assert resumed["child"] - resumed["signal"] < 5.0
    finally:
        app.close()


@pytest.fixture
def slow_waiter_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The waiters' sweep (the fallback for a lost announcement) comes only every 30 s."""
    from tenure.ledger import ended

    monkeypatch.setattr(ended, "SWEEP_HEARD", SLOW_POLL)
    monkeypatch.setattr(ended, "SWEEP_UNHEARD", SLOW_POLL)


@pytest.mark.usefixtures("slow_waiter_polls")
def test_a_job_s_end_wakes_its_waiters(db_url: str) -> None:
    """`ledger.wait` and `GET /v1/jobs/{id}?wait=S`, whose sweeps are 30 s apart here, answer
    within seconds of the job's end: one listener fans the end out to every waiter."""
    from tests.support.service import LiveServer

    app = tenure.App(db_url)
    release = threading.Event()

    @app.job("held")
    def held(ctx: tenure.JobContext, payload: Any) -> str:
        release.wait(30)
        return "done"

    answers: dict[str, Any] = {}
    try:
        ledger = app.ledger
        key = ledger.operations.create_tenant("acme")
        first = ledger.submit("held", {}, tenant="acme")
        second = ledger.submit("held", {}, tenant="acme")
        with tenure.Worker(app, concurrency=2), LiveServer(ledger) as server:
            poll(lambda: ledger.get(second).state is tenure.JobState.RUNNING, 20)

            def by_ledger() -> None:
                answers["ledger"] = ledger.wait(first, timeout=25)

            def by_http() -> None:
                with server.client(key) as client:
                    answers["http"] = client.get(f"/v1/jobs/{second}", params={"wait": 25})

            waiters = [threading.Thread(target=by_ledger), threading.Thread(target=by_http)]
            for waiter in waiters:
                waiter.start()
            poll(lambda: ledger._ended.waiting() == 2, 10, "both waiters to be waiting")
            ended = time.monotonic()
            release.set()
            for waiter in waiters:
                waiter.join(10)
            answered = time.monotonic() - ended
        assert answers["ledger"].state is tenure.JobState.SUCCEEDED
        assert answers["http"].json()["state"] == "succeeded"
        assert answered < 5.0, answered
    finally:
        release.set()
        app.close()


def test_a_reading_waiter_reads_less_often_as_it_waits(ledger: tenure.Ledger) -> None:
    """`await_end` with `read_every_max` (an MCP call that may be asked for input): the pause
    between readings doubles from 0.25 s to 2 s, so 5 s of a job that goes on cost about six
    readings, not the twenty a fixed 0.25 s would."""
    import asyncio

    from tenure.ledger import await_end

    job_id = ledger.submit("nobody_runs_this", {})
    reads: list[float] = []

    async def read() -> tenure.Job:
        reads.append(time.monotonic())
        return ledger.get(job_id)

    async def waited() -> tenure.Job:
        return await await_end(ledger, job_id, read, 5.0, read_every=0.25, read_every_max=2.0)

    assert asyncio.run(waited()).state is tenure.JobState.QUEUED
    # The first, then 0.25, 0.5, 1, 2 s later, and at the deadline (5 s).
    assert 5 <= len(reads) <= 7, [round(at - reads[0], 2) for at in reads]
