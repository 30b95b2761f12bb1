"""`tenure.Ask`: the question a waiting job puts to its MCP caller. Bad questions are refused
where they are written; a stored question survives the wait and its words reach the job's
`wait` column, never an event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import JobState
from tenure.errors import InvalidArgument, PayloadTooLarge
from tenure.mcp.tasks import input_requests, signal_payload
from tenure.waits import awaited_ask
from tests.integration.test_waits import ended, waiting
from tests.support.timing import FAST

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: tenure.Ask.form(""), "non-empty string"),
        (lambda: tenure.Ask.form(None), "non-empty string"),  # type: ignore[arg-type]
        (lambda: tenure.Ask.form("ok?", {"type": "array"}), "object schema"),
        (lambda: tenure.Ask.form("ok?", []), "object schema"),  # type: ignore[arg-type]
        (lambda: tenure.Ask.form("nul\x00here"), "NUL"),
        (lambda: tenure.Ask.form("lone \ud800"), "surrogate"),
        (lambda: tenure.Ask.form("ok?", {"type": "object", "x": nested(200)}), "deep"),
        (lambda: tenure.Ask.sample("hi", max_tokens=0), "from 1 to"),
        (lambda: tenure.Ask.sample("hi", max_tokens=10**30), "from 1 to"),
        (lambda: tenure.Ask.sample("hi", max_tokens=True), "integer"),
        (lambda: tenure.Ask.sample("hi", max_tokens="5"), "integer"),  # type: ignore[arg-type]
        (lambda: tenure.Ask.sample("hi", system=""), "non-empty string"),
    ],
)
def test_bad_questions_are_refused_where_they_are_written(
    build: Callable[[], tenure.Ask], words: str
) -> None:
    with pytest.raises(InvalidArgument, match=words):
        build()


def test_a_question_is_bounded_like_a_payload() -> None:
    with pytest.raises(PayloadTooLarge):
        tenure.Ask.form("x" * 70_000)


def test_answers_of_the_wrong_shape_are_refused() -> None:
    form, sample, roots = tenure.Ask.form("ok?"), tenure.Ask.sample("hi"), tenure.Ask.roots()
    assert form.answer({"action": "accept", "content": {"ok": True}}) == {"ok": True}
    assert form.answer({"action": "decline"}) == {"action": "decline"}
    text = {"type": "text", "text": "hello"}
    assert sample.answer({"role": "assistant", "content": text}) == {
        "role": "assistant",
        "content": text,
    }
    assert roots.answer({"roots": []}) == {"roots": []}
    for ask, bad in [
        (form, 12345),
        (form, {"action": "maybe"}),
        (form, {"action": "accept", "content": [1]}),
        (sample, "hello"),
        (sample, {"role": "assistant"}),
        (roots, {"roots": "file:///"}),
        (roots, None),
    ]:
        with pytest.raises(InvalidArgument):
            ask.answer(bad)


def test_a_waiting_job_keeps_its_question_and_events_keep_only_its_method(
    make_app: Callable[[], tenure.App],
) -> None:
    """The question is stored with the wait (the MCP server reads it from the job), the
    answer resumes the job, and no event holds the question's words; `ask=` of another type
    fails the job's attempt clearly and suspends nothing."""
    app = make_app()

    @app.job("asks", **FAST)
    def asks(ctx: tenure.JobContext, payload: Any) -> Any:
        form = tenure.Ask.form("Secret question?", SCHEMA)
        return ctx.wait_for("answer", timeout=60, ask=form)

    @app.job("asks_badly", max_attempts=1, **FAST)
    def asks_badly(ctx: tenure.JobContext, payload: Any) -> Any:
        return ctx.wait_for("answer", ask={"method": "roots/list"})  # type: ignore[arg-type]

    ledger = app.ledger
    job_id = ledger.submit("asks", {})
    bad_id = ledger.submit("asks_badly", {})
    with tenure.Worker(app, poll_interval=0.05):
        held = waiting(ledger, job_id)
        ask = awaited_ask(held, "answer")
        assert ask == tenure.Ask.form("Secret question?", SCHEMA)
        assert input_requests(held, None) == {"answer": ask.document()}
        payload = signal_payload(held, "answer", {"action": "accept", "content": {"ok": True}})
        ledger.signal(job_id, "answer", payload)
        done = ended(ledger, job_id)
        refused = ended(ledger, bad_id)
    assert (done.state, done.result) == (JobState.SUCCEEDED, {"ok": True})
    assert refused.state is JobState.FAILED
    assert refused.error["error_type"] == "InvalidArgument"
    assert "job_waiting" not in [e.type.value for e in ledger.events(bad_id)]
    events = ledger.events(job_id)
    assert [e.detail.get("ask") for e in events if e.type.value == "job_waiting"] == [
        "elicitation/create"
    ]
    assert "Secret" not in repr(events)


def test_a_wait_document_is_parsed_once_into_its_state() -> None:
    """`WaitState` reads a stored `wait`: a held job by its flag and, as older rows wrote it,
    by position -1; a deadline as a time; an unknown kind as no state at all."""
    from tenure.wait_state import WaitFor, WaitState
    from tenure.waits import describe_wait

    held = WaitState.parse({"for": "signal", "name": "release", "position": -1, "held": True})
    older = WaitState.parse({"for": "signal", "name": "release", "position": -1})
    own = WaitState.parse({"for": "signal", "name": "approval", "position": 2})
    assert held is not None and held.held and held.signal == "release"
    assert older is not None and older.held
    assert own is not None and not own.held and own.position == 2
    until = "2030-01-01T00:00:00+00:00"
    jobs = WaitState.parse({"for": "jobs", "jobs": ["a", "b"], "position": 0, "until": until})
    assert jobs is not None and jobs.wait_for is WaitFor.JOBS and jobs.jobs == ("a", "b")
    assert describe_wait(jobs) == (f"2 child jobs until {until}")
    assert WaitState.parse({"for": "nonsense"}) is None
    assert WaitState.parse(None) is None and describe_wait(None) == ""
