"""The shared behavioural suite of the ledger: every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

import tenure
from tenure import JobState
from tenure.ledger import lease_port
from tests.support.tokens import claimed, micros
from tests.support.waiting import until_db_time_passes


def types(ledger: tenure.Ledger, job_id: str) -> list[str]:
    return [event.type for event in ledger.events(job_id)]


# -- submit ------------------------------------------------------------------------------------


def test_submit_persists_a_queued_job_with_defaults(ledger: tenure.Ledger) -> None:
    """A submitted job is queued, tenant default, attempt 0, token 0, with a submit event."""
    job_id = ledger.submit("ocr", {"doc": "s3://bucket/17.pdf"})
    job = ledger.get(job_id)
    assert job.state is JobState.QUEUED
    assert (job.kind, job.tenant, job.attempt, job.token) == ("ocr", "default", 0, 0)
    assert job.payload == {"doc": "s3://bucket/17.pdf"}
    assert job.max_attempts == 5
    assert job.created_at.tzinfo is not None
    assert types(ledger, job_id) == ["job_submitted"]


def test_submit_event_carries_hash_not_content(ledger: tenure.Ledger) -> None:
    """The submit event holds the payload's SHA-256 and size, never its content."""
    payload = {"prompt": "secret customer text"}
    job_id = ledger.submit("llm", payload)
    (event,) = ledger.events(job_id)
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    assert event.detail["payload_sha256"] == hashlib.sha256(canonical).hexdigest()
    assert "secret" not in json.dumps(event.detail)


def test_idempotent_submit_returns_the_same_job(ledger: tenure.Ledger) -> None:
    """The same key, kind and payload (in any key order) return the first job's id."""
    first = ledger.submit("ocr", {"a": 1, "b": [1, 2]}, idempotency_key="doc-17:ocr")
    again = ledger.submit("ocr", {"b": [1, 2], "a": 1}, idempotency_key="doc-17:ocr")
    assert again == first
    assert len(ledger.list()) == 1


def test_idempotency_conflict_on_different_payload_or_kind(ledger: tenure.Ledger) -> None:
    """A reused key with another payload or kind raises IdempotencyConflict and adds nothing."""
    ledger.submit("ocr", {"a": 1}, idempotency_key="k")
    with pytest.raises(tenure.IdempotencyConflict):
        ledger.submit("ocr", {"a": 2}, idempotency_key="k")
    with pytest.raises(tenure.IdempotencyConflict):
        ledger.submit("pay", {"a": 1}, idempotency_key="k")
    with pytest.raises(tenure.IdempotencyConflict):
        ledger.submit("ocr", {"a": True}, idempotency_key="k")
    assert len(ledger.list()) == 1


def test_idempotency_keys_are_per_tenant(ledger: tenure.Ledger) -> None:
    """Two tenants may use the same key for different jobs."""
    a = ledger.submit("ocr", {"x": 1}, idempotency_key="k", tenant="acme")
    b = ledger.submit("ocr", {"x": 2}, idempotency_key="k", tenant="globex")
    assert a != b


# -- claim -------------------------------------------------------------------------------------


def test_claim_increments_token_and_attempt(ledger: tenure.Ledger) -> None:
    """A claim makes the job running for its owner with attempt incremented and a token at
    least the database clock in microseconds (invariant 16), below 2^53."""
    job_id = ledger.submit("ocr", {"n": 1})
    before = micros(ledger.now())
    lease = ledger.claim("w1", lease_seconds=30)
    after = micros(ledger.now())
    assert lease is not None
    assert (lease.job_id, lease.attempt, lease.payload) == (job_id, 1, {"n": 1})
    assert before <= lease.token <= after + 1 < 2**53
    assert lease.fresh and len(lease.claim) == 32
    job = ledger.get(job_id)
    assert job.state is JobState.RUNNING
    assert (job.owner_id, job.token, job.attempt) == ("w1", lease.token, 1)
    assert job.lease_until == lease.lease_until
    assert types(ledger, job_id) == ["job_submitted", "job_claimed"]


