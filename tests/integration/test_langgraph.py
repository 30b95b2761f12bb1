"""`tenure.integrations.langgraph.durable_tool` in a real LangGraph graph: a `ToolNode` of two
parallel durable calls on a real checkpointer (SQLite, and PostgreSQL), the graph's process
SIGKILLed while the tools run and resumed on its thread; a job's wait for a signal as the
graph's `interrupt()`, answered by `Command(resume=...)`."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

import tenure
from tenure import JobState
from tenure.demo.bank import BankServer
from tenure.integrations.langgraph import MissingCallIdentity, durable_tool
from tests.support.apps import AMOUNT
from tests.support.fixtures import applied
from tests.support.processes import ROOT
from tests.support.waiting import poll
from tests.support.workers import Workers

pytestmark = pytest.mark.slow
THREAD = "thread-7"
ADD = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


class Graph:
    """`python -m tests.support.langgraph_agent` runs on one thread and checkpointer."""

    def __init__(self, db_url: str, folder: Path) -> None:
        self.db_url, self.folder = db_url, folder
        sqlite = f"{folder / 'checkpoints.db'}"
        self.checkpoints = db_url if db_url.startswith("postgresql://") else sqlite
        self.runs = 0

    def start(self, *command: str) -> tuple[subprocess.Popen[bytes], Path]:
        self.runs += 1
        out = self.folder / f"graph-{self.runs}.json"
        log = open(self.folder / f"graph-{self.runs}.log", "wb")  # noqa: SIM115 - the child keeps it
        args = [self.db_url, self.checkpoints, THREAD, str(out), *command]
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.langgraph_agent", *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        return process, out

    def run(self, *command: str) -> dict[str, Any]:
        process, out = self.start(*command)
        assert process.wait(60) == 0, out.with_suffix(".log").read_text()
        return dict(json.loads(out.read_text()))


def test_a_graph_killed_while_two_tools_run_resumes_with_each_effect_applied_once(
    ledger: tenure.Ledger, db_url: str, workers: Workers, bank: BankServer, tmp_path: Path
) -> None:
    """The model (scripted, minting its call ids) asks for two payments at once; the graph's
    process is SIGKILLed while both jobs run (the bank applied the first); resumed on the same
    thread it re-runs the tool node, finds both jobs and ends with their answers: two jobs, one
    charge each."""
    env = {"TENURE_TEST_RECEIVER": bank.url, "TENURE_TEST_KILL_AT": "in_effect"}
    workers.start(db_url, "W", "--concurrency", "2", env=env)
    graph = Graph(db_url, tmp_path)
    first, out = graph.start("start", "pay", "pay")
    poll(lambda: len(ledger.list(kind="pay")) == 2 or None, 30, "both tool jobs")
    poll(lambda: list(tmp_path.glob("at-in_effect-*")), 30, "a worker inside an effect")
    first.send_signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL and not out.exists()
    (tmp_path / "release-in_effect").touch()

    resumed = graph.run("resume")
    jobs = {job.idempotency_key: job for job in ledger.list(kind="pay")}
    assert set(jobs) == {f"{THREAD}:{call}" for call in resumed["calls"]}
    assert len(jobs) == 2
    said = json.loads(resumed["final"])
    assert [json.loads(s["content"]) for s in said] == [
        {"paid": 3, "by": "W"},
        {"paid": 4, "by": "W"},
    ]
    assert {s["status"] for s in said} == {"success"}
    assert sorted(a["job_id"] for a in resumed["artifacts"]) == sorted(j.id for j in jobs.values())
    assert all((j.state, j.attempt) == (JobState.SUCCEEDED, 1) for j in jobs.values())
    assert applied(bank) == Counter({f"tool-job:{j.id}:charge": 1 for j in jobs.values()})


def test_a_job_waiting_for_a_signal_is_the_graphs_interrupt_and_the_resume_its_answer(
    ledger: tenure.Ledger, db_url: str, workers: Workers, bank: BankServer, tmp_path: Path
) -> None:
    """A tool whose job waits for approval suspends the graph with interrupt() (the graph's
    process ends, the job waits without a lease); resumed in a new process with the answer,
    the tool sends it as the signal, the job pays once and the graph ends with its result."""
    workers.start(db_url, "W", env={"TENURE_TEST_RECEIVER": bank.url})
    graph = Graph(db_url, tmp_path)
    asked = graph.run("start", "pay_approved")
    (job,) = ledger.list(kind="pay_approved")
    assert asked["interrupts"] == [
        {"tenure_job": job.id, "signal": "approval", "call": job.idempotency_key}
    ]
    assert ledger.get(job.id).state is JobState.WAITING
    assert applied(bank) == Counter()

    answered = graph.run("answer", json.dumps({"ok": True}))
    assert json.loads(json.loads(answered["final"])[0]["content"]) == {"paid": 3, "by": "W"}
    assert [j.id for j in ledger.list(kind="pay_approved")] == [job.id]
    assert applied(bank) == Counter({f"tool-job:{job.id}:charge": 1})


def test_a_job_that_waits_for_two_signals_is_two_interrupts_each_answer_its_own(
    ledger: tenure.Ledger, db_url: str, workers: Workers, bank: BankServer, tmp_path: Path
) -> None:
    """The second resume re-runs the node from its start: the first interrupt takes its stored
    answer again and the second gets the new one, so each signal carries its own answer."""
    workers.start(db_url, "W", env={"TENURE_TEST_RECEIVER": bank.url})
    graph = Graph(db_url, tmp_path)
    first = graph.run("start", "pay_confirmed")
    (job,) = ledger.list(kind="pay_confirmed")
    assert [i["signal"] for i in first["interrupts"]] == ["approval"]
    second = graph.run("answer", json.dumps({"ok": True}))
    assert [i["signal"] for i in second["interrupts"]] == ["confirm"]
    done = graph.run("answer", json.dumps({"sure": "yes"}))
    assert json.loads(json.loads(done["final"])[0]["content"]) == {
        "paid": 3,
        "approval": {"ok": True},
        "confirm": {"sure": "yes"},
    }
    assert applied(bank) == Counter({f"tool-job:{job.id}:charge": 1})


def one_call_graph(app: tenure.App, kind: str, call_id: str) -> Any:
    """A graph whose model calls the durable tool `kind` once (`{"a": 1}`), then says done."""

    def model(state: MessagesState) -> Any:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage(content="done")]}
        call = {"name": kind, "args": {"a": 1}, "id": call_id, "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([durable_tool(app, kind)]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=InMemorySaver())


def test_an_async_graph_runs_the_same_tool_interrupt_included(
    make_app: Callable[[], tenure.App],
) -> None:
    """`graph.ainvoke` (the tool node awaits the tool): the job's signal wait is the graph's
    interrupt, the resume its answer; a worker in this process runs the job."""
    app = make_app()

    @app.job("add", tool=True, description="Add n to a.", input_schema=ADD)
    def add(ctx: tenure.JobContext, payload: Any) -> Any:
        return {"sum": payload["a"] + ctx.wait_for("n", timeout=60)}

    graph = one_call_graph(app, "add", "call_a")
    config: Any = {"configurable": {"thread_id": "t-async"}}

    async def scenario() -> tuple[Any, Any]:
        asked = await graph.ainvoke({"messages": [("user", "add")]}, config)
        return asked, await graph.ainvoke(Command(resume=41), config)

    with tenure.Worker(app, poll_interval=0.05):
        asked, done = asyncio.run(scenario())
    (job,) = app.ledger.list(kind="add")
    assert [i.value for i in asked["__interrupt__"]] == [
        {"tenure_job": job.id, "signal": "n", "call": "t-async:call_a"}
    ]
    tool_message = done["messages"][-2]
    assert (tool_message.content, tool_message.artifact) == (
        '{"sum":42}',
        {"job_id": job.id, "result": {"sum": 42}},
    )


def test_a_failed_job_is_the_tools_error_and_a_call_without_ids_makes_no_job(
    ledger: tenure.Ledger,
) -> None:
    """Outside a graph (no thread id) or without a tool call id the tool refuses; arguments
    that break the schema are a tool error and no job; a cancelled job is a tool error; a job
    not ended in time raises."""
    pay = durable_tool(ledger, "pay", args_schema=AMOUNT)
    call = {"name": "pay", "args": {"amount": 3}, "id": "call_1", "type": "tool_call"}
    with pytest.raises(MissingCallIdentity, match="thread id"):
        pay.invoke(call)
    with pytest.raises(MissingCallIdentity, match="tool call id"):
        pay.invoke({"amount": 3}, {"configurable": {"thread_id": "t"}})
    config: Any = {"configurable": {"thread_id": "t"}}
    bad = pay.invoke({**call, "args": {"amount": 0}}, config)
    assert bad.status == "error" and "no job was made" in bad.content
    assert ledger.list(kind="pay") == []

    job_id = ledger.submit("pay", {"amount": 3}, idempotency_key="t:call_1")
    ledger.cancel(job_id)
    cancelled = pay.invoke(call, config)
    assert (cancelled.status, cancelled.content) == ("error", f"job {job_id} was cancelled")
    slow = durable_tool(ledger, "pay", args_schema=AMOUNT, timeout=0.3)
    with pytest.raises(TimeoutError, match=r"has not ended after 0\.3 s"):
        slow.invoke({**call, "id": "call_2"}, config)  # no worker: the step fails, the job stays
    assert ledger.get(ledger.submit("pay", {"amount": 3}, idempotency_key="t:call_2")).state == (
        JobState.QUEUED
    )


def test_a_streamed_graph_gets_the_jobs_progress_as_custom_events(
    make_app: Callable[[], tenure.App],
) -> None:
    """With `stream_mode="custom"` the tool writes what it sees of its job: the state and
    step at the submit and as the job moves, the last one succeeded; without streaming the
    same graph runs as before."""
    app = make_app()
    gate = threading.Event()

    @app.job("staged", tool=True, description="Two steps.", input_schema=ADD)
    def staged(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.step("one", lambda: gate.wait(30))
        ctx.step("two", lambda: None)
        return {"a": payload["a"]}

    graph = one_call_graph(app, "staged", "call_s")
    config: Any = {"configurable": {"thread_id": "t-progress"}}
    events: list[Any] = []
    with tenure.Worker(app, poll_interval=0.05):
        for event in graph.stream({"messages": [("user", "go")]}, config, stream_mode="custom"):
            events.append(event)
            if event["state"] == "running":
                gate.set()  # the job goes on once its running was streamed
    (job,) = app.ledger.list(kind="staged")
    assert {e["tenure_job"] for e in events} == {job.id}
    assert {e["call"] for e in events} == {"t-progress:call_s"}
    states = [e["state"] for e in events]
    assert "running" in states and states[-1] == "succeeded"
    assert [e["step"] for e in events] == sorted(e["step"] for e in events)
    assert events[-1]["step"] == 2
