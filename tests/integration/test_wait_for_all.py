"""A wait for several signals at once (`ctx.wait_for_all`), on both backends: each signal is
taken as it comes and only the last wakes the job (one resume, whatever the order or the
concurrency); the job's row says which are still to come; a timeout, a replay and bad input."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import JobState
from tenure.errors import InvalidArgument
from tenure.types import EventType
from tenure.waits import awaited_signals
from tests.support.timing import FAST
from tests.support.waiting import poll

QUESTIONS = {
    "name": tenure.Ask.form("Your name?", {"type": "object", "properties": {}}),
    "greeting": tenure.Ask.sample("Write a greeting"),
    "roots": tenure.Ask.roots(),
}


def waiting_for(ledger: tenure.Ledger, job_id: str, names: tuple[str, ...]) -> tenure.Job:
    return poll(
        lambda: (
            (job := ledger.get(job_id)).state is JobState.WAITING
            and awaited_signals(job) == names
            and job
        ),
        20,
        f"the job to wait for {names}",
    )


def ended(ledger: tenure.Ledger, job_id: str) -> tenure.Job:
    return poll(lambda: (job := ledger.get(job_id)).terminal and job, 30, "the job to end")


def woke(ledger: tenure.Ledger, job_id: str) -> list[tuple[str, bool]]:
    """Each stored signal's name and whether it woke the job."""
    return [
        (str(event.detail["name"]), bool(event.detail["woke"]))
        for event in ledger.events(job_id)
        if event.type is EventType.SIGNAL_RECEIVED
    ]


def test_each_answer_is_taken_as_it_comes_and_only_the_last_wakes_the_job(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()
    runs: list[int] = []

    @app.job("asks_three", **FAST)
    def asks_three(ctx: tenure.JobContext, payload: Any) -> Any:
        runs.append(1)
        return ctx.wait_for_all(QUESTIONS, timeout=600)

    ledger = app.ledger
    job_id = ledger.submit("asks_three", {})
    # A signal sent before the wait counts: the wait starts with two still to come.
    ledger.signal(job_id, "roots", {"roots": []})
    with tenure.Worker(app, poll_interval=0.05):
        held = waiting_for(ledger, job_id, ("name", "greeting"))
        assert held.wait is not None and held.wait.describe().startswith("signals name, greeting")
        assert sorted(held.wait.asks) == ["greeting", "name", "roots"]
        ledger.signal(job_id, "greeting", {"text": "hi"})
        waiting_for(ledger, job_id, ("name",))  # still waiting, for one
        ledger.signal(job_id, "name", {"name": "Alice"})
        done = ended(ledger, job_id)
    assert (done.state, done.result) == (
        JobState.SUCCEEDED,
        {"name": {"name": "Alice"}, "greeting": {"text": "hi"}, "roots": {"roots": []}},
    )
    assert woke(ledger, job_id) == [("roots", False), ("greeting", False), ("name", True)]
    assert len(runs) == 2  # suspended once, resumed once: a partial answer wakes no one
    waited = [e for e in ledger.events(job_id) if e.type is EventType.JOB_WAITING]
    assert waited[0].detail["asks"] == {
        "name": "elicitation/create",
        "greeting": "sampling/createMessage",
        "roots": "roots/list",
    }  # the questions' methods, never their words
    assert "Your name?" not in repr([e.detail for e in ledger.events(job_id)])


def test_the_last_two_answers_sent_at_once_always_wake_the_job(
    make_app: Callable[[], tenure.App],
) -> None:
    """Two signals of one job meet on its row: whichever commits second sees the first's
    `pending` and wakes the job. Repeated on 20 jobs, two threads released together."""
    app = make_app()

    @app.job("asks_two", **FAST)
    def asks_two(ctx: tenure.JobContext, payload: Any) -> Any:
        return ctx.wait_for_all({"a": None, "b": None})

    ledger = app.ledger
    jobs = [ledger.submit("asks_two", {"n": n}) for n in range(20)]
    with tenure.Worker(app, concurrency=4, poll_interval=0.05):
        for job_id in jobs:
            waiting_for(ledger, job_id, ("a", "b"))
            start = threading.Barrier(2)
            errors: list[BaseException] = []

            def send(
                name: str,
                job_id: str = job_id,
                start: threading.Barrier = start,
                errors: list[BaseException] = errors,
            ) -> None:
                try:
                    start.wait(5)
                    ledger.signal(job_id, name, name)
                except BaseException as exc:  # reported below, not swallowed
                    errors.append(exc)

            threads = [threading.Thread(target=send, args=(name,)) for name in ("a", "b")]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []
        for job_id in jobs:
            done = ended(ledger, job_id)
            assert (done.state, done.result) == (JobState.SUCCEEDED, {"a": "a", "b": "b"})
            assert sorted(w for _, w in woke(ledger, job_id)) == [False, True]


def test_a_wait_for_several_times_out_and_keeps_what_came(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.job("asks_in_time", **FAST)
    def asks_in_time(ctx: tenure.JobContext, payload: Any) -> Any:
        try:
            return ctx.wait_for_all({"a": None, "b": None}, timeout=0.5)
        except tenure.WaitTimeout as exc:
            return {"timed_out": str(exc)}

    ledger = app.ledger
    job_id = ledger.submit("asks_in_time", {})
    ledger.signal(job_id, "a", 1)
    with tenure.Worker(app, poll_interval=0.05):
        done = ended(ledger, job_id)
    assert done.result == {"timed_out": "signals a, b did not all arrive within 0.5s"}
    report = tenure.replay.replay(ledger, job_id, app)  # it waits for nothing
    assert (report.replayed_result, report.differences) == (done.result, 0)


@pytest.mark.parametrize(
    ("questions", "message"),
    [
        ({}, "non-empty mapping"),
        (["a", "b"], "non-empty mapping"),
        ({f"s{n}": None for n in range(17)}, "at most 16 signals"),
        ({"a": {"method": "roots/list"}}, "must be a tenure.Ask or None"),
        ({"bad\x00name": None}, "signal name"),
    ],
)
def test_a_bad_wait_for_several_is_refused_clearly_and_waits_for_nothing(
    make_app: Callable[[], tenure.App], questions: Any, message: str
) -> None:
    app = make_app()

    @app.job("asks_badly", max_attempts=1, **FAST)
    def asks_badly(ctx: tenure.JobContext, payload: Any) -> Any:
        try:
            return ctx.wait_for_all(questions)
        except InvalidArgument as exc:
            return {"refused": str(exc)}

    ledger = app.ledger
    job_id = ledger.submit("asks_badly", {})
    with tenure.Worker(app, poll_interval=0.05):
        done = ended(ledger, job_id)
    assert done.state is JobState.SUCCEEDED
    assert message in done.result["refused"]
    assert ledger.stages(job_id) == []  # no wait was recorded
