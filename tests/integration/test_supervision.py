"""The worker supervises its side tasks: one that dies stops the worker loudly (logged at
CRITICAL with its name, raised from `run()`), and no handler waits forever for it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure.runtime.committer import ClaimSpec
from tests.support.timing import FAST
from tests.support.waiting import poll


class CommitterCallbackBreaks(tenure.Worker):
    """A worker whose claim callback (run by the committer thread) raises once: a bug in
    tenure's own code on a side task, which must not leave handlers waiting."""

    def claimed(self, spec: ClaimSpec, leases: list[tenure.Lease], sent_at: float) -> None:
        super().claimed(spec, leases, sent_at)
        raise RuntimeError("a bug in the committer's callback")


def _one_job_app(make_app: Callable[[], tenure.App]) -> tuple[tenure.App, threading.Event]:
    app = make_app()
    returned = threading.Event()

    @app.job("quick", **FAST)
    def quick(ctx: tenure.JobContext, payload: Any) -> dict[str, bool]:
        returned.set()
        return {"done": True}

    return app, returned


def test_a_dying_committer_stops_an_embedded_worker_and_publishes_what_it_had(
    make_app: Callable[[], tenure.App], caplog: pytest.LogCaptureFixture
) -> None:
    """The committer's callback raises after its statement: the result it carried is
    published, the worker stops by itself, `crashed` says why, CRITICAL names the task."""
    app, _returned = _one_job_app(make_app)
    worker = CommitterCallbackBreaks(app, concurrency=2)
    submitted: list[str] = []

    def crashed_after_another_job() -> BaseException | None:
        # The committer claims (and so calls back) only when the claim loop is not claiming
        # at that moment: each job is one more chance, within the deadline.
        if worker.crashed is None:
            submitted.append(app.submit("quick", {}))
            app.ledger.wait(submitted[-1], 5)
        return worker.crashed

    with caplog.at_level(logging.CRITICAL, logger="tenure.worker"):
        worker.start()
        try:
            crashed = poll(crashed_after_another_job, 30, "the committer's callback to raise")
            poll(lambda: worker.running == 0 or None, 20, "the worker to stop by itself")
        finally:
            worker.stop()
    assert isinstance(crashed, RuntimeError)
    # The crash may land just after a job's end was awaited, so that one more job was submitted
    # to a worker that then stopped: that last job was never claimed, never carried.
    states = [app.ledger.get(job_id).state for job_id in submitted]
    if len(states) > 1 and states[-1] is tenure.JobState.QUEUED:
        states.pop()
    assert set(states) == {tenure.JobState.SUCCEEDED}, "a result the committer carried was lost"
    crashes = [r for r in caplog.records if getattr(r, "tenure_event", "") == "side_task_crashed"]
    assert [r.tenure_fields["task"] for r in crashes] == ["commit"]  # type: ignore[attr-defined]


def test_run_raises_when_a_side_task_died(make_app: Callable[[], tenure.App]) -> None:
    """`Worker.run()` returns by itself after a side task died and raises, naming the task."""
    app, _returned = _one_job_app(make_app)
    app.ledger.submit_many("quick", [{}] * 50)
    worker = CommitterCallbackBreaks(app, concurrency=2)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            outcome.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    runner.join(30)
    assert not runner.is_alive(), "run() kept going after its side task died"
    assert len(outcome) == 1 and isinstance(outcome[0], tenure.TenureError)
    assert "'commit'" in str(outcome[0])
    assert isinstance(outcome[0].__cause__, RuntimeError)