def test_claim_uses_the_database_clock(ledger: tenure.Ledger) -> None:
    """lease_until is the database's now plus the lease, whatever the caller's clock says."""
    before = ledger.now()
    ledger.submit("ocr", {})
    lease = ledger.claim("w1", lease_seconds=90)
    assert lease is not None
    after = ledger.now()
    assert before + timedelta(seconds=90) <= lease.lease_until <= after + timedelta(seconds=90)
    assert before <= lease.claimed_at <= after


def test_claim_returns_none_when_nothing_is_claimable(ledger: tenure.Ledger) -> None:
    """An empty queue, or one whose jobs are all leased, yields None."""
    assert ledger.claim("w1") is None
    ledger.submit("ocr", {})
    assert ledger.claim("w1", lease_seconds=30) is not None
    assert ledger.claim("w2", lease_seconds=30) is None


def test_claim_orders_by_priority_then_age(ledger: tenure.Ledger) -> None:
    """Higher priority first; among equals, the oldest first."""
    low = ledger.submit("k", {"i": 0})
    high_old = ledger.submit("k", {"i": 1}, priority=5)
    high_new = ledger.submit("k", {"i": 2}, priority=5)
    order = [ledger.claim("w", lease_seconds=30) for _ in range(3)]
    assert [lease.job_id for lease in order if lease] == [high_old, high_new, low]


def test_claim_filters_by_kind(ledger: tenure.Ledger) -> None:
    """Only the kinds asked for are claimed."""
    ocr = ledger.submit("ocr", {})
    ledger.submit("browser", {})
    lease = ledger.claim("w", kinds=["ocr"], lease_seconds=30)
    assert lease is not None and lease.job_id == ocr
    assert ledger.claim("w", kinds=["ocr", "pay"], lease_seconds=30) is None


def test_claim_many_takes_several_in_one_call(ledger: tenure.Ledger) -> None:
    """claim_many returns up to `limit` distinct jobs."""
    ids = {ledger.submit("k", {"i": i}) for i in range(5)}
    leases = lease_port(ledger).claim_many("w", limit=3, lease_seconds=30)
    assert len(leases) == 3 and {lease.job_id for lease in leases} <= ids
    assert len(lease_port(ledger).claim_many("w", limit=10, lease_seconds=30)) == 2


def test_run_after_delays_the_claim(ledger: tenure.Ledger) -> None:
    """A job is not claimable before its run_after, by the database's clock."""
    job_id = ledger.submit("k", {}, run_after=0.3)
    assert ledger.claim("w", lease_seconds=30) is None
    until_db_time_passes(ledger, ledger.get(job_id).run_after)
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None and lease.job_id == job_id


# -- expiry ------------------------------------------------------------------------------------


def test_expired_running_job_is_reclaimed_with_a_higher_token(ledger: tenure.Ledger) -> None:
    """Lease ≠ state: a running job whose short lease expired is claimable again. (A lease of
    a second: the second claim must come while it holds, also on a loaded machine, where
    0.2 s between two statements was seen to pass.)"""
    job_id = ledger.submit("k", {})
    first = ledger.claim("w1", lease_seconds=1.0)
    assert first is not None
    assert ledger.claim("w2", lease_seconds=0.2) is None
    until_db_time_passes(ledger, first.lease_until)
    second = ledger.claim("w2", lease_seconds=30)
    assert second is not None
    assert (second.job_id, second.attempt) == (job_id, 2)
    assert second.token > first.token and second.claim != first.claim and not second.fresh
    assert types(ledger, job_id)[-3:] == ["job_claimed", "lease_expired", "job_claimed"]


