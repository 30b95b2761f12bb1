"""Batched writes, on both backends: submit_many, complete_many, and a worker that claims,
completes and renews in batches (one statement for many jobs)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import JobState
from tenure.ledger import lease_port
from tests.support.waiting import poll, until_db_time_passes


def test_submit_many_keeps_order_and_writes_each_event(ledger: tenure.Ledger) -> None:
    """Ids come back in the order of the payloads; each job is queued with its own payload,
    priority and `job_submitted` event; one claim takes them oldest first."""
    payloads = [{"n": n} for n in range(25)]
    ids = ledger.submit_many("ocr", payloads, tenant="acme", priority=3, max_attempts=2)
    assert len(set(ids)) == 25
    for job_id, payload in zip(ids, payloads, strict=True):
        job = ledger.get(job_id)
        assert (job.kind, job.tenant, job.priority, job.max_attempts) == ("ocr", "acme", 3, 2)
        assert job.payload == payload and job.state is JobState.QUEUED
        assert [e.type for e in ledger.events(job_id)] == ["job_submitted"]
    leases = lease_port(ledger).claim_many("w", limit=25, kinds=["ocr"], lease_seconds=30)
    assert [lease.job_id for lease in leases] == ids


def test_submit_many_later_runs_later(ledger: tenure.Ledger) -> None:
    """run_after applies to the whole batch: nothing is claimable before it."""
    ids = ledger.submit_many("ocr", [{}, {}], run_after=60)
    assert ledger.claim("w", lease_seconds=30) is None
    assert {ledger.get(i).state for i in ids} == {JobState.QUEUED}


def test_complete_many_answers_each_job_alone(
    connect: Callable[..., tenure.Ledger], ledger: tenure.Ledger
) -> None:
    """Two held leases are published, a stale one (reclaimed after expiry) is rejected with
    its own `result_rejected` event, an oversized result is refused before any write; one
    statement, each job its own answer."""
    small = connect(max_payload_bytes=64)
    ids = ledger.submit_many("ocr", [{"n": n} for n in range(4)])
    leases = lease_port(ledger).claim_many("A", limit=4, lease_seconds=0.2)
    assert [lease.job_id for lease in leases] == ids
    fresh = lease_port(ledger).extend_many(leases[:2] + leases[3:], lease_seconds=60)
    assert set(fresh.renewed) == {ids[0], ids[1], ids[3]}
    until_db_time_passes(ledger, leases[2].lease_until)
    thief = ledger.claim("B", lease_seconds=60)
    assert thief is not None and thief.job_id == ids[2]

    answers = lease_port(small).complete_many(
        [
            (leases[0], {"ok": 0}),
            (leases[1], {"ok": 1}),
            (leases[2], {"ok": 2}),
            (leases[3], {"text": "x" * 100}),
        ]
    )
    assert answers[ids[0]] is None and answers[ids[1]] is None
    assert isinstance(answers[ids[2]], tenure.LeaseLost)
    assert isinstance(answers[ids[3]], tenure.PayloadTooLarge)
    assert [ledger.get(i).state for i in ids] == [
        JobState.SUCCEEDED,
        JobState.SUCCEEDED,
        JobState.RUNNING,
        JobState.RUNNING,
    ]
    assert ledger.get(ids[0]).result == {"ok": 0}
    assert ledger.get(ids[2]).owner_id == "B" and ledger.get(ids[2]).result is None
    assert "result_rejected" in [e.type for e in ledger.events(ids[2])]
    assert "job_succeeded" not in [e.type for e in ledger.events(ids[3])]
    assert lease_port(small).complete_many([]) == {}


def test_a_worker_claims_completes_and_renews_in_batches(
    make_app: Callable[[], tenure.App],
) -> None:
    """40 jobs for a worker with 20 slots: far fewer claim and complete statements than jobs;
    while 20 jobs are held, each heartbeat tick renews all of them in one statement."""
    app = make_app()
    release = threading.Event()
    started: list[str] = []

    @app.job("hold", lease=3.0, heartbeat=0.3, jitter=0.5)
    def hold(ctx: tenure.JobContext, payload: Any) -> None:
        started.append(ctx.job_id)
        release.wait(30)

    ids = app.ledger.submit_many("hold", [{}] * 40)
    with tenure.Worker(app, concurrency=20) as worker:
        poll(lambda: len(started) >= 20 or None, what="20 jobs running")
        claims_then = worker.claim_latency.count
        assert claims_then <= 5  # 20 jobs: in one statement, or a few
        renewals_before = worker.stats.get("renewal_batches", 0)
        heartbeats_before = worker.stats.get("heartbeats", 0)
        poll(
            lambda: worker.stats.get("heartbeats", 0) - heartbeats_before >= 60 or None,
            what="three rounds of heartbeats",
        )
        batches = worker.stats.get("renewal_batches", 0) - renewals_before
        beats = worker.stats.get("heartbeats", 0) - heartbeats_before
        assert beats / batches >= 10  # 20 leases per statement (a few stragglers at most)
        release.set()
        poll(lambda: worker.stats.get("succeeded", 0) >= 40 or None, what="all 40 done")
        assert worker.claim_latency.count - claims_then <= 20
        assert worker.stats["commit_batches"] < 40
    assert {app.ledger.get(i).state for i in ids} == {JobState.SUCCEEDED}


def test_a_returned_handler_frees_its_slot_before_the_commit(
    make_app: Callable[[], tenure.App],
) -> None:
    """With one slot, the next job starts as soon as the handler returns; its result is still
    committed (nothing is lost)."""
    app = make_app()

    @app.job("quick")
    def quick(ctx: tenure.JobContext, payload: Any) -> int:
        return int(payload["n"])

    ids = app.ledger.submit_many("quick", [{"n": n} for n in range(30)])
    with tenure.Worker(app, concurrency=1) as worker:
        poll(lambda: worker.stats.get("succeeded", 0) >= 30 or None, what="all done")
    assert [app.ledger.get(i).result for i in ids] == list(range(30))


def test_complete_and_claim_is_one_write(ledger: tenure.Ledger) -> None:
    """Results published and the next jobs taken in one call; a stale lease in the batch is
    rejected alone, and the claim takes only queued jobs of the kinds asked for."""
    first = ledger.submit_many("ocr", [{"n": n} for n in range(3)])
    later = ledger.submit_many("ocr", [{"n": n} for n in range(3, 6)])
    other = ledger.submit("mail", {})
    held = lease_port(ledger).claim_many("W", limit=3, kinds=["ocr"], lease_seconds=30)
    assert [lease.job_id for lease in held] == first
    ledger.cancel(first[2])  # its lease no longer holds
    answers, leases = lease_port(ledger).complete_and_claim(
        [(held[0], 0), (held[1], 1), (held[2], 2)], "W", limit=5, kinds=["ocr"], lease_seconds=30
    )
    assert answers[first[0]] is None and answers[first[1]] is None
    assert isinstance(answers[first[2]], tenure.LeaseLost)
    assert [lease.job_id for lease in leases] == later
    assert [ledger.get(i).state for i in first] == [
        JobState.SUCCEEDED,
        JobState.SUCCEEDED,
        JobState.CANCELLED,
    ]
    assert ledger.get(other).state is JobState.QUEUED
    with pytest.raises(tenure.InvalidArgument):
        lease_port(ledger).complete_and_claim([], "W", limit=0)
