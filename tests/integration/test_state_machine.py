"""A hypothesis state machine: the ledger against a small model of job states and leases."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import tenure
from tenure import JobState
from tests.support.databases import PostgresServer, drop_schema, new_schema, with_schema
from tests.support.tokens import micros
from tests.support.waiting import until_db_time_passes

LEASE_OPS = ["extend", "save_step", "complete", "fail_retry", "fail_final", "release"]
TERMINAL = {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}


@dataclass
class ModelJob:
    id: str
    max_attempts: int
    state: JobState = JobState.QUEUED
    token: int = 0
    attempt: int = 0
    step: int = 0
    result: object = None


def make_machine(open_url: Callable[[], tuple[str, Callable[[], None]]]) -> type:
    owners = itertools.count()

    class LedgerMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.url, self.cleanup = open_url()
            self.ledger = tenure.connect(self.url, backoff_base=0.001, backoff_cap=0.005)
            self.jobs: list[ModelJob] = []
            self.by_id: dict[str, ModelJob] = {}
            self.leases: list[tenure.Lease] = []

        def teardown(self) -> None:
            self.ledger.close()
            self.cleanup()

        @rule(max_attempts=st.integers(1, 3))
        def submit(self, max_attempts: int) -> None:
            job_id = self.ledger.submit("k", {"n": len(self.jobs)}, max_attempts=max_attempts)
            job = ModelJob(job_id, max_attempts)
            self.jobs.append(job)
            self.by_id[job_id] = job

        @rule()
        def claim(self) -> None:
            floor = micros(self.ledger.now())
            lease = self.ledger.claim(f"w{next(owners)}", lease_seconds=600)
            expected = next((j for j in self.jobs if j.state is JobState.QUEUED), None)
            if expected is None:
                assert lease is None
                return
            assert lease is not None and lease.job_id == expected.id
            expected.state = JobState.RUNNING
            # Invariant 16: above the job's token before, and at least the database clock.
            assert lease.token > expected.token and lease.token >= floor
            expected.token = lease.token
            expected.attempt += 1
            assert (lease.attempt, lease.step) == (expected.attempt, expected.step)
            self.leases.append(lease)

        @precondition(lambda self: self.leases)
        @rule(pick=st.integers(0, 10_000), op=st.sampled_from(LEASE_OPS))
        def act(self, pick: int, op: str) -> None:
            lease = self.leases[pick % len(self.leases)]
            job = self.by_id[lease.job_id]
            holds = job.state is JobState.RUNNING and job.token == lease.token
            if not holds:
                with pytest.raises(tenure.LeaseLost):
                    self._do(op, lease, job)
                return
            self._do(op, lease, job)
            if op == "save_step":
                job.step += 1
            elif op == "complete":
                job.state, job.result = JobState.SUCCEEDED, {"token": lease.token}
            elif op == "fail_retry":
                retry = job.attempt < job.max_attempts
                job.state = JobState.QUEUED if retry else JobState.FAILED
                if retry:
                    until_db_time_passes(self.ledger, self.ledger.get(job.id).run_after)
            elif op == "fail_final":
                job.state = JobState.FAILED
            elif op == "release":
                job.state, job.attempt = JobState.QUEUED, job.attempt - 1

        def _do(self, op: str, lease: tenure.Lease, job: ModelJob) -> None:
            if op == "extend":
                self.ledger.extend(lease)
            elif op == "save_step":
                self.ledger.save_step(lease, job.step + 1, {"step": job.step + 1})
            elif op == "complete":
                self.ledger.complete(lease, {"token": lease.token})
            elif op == "fail_retry":
                self.ledger.fail(lease, {"code": "flaky"})
            elif op == "fail_final":
                self.ledger.fail(lease, {"code": "denied"}, retryable=False)
            else:
                self.ledger.release(lease)

        @precondition(lambda self: self.jobs)
        @rule(pick=st.integers(0, 10_000))
        def cancel(self, pick: int) -> None:
            job = self.jobs[pick % len(self.jobs)]
            if job.state in TERMINAL:
                with pytest.raises(tenure.TerminalJob):
                    self.ledger.cancel(job.id)
                return
            self.ledger.cancel(job.id)
            job.state = JobState.CANCELLED
            bumped = self.ledger.get(job.id).token
            assert bumped > job.token
            job.token = bumped

        @precondition(lambda self: self.jobs)
        @rule(pick=st.integers(0, 10_000))
        def requeue(self, pick: int) -> None:
            job = self.jobs[pick % len(self.jobs)]
            if job.state not in {JobState.FAILED, JobState.CANCELLED}:
                with pytest.raises(tenure.InvalidTransition):
                    self.ledger.requeue(job.id)
                return
            self.ledger.requeue(job.id)
            job.state, job.attempt = JobState.QUEUED, 0

        @invariant()
        def ledger_matches_model(self) -> None:
            for job in self.jobs:
                got = self.ledger.get(job.id)
                assert (got.state, got.token, got.attempt, got.step) == (
                    job.state,
                    job.token,
                    job.attempt,
                    job.step,
                ), job.id
                if job.state is JobState.SUCCEEDED:
                    assert got.result == job.result
                assert (got.lease_until is not None) == (job.state is JobState.RUNNING)

    return LedgerMachine


def test_ledger_follows_the_state_model(backend: str, request: pytest.FixtureRequest) -> None:
    """Random sequences of submit/claim/extend/step/complete/fail/release/cancel/requeue keep
    the ledger equal to the model: states, tokens, attempts, steps, results, who may write."""
    if backend == "sqlite":

        def open_url() -> tuple[str, Callable[[], None]]:
            folder = tempfile.TemporaryDirectory()
            return f"sqlite:///{Path(folder.name) / 't.db'}", folder.cleanup
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")

        def open_url() -> tuple[str, Callable[[], None]]:
            schema = new_schema(server)
            return with_schema(server.url, schema), lambda: drop_schema(server, schema)

    run_state_machine_as_test(
        make_machine(open_url),
        settings=settings(max_examples=25, stateful_step_count=30, deadline=None),
    )