def test_last_attempt_expiry_fails_the_job_within_the_claim(ledger: tenure.Ledger) -> None:
    """With no attempts left, an expired lease makes the job failed (lease_expired) in claim."""
    job_id = ledger.submit("k", {}, max_attempts=1)
    lease = ledger.claim("w1", lease_seconds=0.2)
    assert lease is not None
    until_db_time_passes(ledger, lease.lease_until)
    assert ledger.claim("w2", lease_seconds=30) is None
    job = ledger.get(job_id)
    assert job.state is JobState.FAILED
    assert job.error["code"] == "lease_expired"
    assert types(ledger, job_id)[-2:] == ["lease_expired", "job_failed"]


def test_claim_settles_only_the_kinds_it_was_asked_for(ledger: tenure.Ledger) -> None:
    """An expired job of another kind is left for a claimer of that kind."""
    job_id = ledger.submit("other", {}, max_attempts=1)
    lease = ledger.claim("w1", lease_seconds=0.2)
    assert lease is not None
    until_db_time_passes(ledger, lease.lease_until)
    assert ledger.claim("w2", kinds=["ocr"], lease_seconds=30) is None
    assert ledger.get(job_id).state is JobState.RUNNING
    assert ledger.claim("w2", lease_seconds=30) is None
    assert ledger.get(job_id).state is JobState.FAILED


# -- lease-guarded writes ----------------------------------------------------------------------


def test_extend_moves_the_lease_from_the_database_now(ledger: tenure.Ledger) -> None:
    """extend returns a later lease end, written to the row with heartbeat_at."""
    ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=1.0)
    assert lease is not None
    new_end = ledger.extend(lease, lease_seconds=60)
    job = ledger.get(lease.job_id)
    assert new_end > lease.lease_until
    assert job.lease_until == new_end
    assert job.heartbeat_at is not None and job.heartbeat_at >= lease.claimed_at


def test_extend_keeps_a_short_lease_alive_past_its_first_end(ledger: tenure.Ledger) -> None:
    """Renewing a sub-second lease at a heartbeat cadence keeps it valid well past its first end."""
    ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=0.5)
    assert lease is not None
    keep_until = lease.lease_until + timedelta(seconds=0.5)
    while ledger.now() < keep_until:
        ledger.extend(lease)
        time.sleep(0.1)  # the heartbeat interval itself, not a wait for some other event
    assert ledger.now() > lease.lease_until
    assert ledger.claim("w2", lease_seconds=30) is None
    ledger.complete(lease, {"ok": True})
    assert ledger.get(lease.job_id).state is JobState.SUCCEEDED


def test_extend_many_renews_held_and_reports_lost(ledger: tenure.Ledger) -> None:
    """One batched renewal keeps the leases still held and names the lost ones."""
    for i in range(3):
        ledger.submit("k", {"i": i})
    leases = lease_port(ledger).claim_many("w", limit=3, lease_seconds=30)
    ledger.cancel(leases[1].job_id)
    result = lease_port(ledger).extend_many(leases)
    assert set(result.renewed) == {leases[0].job_id, leases[2].job_id}
    assert result.lost == [leases[1].job_id]
    assert "heartbeat_lost" in types(ledger, leases[1].job_id)


def test_save_step_advances_cursor_and_keeps_checkpoint(ledger: tenure.Ledger) -> None:
    """save_step stores the step and checkpoint; a later claim sees them."""
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=0.3)
    assert lease is not None
    ledger.save_step(lease, 1, {"evidence": ["a", "b"]})
    until_db_time_passes(ledger, lease.lease_until)
    again = ledger.claim("w2", lease_seconds=30)
    assert again is not None and again.job_id == job_id
    assert (again.step, again.checkpoint) == (1, {"evidence": ["a", "b"]})


def test_complete_publishes_the_result(ledger: tenure.Ledger) -> None:
    """complete ends the job succeeded with its result and clears the lease."""
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    ledger.complete(lease, {"fields": {"total": 12}})
    job = ledger.get(job_id)
    assert job.state is JobState.SUCCEEDED
    assert job.result == {"fields": {"total": 12}}
    assert job.lease_until is None
    assert ledger.claim("w2", lease_seconds=30) is None


