"""`tenure.integrations.pydantic_ai` with Pydantic AI's own agent loop and its FunctionModel,
against real `tenure worker` processes killed with SIGKILL, a fenced bank on loopback, and an
agent process that ends at an approval and is started again to answer it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

import tenure
from tenure import JobState
from tenure.demo.bank import BankServer
from tenure.integrations.pydantic_ai import durable_tool, durable_toolset
from tests.support.apps import AMOUNT
from tests.support.fixtures import applied, kill_in_effect_then_start_another
from tests.support.fixtures import repeated_answer as answer
from tests.support.processes import ROOT
from tests.support.pydantic_agent import payer
from tests.support.waiting import poll

pytestmark = pytest.mark.slow


def test_a_worker_killed_mid_effect_gives_one_effect_and_the_same_answer(
    ledger: tenure.Ledger, db_url: str, workers: Any, bank: BankServer, tmp_path: Path
) -> None:
    """The agent's call is a job keyed by the conversation and the call id; its worker is
    SIGKILLed after the bank applied the charge; the run ends with the second worker's answer
    and the bank applied the charge once."""
    env = {"TENURE_TEST_RECEIVER": bank.url}
    doomed = workers.start(db_url, "A", env={**env, "TENURE_TEST_KILL_AT": "in_effect"})
    agent = payer(ledger, "pay", 5)

    def kill_a_then_start_b() -> None:
        kill_in_effect_then_start_another(workers, db_url, tmp_path, doomed, env)

    async def scenario() -> Any:
        run = asyncio.create_task(agent.run("Pay 5.", conversation_id="order-5"))
        await asyncio.to_thread(kill_a_then_start_b)
        return await asyncio.wait_for(run, 60)

    result = asyncio.run(scenario())
    (job,) = ledger.list(kind="pay")
    assert (job.state, job.attempt, job.idempotency_key) == (JobState.SUCCEEDED, 2, "order-5:pay-1")
    assert answer(result.output) == {"paid": 5, "by": "B"}
    assert applied(bank) == Counter({f"tool-job:{job.id}:charge": 1})


def test_an_agent_process_restarted_between_approval_and_answer_makes_one_effect(
    ledger: tenure.Ledger, db_url: str, workers: Any, bank: BankServer, tmp_path: Path
) -> None:
    """A process runs the agent until its tool's job waits for approval: the run ends with
    DeferredToolRequests and the process exits. Two fresh processes answer from the stored
    messages: the first sends the approval as the job's signal and gets the result; the second
    finds the same ended job. One job, one charge, the same answer."""
    workers.start(db_url, "W", env={"TENURE_TEST_RECEIVER": bank.url})
    messages = tmp_path / "messages.json"

    def agent_process(mode: str, out: str) -> subprocess.CompletedProcess[bytes]:
        command = [sys.executable, "-m", "tests.support.pydantic_agent", mode, str(messages)]
        return subprocess.run(
            [*command, str(tmp_path / out), db_url], cwd=ROOT, capture_output=True, timeout=120,
            check=False,
        )  # fmt: skip

    asked = agent_process("ask", "-")
    assert asked.returncode == 0, asked.stderr.decode()
    (job,) = ledger.list(kind="pay_approved")
    assert job.idempotency_key == "order-9:pay-1"
    poll(lambda: ledger.get(job.id).state is JobState.WAITING, 30, "the job to wait")
    assert applied(bank) == Counter()
    finals = []
    for out in ("first.json", "second.json"):
        answered = agent_process("answer", out)
        assert answered.returncode == 0, answered.stderr.decode()
        finals.append(answer(json.loads((tmp_path / out).read_text())["final"]))
    assert finals == [{"paid": 9, "by": "W"}] * 2
    assert [j.id for j in ledger.list(kind="pay_approved")] == [job.id]
    assert applied(bank) == Counter({f"tool-job:{job.id}:charge": 1})


def model_saying(call: ToolCallPart) -> FunctionModel:
    """Makes `call`, then repeats what came back: a tool return or a retry prompt."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart | RetryPromptPart):
            if isinstance(last, RetryPromptPart):
                return ModelResponse(parts=[TextPart(f"retry: {last.model_response()}")])
            return ModelResponse(parts=[TextPart(f"return: {last.model_response_str()}")])
        return ModelResponse(parts=[call])

    return FunctionModel(respond)


