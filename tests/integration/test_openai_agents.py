"""`tenure.integrations.openai_agents.durable_tool` with the OpenAI Agents SDK's own runner and
its scripted test model, against real `tenure worker` processes killed with SIGKILL, a fenced
bank on loopback, `tenure serve` for a process that only has a `Client`, and an agent process
killed mid-call and restored from its saved `RunState`."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner
from agents.exceptions import UserError

import tenure
from tenure import JobState
from tenure.demo.bank import BankServer
from tenure.integrations.openai_agents import MissingRunKey, durable_tool
from tests.support.apps import AMOUNT
from tests.support.fixtures import applied, kill_in_effect_then_start_another
from tests.support.fixtures import repeated_answer as answer
from tests.support.openai_agent import agent, answers, asks_to_pay
from tests.support.processes import ROOT
from tests.support.service import LiveServer
from tests.support.waiting import poll
from tests.support.workers import Workers

pytestmark = pytest.mark.slow


def final(result: Any) -> str:
    return str(result.final_output)


def test_the_run_finishes_with_the_second_workers_result_when_the_first_is_killed_mid_effect(
    ledger: tenure.Ledger, db_url: str, workers: Workers, bank: BankServer, tmp_path: Path
) -> None:
    """The agent's call is a job keyed by the run key and the model's call id; its worker is
    SIGKILLed after the bank applied the charge; the run ends with the second worker's answer
    and the bank applied the charge once."""
    env = {"TENURE_TEST_RECEIVER": bank.url}
    doomed = workers.start(db_url, "A", env={**env, "TENURE_TEST_KILL_AT": "in_effect"})
    pay = durable_tool(ledger, "pay", params_schema=AMOUNT, run_key="order-5")
    payer = agent([pay], [asks_to_pay(5), answers()])

    def kill_a_then_start_b() -> None:
        kill_in_effect_then_start_another(workers, db_url, tmp_path, doomed, env)

    async def scenario() -> Any:
        run = asyncio.create_task(Runner.run(payer, "Pay 5."))
        await asyncio.to_thread(kill_a_then_start_b)
        return await asyncio.wait_for(run, 60)

    result = asyncio.run(scenario())
    (job,) = ledger.list(kind="pay")
    assert (job.state, job.attempt) == (JobState.SUCCEEDED, 2)
    assert answer(final(result)) == {"paid": 5, "by": "B"}
    call_id = job.idempotency_key.removeprefix("order-5:")  # type: ignore[union-attr]
    assert call_id.startswith("call_") and job.idempotency_key == f"order-5:{call_id}"
    assert applied(bank) == Counter({f"tool-job:{job.id}:charge": 1})


def test_an_agent_killed_mid_call_and_restored_from_its_run_state_finds_the_same_job(
    ledger: tenure.Ledger, db_url: str, workers: Workers, bank: BankServer, tmp_path: Path
) -> None:
    """A process with only a Client: the run is interrupted for approval and its RunState
    saved, approved, and the process SIGKILLed while the job runs; restored from the saved
    state (twice) it finds the same job: one job, one effect, the same answer."""
    key = ledger.operations.create_tenant("acme")
    workers.start(
        db_url, "W", env={"TENURE_TEST_RECEIVER": bank.url, "TENURE_TEST_KILL_AT": "in_effect"}
    )
    state = tmp_path / "run-state.json"
    with LiveServer(ledger) as server:

        def agent_process(out: str) -> subprocess.Popen[bytes]:
            command = [sys.executable, "-m", "tests.support.openai_agent", str(state)]
            return subprocess.Popen(
                [*command, str(tmp_path / out), server.url, key],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=open(tmp_path / f"{out}.log", "wb"),
            )

        first = agent_process("first.json")
        job = poll(lambda: next(iter(ledger.list(kind="pay")), None), 30, "the tool's job")
        poll(lambda: list(tmp_path.glob("at-in_effect-*")), 30, "the worker inside the effect")
        assert state.exists()
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        (tmp_path / "release-in_effect").touch()

        answers_seen = []
        for out in ("second.json", "third.json"):
            process = agent_process(out)
            assert process.wait(60) == 0, (tmp_path / f"{out}.log").read_text()
            answers_seen.append(json.loads((tmp_path / out).read_text())["final"])

    assert not (tmp_path / "first.json").exists()
    assert [answer(text) for text in answers_seen] == [{"paid": 7, "by": "W"}] * 2
    assert [j.id for j in ledger.list(kind="pay")] == [job.id]
    assert ledger.get(job.id).tenant == "acme"
    saved_call_ids = {
        item["raw_item"]["call_id"]
        for item in json.loads(state.read_text())["generated_items"]
        if item.get("type") == "tool_approval_item"
    }
    assert {job.idempotency_key} == {f"order-77:{call}" for call in saved_call_ids}
    assert applied(bank) == Counter({f"tool-job:{job.id}:charge": 1})


def test_a_cancelled_job_is_the_models_tool_error_and_bad_calls_make_no_job(
    ledger: tenure.Ledger, make_app: Callable[[], tenure.App]
) -> None:
    """No run key: the tool refuses and no job is made. Arguments that break the schema: a
    tool error for the model, no job. A job cancelled while the agent waits: the model is told
    so (never a success). A job not ended in time: the run stops."""
    pay = durable_tool(ledger, "pay", params_schema=AMOUNT)
    with pytest.raises(UserError, match="run key") as refused:
        asyncio.run(Runner.run(agent([pay], [asks_to_pay(3)]), "Pay 3."))
    assert isinstance(refused.value.__cause__, MissingRunKey)  # the SDK wraps what a tool raised
    keyed = durable_tool(ledger, "pay", params_schema=AMOUNT, run_key=lambda ctx: "order-3")
    bad = asyncio.run(Runner.run(agent([keyed], [asks_to_pay(-1), answers()]), "Pay -1."))
    assert final(bad).startswith("done: error: invalid arguments, no job was made: amount:")
    assert ledger.list(kind="pay") == []

    async def cancelled() -> Any:
        run = asyncio.create_task(Runner.run(agent([keyed], [asks_to_pay(3), answers()]), "Pay 3."))
        job = await asyncio.to_thread(
            poll, lambda: next(iter(ledger.list(kind="pay")), None), 30, "the job"
        )
        await asyncio.to_thread(ledger.cancel, job.id)
        return job, await asyncio.wait_for(run, 30)

    job, result = asyncio.run(cancelled())
    assert final(result) == f"done: error: job {job.id} was cancelled"

    # No worker: past its timeout the tool raises (the run stops), never a success or an error
    # the model would retry with a new call; the job stays, for the resumed run to find.
    slow = durable_tool(ledger, "pay", params_schema=AMOUNT, run_key="order-9", timeout=0.3)
    with pytest.raises(UserError, match=r"has not ended after 0\.3 s") as late:
        asyncio.run(Runner.run(agent([slow], [asks_to_pay(9)]), "Pay 9."))
    assert isinstance(late.value.__cause__, TimeoutError)
    waiting = [j for j in ledger.list(kind="pay") if j.id != job.id]
    assert [j.state for j in waiting] == [JobState.QUEUED]


def test_an_app_gives_the_tool_its_job_classes_words_and_schema(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.job("refund", tool=True, description="Refund once.", input_schema=AMOUNT)
    def refund(ctx: tenure.JobContext, payload: Any) -> Any:
        return payload

    tool = durable_tool(app, "refund")
    assert (tool.name, tool.description, tool.params_json_schema) == (
        "refund",
        "Refund once.",
        AMOUNT,
    )
    with pytest.raises(tenure.InvalidArgument, match="no job class 'nothing'"):
        durable_tool(app, "nothing")
    with pytest.raises(tenure.InvalidArgument, match="tool name"):
        durable_tool(app.ledger, "billing.refund")
    with pytest.raises(tenure.InvalidArgument, match="target"):
        durable_tool("sqlite:///x.db", "refund")
    assert isinstance(Agent(name="a", tools=[tool]).tools[0], type(tool))