def test_a_second_complete_is_rejected(ledger: tenure.Ledger) -> None:
    """Completing twice with one lease is LeaseLost and leaves the first result."""
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    ledger.complete(lease, "fresh")
    with pytest.raises(tenure.LeaseLost):
        ledger.complete(lease, "duplicate")
    assert ledger.get(job_id).result == "fresh"


def test_stale_owner_cannot_write_after_reclaim(ledger: tenure.Ledger) -> None:
    """The Kazakh seed: after expiry and a new claim, the old owner can neither extend, save a
    step nor complete; each attempt is recorded with its stale token; the new result stands."""
    job_id = ledger.submit("create_case", {"customer_id": "c-1048"})
    old = ledger.claim("W1", lease_seconds=0.2)
    assert old is not None
    until_db_time_passes(ledger, old.lease_until)
    new = ledger.claim("W2", lease_seconds=30)
    assert new is not None and new.token > old.token
    with pytest.raises(tenure.LeaseLost):
        ledger.extend(old)
    with pytest.raises(tenure.LeaseLost):
        ledger.save_step(old, 1, {"late": True})
    with pytest.raises(tenure.LeaseLost):
        ledger.complete(old, {"from": "W1"})
    with pytest.raises(tenure.LeaseLost):
        ledger.fail(old, {"code": "late"})
    with pytest.raises(tenure.LeaseLost):
        ledger.release(old)
    ledger.complete(new, {"from": "W2"})
    job = ledger.get(job_id)
    assert (job.state, job.result, job.step, job.token) == (
        JobState.SUCCEEDED,
        {"from": "W2"},
        0,
        new.token,
    )
    stale = [
        e
        for e in ledger.events(job_id)
        if e.token == old.token and e.type in {"heartbeat_lost", "result_rejected"}
    ]
    assert [e.type for e in stale] == ["heartbeat_lost"] + ["result_rejected"] * 4
    assert all(e.detail["current_token"] == new.token for e in stale)


def test_expired_lease_cannot_complete_even_unclaimed(ledger: tenure.Ledger) -> None:
    """A lease past its end cannot commit, even when no one else has claimed the job."""
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=0.2)
    assert lease is not None
    until_db_time_passes(ledger, lease.lease_until)
    with pytest.raises(tenure.LeaseLost):
        ledger.complete(lease, "too late")
    assert ledger.get(job_id).result is None


# -- failure, retries, release -----------------------------------------------------------------


def test_retryable_failure_requeues_with_backoff(connect: Callable[..., tenure.Ledger]) -> None:
    """A retryable failure queues the job again with run_after in [1/2, 1] x base*2^(n-1)."""
    ledger = connect(backoff_base=0.4)
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    before = ledger.now()
    assert ledger.fail(lease, {"code": "timeout"}) is JobState.QUEUED
    after = ledger.now()
    job = ledger.get(job_id)
    assert job.state is JobState.QUEUED and job.owner_id is None and job.lease_until is None
    assert before + timedelta(seconds=0.2) <= job.run_after <= after + timedelta(seconds=0.4)
    assert job.error == {"code": "timeout"}
    assert types(ledger, job_id)[-1] == "job_retry_scheduled"
    assert ledger.claim("w", lease_seconds=30) is None
    until_db_time_passes(ledger, job.run_after)
    second = ledger.claim("w", lease_seconds=30)
    assert second is not None and second.attempt == 2
    before = ledger.now()
    ledger.fail(second, {"code": "timeout"})
    assert ledger.get(job_id).run_after >= before + timedelta(seconds=0.4)


def test_backoff_grows_exponentially_and_is_capped() -> None:
    """Delays double per attempt within their jitter band and never pass the cap."""
    from tenure.ledger import backoff_delay

    for attempt in range(1, 8):
        delay = backoff_delay(attempt, 1.0, 20.0)
        ceiling = min(20.0, 2.0 ** (attempt - 1))
        assert ceiling / 2 <= delay <= ceiling