def test_bad_arguments_make_no_job_and_a_failed_job_is_the_tools_failure(
    make_app: Callable[[], tenure.App],
) -> None:
    """Arguments that do not fit the schema reach the model as the call's error and no job is
    made; a job that fails is a tool failure the model reads."""
    app = make_app()

    @app.job("refund", tool=True, description="Refund, once.", input_schema=AMOUNT,
             lease=5, heartbeat=1, jitter=1, max_attempts=1)  # fmt: skip
    def refund(ctx: tenure.JobContext, payload: Any) -> Any:
        raise tenure.NonRetryable("the order was never paid")

    tools = durable_toolset(app, ["refund"])
    bad = ToolCallPart("refund", {"amount": "seven"}, tool_call_id="bad-1")
    result = Agent(model_saying(bad), toolsets=[tools]).run_sync("Refund.", conversation_id="c")
    # The model reads the error (Pydantic AI answers the call with it) and may try again.
    assert "no job was made: amount: 'seven' is not of type 'integer'" in result.output
    assert app.ledger.list(kind="refund") == []

    @app.job("keep", tool=True, description="Keep a note.", input_schema={"type": "object"})
    def keep(ctx: tenure.JobContext, payload: Any) -> Any:
        return None

    nested: Any = 3
    for _ in range(80):  # the schema allows it; a job's payload may not nest that deep
        nested = [nested]
    keeping = durable_toolset(app, ["keep"])
    # (A lone surrogate never reaches a tool: Pydantic AI cannot serialise such a call.)
    for number, (note, words) in enumerate([(nested, "levels deep"), ("nul\x00", "NUL")]):
        call = ToolCallPart("keep", {"note": note}, tool_call_id=f"bad-note-{number}")
        result = Agent(model_saying(call), toolsets=[keeping]).run_sync("K.", conversation_id="e")
        assert "no job was made" in result.output and words in result.output, result.output
    assert app.ledger.list(kind="keep") == []
    good = ToolCallPart("refund", {"amount": 3}, tool_call_id="ok-1")
    with tenure.Worker(app, poll_interval=0.05):
        result = Agent(model_saying(good), toolsets=[tools]).run_sync("R.", conversation_id="d")
    assert "the order was never paid" in result.output
    (job,) = app.ledger.list(kind="refund")
    assert (job.state, job.idempotency_key) == (JobState.FAILED, "d:ok-1")


def test_the_tool_takes_its_words_and_schema_from_the_job_class(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.job("lookup", tool=True, input_schema=AMOUNT)
    def lookup(ctx: tenure.JobContext, payload: Any) -> Any:
        """Look an amount up."""

    tool = durable_tool(app, "lookup")
    assert (tool.name, tool.description) == ("lookup", "Look an amount up.")
    assert tool.function_schema.json_schema == AMOUNT
    with pytest.raises(tenure.InvalidArgument, match="no job class"):
        durable_tool(app, "nope")
    with pytest.raises(tenure.InvalidArgument, match="run_key"):
        durable_tool(app, "lookup", run_key="  ")


def test_a_job_that_waits_twice_defers_twice_and_takes_each_answer_once(
    make_app: Callable[[], tenure.App],
) -> None:
    """Each signal the job waits for ends the run deferred (naming it); each approval sends it
    with the call's metadata; the third run gets the result."""
    app = make_app()

    @app.job("twice", tool=True, description="Asks twice.", input_schema={"type": "object"},
             lease=5, heartbeat=1, jitter=1)  # fmt: skip
    def twice(ctx: tenure.JobContext, payload: Any) -> Any:
        return {"first": ctx.wait_for("first"), "second": ctx.wait_for("second")}

    call = ToolCallPart("twice", {}, tool_call_id="t-1")
    agent = Agent(model_saying(call), tools=[durable_tool(app, "twice")],
                  output_type=[str, DeferredToolRequests])  # fmt: skip
    asked = []
    with tenure.Worker(app, poll_interval=0.05):
        result = agent.run_sync("Go.", conversation_id="c-2")
        for answer_given in ("yes", "also yes"):
            assert isinstance(result.output, DeferredToolRequests)
            asked.append(result.output.metadata["t-1"]["signal"])
            # The metadata is the signal's payload, any JSON (Pydantic AI types it as a dict).
            answered: dict[str, Any] = {"t-1": answer_given}
            approvals = DeferredToolResults(approvals={"t-1": True}, metadata=answered)
            result = agent.run_sync(
                message_history=result.all_messages(), deferred_tool_results=approvals
            )
    assert asked == ["first", "second"]
    assert result.output == 'return: {"first":"yes","second":"also yes"}'
    (job,) = app.ledger.list(kind="twice")
    signals = [e.detail["name"] for e in app.ledger.events(job.id) if e.type == "signal_received"]
    assert signals == ["first", "second"]
