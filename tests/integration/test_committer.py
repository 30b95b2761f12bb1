"""The committer: results handed over without waiting, answered on its thread, two statements
in flight at once (issue 20)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import tenure
from tenure.ledger import lease_port
from tenure.runtime.committer import ClaimSpec, Committer
from tenure.runtime.supervisor import Supervisor
from tests.support.waiting import poll


def _crashes() -> tuple[Supervisor, list[BaseException]]:
    crashes: list[BaseException] = []
    return Supervisor(lambda task, exc: crashes.append(exc)), crashes


def test_a_result_is_handed_over_and_answered_on_the_committer_thread(
    ledger: tenure.Ledger,
) -> None:
    """`hand_over` returns at once; the answer (None: published) comes as a call on a committer
    thread, and the job is then `succeeded`."""
    supervisor, crashes = _crashes()
    committer = Committer(lease_port(ledger), supervisor)
    committer.start()
    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", lease_seconds=30)
    assert lease is not None
    answers: list[tuple[BaseException | None, str]] = []
    answered = threading.Event()

    def answer(error: BaseException | None) -> None:
        answers.append((error, threading.current_thread().name))
        answered.set()

    try:
        assert committer.hand_over(lease, {"ok": True}, answer)
        assert answered.wait(10), "no answer within 10 s"
    finally:
        committer.stop()
    assert answers == [(None, "tenure-commit")]
    job = ledger.get(job_id)
    assert job is not None and job.state is tenure.JobState.SUCCEEDED
    assert job.result == {"ok": True}
    assert not crashes


def test_a_stale_lease_is_answered_lease_lost_and_a_stopped_committer_takes_nothing(
    ledger: tenure.Ledger,
) -> None:
    """Another owner's lease makes the answer `LeaseLost`; once stopped, `hand_over` says
    False (the caller writes itself) and `complete` writes directly."""
    supervisor, _ = _crashes()
    committer = Committer(lease_port(ledger), supervisor)
    committer.start()
    ledger.submit("k", {})
    stale = ledger.claim("w1", lease_seconds=30)
    assert stale is not None
    ledger.cancel(stale.job_id)  # bumps the token: the lease held is no longer the job's
    answers: list[BaseException | None] = []
    answered = threading.Event()

    def answer(error: BaseException | None) -> None:
        answers.append(error)
        answered.set()

    try:
        assert committer.hand_over(stale, None, answer)
        assert answered.wait(10), "no answer within 10 s"
    finally:
        committer.stop()
    assert len(answers) == 1 and isinstance(answers[0], tenure.LeaseLost)
    second_id = ledger.submit("k", {})
    lease = ledger.claim("w2", lease_seconds=30)
    assert lease is not None and lease.job_id == second_id
    assert not committer.hand_over(lease, None, answer)
    committer.complete(lease, {"direct": True})
    job = ledger.get(second_id)
    assert job is not None and job.state is tenure.JobState.SUCCEEDED


class _StallFirstClaim:
    """A claimer whose first statement's callback waits until a second statement finished:
    only a second committer thread can publish meanwhile."""

    def __init__(self) -> None:
        self.second_published = threading.Event()
        self.first = True
        self.waited: bool | None = None

    def claims_with_results(self) -> bool:
        return True

    def reserve_claim(self) -> ClaimSpec | None:
        return ClaimSpec("w", ["none-such"], 30.0, 1)

    def claimed(self, spec: ClaimSpec, leases: list[tenure.Lease], sent_at: float) -> None:
        if self.first:
            self.first = False
            self.waited = self.second_published.wait(10)


def _commit_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "tenure-commit")


def test_two_committer_threads_where_writes_run_in_parallel(ledger: tenure.Ledger) -> None:
    """PostgreSQL gets two committer threads; SQLite, whose writes take turns on one lock, one
    (a second only put the busiest process in the queue twice: issue 20's fairness run)."""
    supervisor, _ = _crashes()
    before = _commit_threads()
    committer = Committer(lease_port(ledger), supervisor)
    committer.start()
    try:
        started = _commit_threads() - before
    finally:
        committer.stop()
    assert started == (2 if ledger._store.parallel_writes else 1)


def test_a_second_statement_goes_out_while_the_first_is_still_busy(
    ledger: tenure.Ledger,
) -> None:
    """While one committer thread is held inside its statement's callback, a result handed over
    meanwhile is published by the other: two statements in flight (PostgreSQL)."""
    if not ledger._store.parallel_writes:
        pytest.skip("SQLite runs one committer: its writes take turns on one lock")
    supervisor, crashes = _crashes()
    claimer = _StallFirstClaim()
    committer = Committer(lease_port(ledger), supervisor, claimer)
    committer.start()
    ledger.submit("k", {})
    ledger.submit("k", {})
    first = ledger.claim("w", lease_seconds=30)
    second = ledger.claim("w", lease_seconds=30)
    assert first is not None and second is not None
    answered: dict[str, BaseException | None] = {}

    def answer_for(lease: tenure.Lease) -> Callable[[BaseException | None], None]:
        def answer(error: BaseException | None) -> None:
            answered[lease.job_id] = error
            if lease is second:
                claimer.second_published.set()

        return answer

    try:
        assert committer.hand_over(first, None, answer_for(first))
        poll(lambda: first.job_id in answered or None, 10, "the first answer")
        assert committer.hand_over(second, None, answer_for(second))
        poll(lambda: claimer.waited is not None or None, 15, "the first statement to go on")
    finally:
        claimer.second_published.set()
        committer.stop()
    assert claimer.waited is True, "the second result waited for the first statement"
    assert answered == {first.job_id: None, second.job_id: None}
    assert not crashes