def test_non_retryable_failure_ends_the_job(ledger: tenure.Ledger) -> None:
    """retryable=False fails the job at once, whatever attempts are left."""
    job_id = ledger.submit("k", {}, max_attempts=5)
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    assert ledger.fail(lease, {"code": "permission_denied"}, retryable=False) is JobState.FAILED
    job = ledger.get(job_id)
    assert (job.state, job.error, job.attempt) == (
        JobState.FAILED,
        {"code": "permission_denied"},
        1,
    )
    assert types(ledger, job_id)[-1] == "job_failed"


def test_attempts_exhaust_into_failed(ledger: tenure.Ledger) -> None:
    """After max_attempts retryable failures the job is failed, not queued forever."""
    job_id = ledger.submit("k", {}, max_attempts=3)
    for attempt in range(1, 4):
        lease = ledger.claim("w", lease_seconds=30)
        assert lease is not None and lease.attempt == attempt
        state = ledger.fail(lease, {"code": "flaky"}, retry_in=0.001)
        if attempt < 3:
            until_db_time_passes(ledger, ledger.get(job_id).run_after)
    assert state is JobState.FAILED
    assert ledger.get(job_id).state is JobState.FAILED
    assert ledger.claim("w", lease_seconds=30) is None


def test_release_gives_the_job_back_without_spending_the_attempt(ledger: tenure.Ledger) -> None:
    """release makes the job claimable at once; the next claim has the same attempt number."""
    job_id = ledger.submit("k", {}, max_attempts=1)
    lease = ledger.claim("w1", lease_seconds=30)
    assert lease is not None
    ledger.save_step(lease, 2, {"cursor": 2})
    ledger.release(lease)
    job = ledger.get(job_id)
    assert (job.state, job.attempt, job.owner_id, job.step) == (JobState.QUEUED, 0, None, 2)
    again = ledger.claim("w2", lease_seconds=30)
    assert again is not None
    assert (again.attempt, again.step) == (1, 2) and again.token > lease.token
    assert "job_released" in types(ledger, job_id)


# -- cancel and requeue ------------------------------------------------------------------------


def test_cancel_fences_a_running_worker(ledger: tenure.Ledger) -> None:
    """Cancel sets cancelled and bumps the token in one write: the worker cannot publish."""
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    ledger.cancel(job_id)
    job = ledger.get(job_id)
    assert job.state is JobState.CANCELLED and job.token > lease.token
    with pytest.raises(tenure.LeaseLost):
        ledger.complete(lease, {"late": True})
    with pytest.raises(tenure.LeaseLost):
        ledger.extend(lease)
    assert ledger.get(job_id).result is None


def test_claim_refuses_cancelled_jobs(ledger: tenure.Ledger) -> None:
    """A cancelled job is never claimed."""
    job_id = ledger.submit("k", {})
    ledger.cancel(job_id)
    assert ledger.claim("w", lease_seconds=30) is None
    assert types(ledger, job_id) == ["job_submitted", "job_cancelled"]


def test_cancel_of_a_terminal_job_raises(ledger: tenure.Ledger) -> None:
    """Cancelling a succeeded or cancelled job raises TerminalJob and changes nothing."""
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    ledger.complete(lease, 1)
    with pytest.raises(tenure.TerminalJob):
        ledger.cancel(job_id)
    assert ledger.get(job_id).state is JobState.SUCCEEDED
    other = ledger.submit("k", {})
    ledger.cancel(other)
    token = ledger.get(other).token
    with pytest.raises(tenure.TerminalJob):
        ledger.cancel(other)
    assert ledger.get(other).token == token


def test_requeue_resets_attempts_and_keeps_the_step(ledger: tenure.Ledger) -> None:
    """Requeue makes a cancelled job claimable from its step with attempt 0 and a new token."""
    job_id = ledger.submit("k", {}, max_attempts=2)
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    ledger.save_step(lease, 1, {"done": ["retrieve"]})
    ledger.cancel(job_id)
    cancelled_token = ledger.get(job_id).token
    ledger.requeue(job_id)
    job = ledger.get(job_id)
    assert (job.state, job.attempt, job.step, job.checkpoint) == (
        JobState.QUEUED,
        0,
        1,
        {"done": ["retrieve"]},
    )
    again = ledger.claim("w", lease_seconds=30)
    assert again is not None and again.attempt == 1
    assert again.token > cancelled_token > lease.token
    ledger.complete(again, "ok")
    assert types(ledger, job_id)[-3:] == ["job_requeued", "job_claimed", "job_succeeded"]


