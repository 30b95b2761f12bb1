"""A commit whose wait for the synchronous standby was cancelled (`pg_cancel_backend` on the
waiting backend: PostgreSQL then acknowledges it with a WARNING, committed locally only) is not
acknowledged: the caller gets `CommitUnconfirmed` (HTTP 503, retryable), and a submit with an
idempotency key retried finds its job. A real synchronous primary/standby pair whose
replication is cut, so that every commit waits."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest

import tenure
from tenure import JobState
from tenure.testing.pair import ReplicaPair
from tests.support.pairs import started_pair
from tests.support.service import LiveServer
from tests.support.waiting import poll

pytestmark = [pytest.mark.failover, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def cut_sync_pair() -> Iterator[ReplicaPair]:
    """A synchronous pair with tenure's tables on it, its replication then cut: every commit
    on the primary waits for a standby that hears nothing."""
    with started_pair(synchronous=True) as pair:
        tenure.connect(pair.node_url(pair.primary)).close()
        pair.cut_replication()
        yield pair


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `call` on a thread; the dict gets its `value` or its `error`."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # the test asserts on it
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def cancel_the_waiting_commit(url: str) -> None:
    """Once a backend waits for the synchronous standby, cancel it as an operator would."""
    with psycopg.connect(url, autocommit=True) as conn:

        def waiting() -> list[tuple[int]]:
            found = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
            ).fetchall()
            return [(int(row[0]),) for row in found]

        (pid,) = poll(waiting, 30, "a commit waiting for the standby")[0]
        conn.execute("SELECT pg_cancel_backend(%s)", (pid,))


def test_a_submit_whose_standby_wait_was_cancelled_is_not_acknowledged(
    cut_sync_pair: ReplicaPair,
) -> None:
    """The submit raises CommitUnconfirmed (a StoreUnavailable, code commit_unconfirmed), not
    an id; retried with its key it finds the job the primary kept, and makes no second one."""
    url = cut_sync_pair.node_url(cut_sync_pair.primary)
    with tenure.connect(url, timeout=30) as ledger:
        thread, outcome = in_background(
            lambda: ledger.submit("k", {"n": 1}, idempotency_key="order-1")
        )
        cancel_the_waiting_commit(url)
        thread.join(30)
        error = outcome.get("error")
        assert isinstance(error, tenure.CommitUnconfirmed), outcome
        assert isinstance(error, tenure.StoreUnavailable)
        assert error.error_code == "commit_unconfirmed"
        job_id = ledger.submit("k", {"n": 1}, idempotency_key="order-1")
        assert ledger.get(job_id).state is JobState.QUEUED
        assert [job.id for job in ledger.list()] == [job_id]


def test_the_service_answers_503_for_a_cancelled_standby_wait(
    cut_sync_pair: ReplicaPair,
) -> None:
    """Over HTTP the same submit answers 503 `commit_unconfirmed` with Retry-After (a client
    retries it; tenure.Client raises CommitUnconfirmed), and the retry with the same key
    answers with the job."""
    url = cut_sync_pair.node_url(cut_sync_pair.primary)
    # The tenant is written by a session that does not wait for the cut standby.
    with tenure.connect(f"{url}?options=-csynchronous_commit%3Dlocal") as local:
        api_key = local.operations.create_tenant("acme")
    body = {"kind": "k", "payload": {"n": 2}, "idempotency_key": "order-2"}
    with (
        tenure.connect(url, timeout=30) as ledger,
        LiveServer(ledger) as server,
        server.client(api_key) as http,
    ):
        thread, outcome = in_background(lambda: http.post("/v1/jobs", json=body))
        cancel_the_waiting_commit(url)
        thread.join(30)
        answer: httpx.Response = outcome["value"]
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"]
        assert answer.json()["error"]["code"] == "commit_unconfirmed"
        again = http.post("/v1/jobs", json=body)
        assert again.status_code == 200, again.text
        assert ledger.get(again.json()["id"]).payload == {"n": 2}