def test_requeue_of_a_failed_job(ledger: tenure.Ledger) -> None:
    """A failed job can be requeued; a queued, running or succeeded one cannot."""
    job_id = ledger.submit("k", {})
    with pytest.raises(tenure.InvalidTransition):
        ledger.requeue(job_id)
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    with pytest.raises(tenure.InvalidTransition):
        ledger.requeue(job_id)
    ledger.fail(lease, {"code": "bad"}, retryable=False)
    ledger.requeue(job_id)
    assert ledger.get(job_id).state is JobState.QUEUED
    done = ledger.submit("k", {"n": 2})
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    ledger.complete(lease, 1)
    assert lease.job_id in {job_id, done}


# -- reading -----------------------------------------------------------------------------------


def test_list_filters_and_pages_newest_first(ledger: tenure.Ledger) -> None:
    """list pages newest first with `after`, and filters by state, kind and tenant."""
    ids = [
        ledger.submit("ocr" if i % 2 else "pay", {"i": i}, tenant="acme" if i < 4 else "globex")
        for i in range(7)
    ]
    page1 = ledger.list(limit=3)
    page2 = ledger.list(limit=3, after=page1[-1].id)
    page3 = ledger.list(limit=3, after=page2[-1].id)
    assert [j.id for j in page1 + page2 + page3] == list(reversed(ids))
    assert {j.kind for j in ledger.list(kind="ocr")} == {"ocr"}
    assert len(ledger.list(tenant="acme")) == 4
    ledger.cancel(ids[0])
    assert [j.id for j in ledger.list(state="cancelled")] == [ids[0]]
    assert [j.id for j in ledger.list(state=JobState.CANCELLED, tenant="acme")] == [ids[0]]


def test_unknown_ids_raise_job_not_found_everywhere(ledger: tenure.Ledger) -> None:
    """get, events, stages, cancel, requeue and list(after=) raise JobNotFound for unknown ids."""
    missing = "00000000-0000-4000-8000-000000000000"
    for call in (ledger.get, ledger.events, ledger.stages, ledger.cancel, ledger.requeue):
        for job_id in (missing, "not-a-uuid", ""):
            with pytest.raises(tenure.JobNotFound):
                call(job_id)
    with pytest.raises(tenure.JobNotFound):
        ledger.list(after=missing)


def test_wait_returns_the_terminal_job(ledger: tenure.Ledger) -> None:
    """wait returns at once for a terminal job and the job as it is at the timeout otherwise."""
    job_id = ledger.submit("k", {})
    assert ledger.wait(job_id, timeout=0.05).state is JobState.QUEUED
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    ledger.complete(lease, {"v": 1})
    assert ledger.wait(job_id, timeout=5).result == {"v": 1}


def test_events_record_a_whole_life_in_order(ledger: tenure.Ledger) -> None:
    """Every transition writes one event; seq increases; tokens follow the claims."""
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    ledger.save_step(lease, 1, None)
    ledger.fail(lease, {"code": "x"}, retry_in=0.001)
    until_db_time_passes(ledger, ledger.get(job_id).run_after)
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    ledger.complete(lease, None)
    events = ledger.events(job_id)
    assert [e.type for e in events] == [
        "job_submitted",
        "job_claimed",
        "step_saved",
        "job_retry_scheduled",
        "job_claimed",
        "job_succeeded",
    ]
    first, second = claimed(ledger, job_id)
    assert [e.token for e in events] == [0, first, first, first, second, second]
    assert 0 < first < second
    assert [e.seq for e in events] == sorted(e.seq for e in events)
