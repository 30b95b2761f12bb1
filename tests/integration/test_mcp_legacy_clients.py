"""Clients of the protocols before 2026-07-28 (the official `mcp` SDK's client in `legacy`
mode: the initialize handshake, protocol 2025-11-25): a job's questions reach them as requests
on the call's own stream (`elicitation/create`, `sampling/createMessage`), the answers become
the job's signals, stored once; the job's progress reaches them as log messages at the level
they set. Real processes: `tenure mcp` over stdio and streamable HTTP (killed with SIGKILL
mid-question and started again), `tenure worker`, a fenced bank on loopback."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

import mcp_types as types

import tenure
from tenure import JobState
from tenure.demo.bank import BankServer
from tests.support.fixtures import applied
from tests.support.mcp_server import McpServer, connected, meta
from tests.support.waiting import poll
from tests.support.workers import Workers

pytestmark = pytest.mark.slow
KEY = "io.tenure/idempotency-key"
APPROVE = types.ElicitResult(action="accept", content={"ok": True})


async def sample(
    context: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    text = types.TextContent(type="text", text="for the order")
    return types.CreateMessageResult(role="assistant", content=text, model="test-model")


def waiting_job(ledger: tenure.Ledger) -> tenure.Job:
    """The one pay_asked job, once it waits for its approval."""
    found: list[tenure.Job] = []

    def asks() -> bool:
        found[:] = ledger.list(state=JobState.WAITING, kind="pay_asked")
        return bool(found)

    poll(asks, 30, "the job to wait for its approval")
    return found[0]


# The SDK's client warns that logging is deprecated in the 2026 protocol: these clients are
# of an earlier one, which is the point.
@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
def test_questions_go_to_the_caller_on_its_stream_and_progress_as_log_messages(
    ledger: tenure.Ledger,
    db_url: str,
    workers: Workers,
    bank: BankServer,
    mcp_server: McpServer,
    transport: str,
) -> None:
    acme = ledger.operations.create_tenant("acme")
    workers.start(db_url, "W", env={"TENURE_TEST_RECEIVER": bank.url})
    asked: list[str] = []
    logged: list[tuple[str, str]] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return APPROVE

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append((params.level, str(params.data)))

    options: dict[str, Any] = {
        "mode": "legacy",
        "elicitation_callback": elicit,
        "sampling_callback": sample,
        "logging_callback": log,
    }
    if transport == "streamable-http":
        mcp_server.start_http()
        client = mcp_server.over_http(acme, **options)
    else:
        client = mcp_server.stdio(**options)

    async def scenario() -> tuple[types.CallToolResult, list[tuple[str, str]]]:
        async with connected(client) as mcp:
            assert mcp.protocol_version == "2025-11-25"
            quiet = await mcp.call_tool("pay_asked", {"amount": 5}, meta=meta({KEY: "k-quiet"}))
            before_level = list(logged)
            await mcp.set_logging_level("info")
            result = await mcp.call_tool("pay_asked", {"amount": 7}, meta=meta({KEY: "k-7"}))
            assert not quiet.is_error, quiet
        return result, before_level

    result, before_level = asyncio.run(scenario())
    assert not result.is_error, result
    assert result.structured_content == {"paid": 7, "memo": "for the order", "by": "W"}
    assert asked == ["Approve this payment?"] * 2
    assert before_level == []  # no level set: no log message
    job_id = result.meta["io.tenure/job-id"]  # type: ignore[index]
    texts = [text for level, text in logged]
    assert {level for level, _ in logged} == {"info"}
    assert texts[0].startswith(f"job {job_id} ")
    assert "effect charge done" in texts and texts[-1] == f"job {job_id} succeeded"
    assert not any("Approve" in t or "for the order" in t or "7" in t.split() for t in texts)
    assert applied(bank) == Counter(
        {f"tool-job:{job_id}:charge": 1, f"tool-job:{ledger.list(limit=2)[1].id}:charge": 1}
    )


def test_a_server_killed_mid_question_asks_again_and_an_earlier_answer_stands(
    ledger: tenure.Ledger,
    db_url: str,
    workers: Workers,
    bank: BankServer,
    mcp_server: McpServer,
) -> None:
    """The server holding the call is SIGKILLed while its caller is being asked: the answer
    given to the dead session is lost, nothing else is; the client's new session calls again
    with its key and is asked again. Then another question answered elsewhere first
    (tenure_signal's way, a second answer): the stream's later answer changes nothing."""
    acme = ledger.operations.create_tenant("acme")
    workers.start(db_url, "W", env={"TENURE_TEST_RECEIVER": bank.url})
    mcp_server.start_http()
    asked: list[str] = []

    async def elicit_while_killed(
        context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        await anyio.to_thread.run_sync(mcp_server.kill_and_restart_http)
        return APPROVE

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return APPROVE

    async def call(callback: Any, key: str) -> types.CallToolResult:
        client = mcp_server.over_http(
            acme, mode="legacy", elicitation_callback=callback, sampling_callback=sample
        )
        async with connected(client) as mcp:
            return await mcp.call_tool("pay_asked", {"amount": 3}, meta=meta({KEY: key}))

    async def killed_then_again() -> tuple[str, types.CallToolResult]:
        try:
            with anyio.fail_after(60):
                lost = await call(elicit_while_killed, "k-3")
            outcome = f"answered: {lost}"
        except Exception as exc:
            outcome = type(exc).__name__
        return outcome, await call(elicit, "k-3")

    outcome, again = asyncio.run(killed_then_again())
    assert not outcome.startswith("answered"), outcome
    assert not again.is_error, again
    assert again.structured_content == {"paid": 3, "memo": "for the order", "by": "W"}
    assert asked == ["Approve this payment?"] * 2
    job_id = again.meta["io.tenure/job-id"]  # type: ignore[index]
    assert applied(bank) == Counter({f"tool-job:{job_id}:charge": 1})
    received = [e for e in ledger.events(job_id) if e.type.value == "signal_received"]
    assert len(received) == 2  # the approval once (the lost answer never arrived), the memo

    async def answered_elsewhere_first(
        context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        job = await anyio.to_thread.run_sync(waiting_job, ledger)
        await anyio.to_thread.run_sync(ledger.signal, job.id, "approval", {"ok": False})
        return APPROVE

    late = asyncio.run(call(answered_elsewhere_first, "k-late"))
    assert late.structured_content == {"paid": 0, "answer": {"ok": False}}
    assert len(applied(bank)) == 1


def test_a_stateless_server_leaves_the_question_to_tenure_signal_and_a_worker_restart_loses_nothing(
    ledger: tenure.Ledger,
    db_url: str,
    workers: Workers,
    bank: BankServer,
    mcp_server: McpServer,
) -> None:
    """`tenure mcp --stateless`: no session, so no question on the stream; the call says what
    its job waits for and holds. Meanwhile the worker is SIGKILLed and another started (the
    waiting job holds no lease); `tenure_signal` from a second client answers, the call ends
    with one charge."""
    acme = ledger.operations.create_tenant("acme")
    env = {"TENURE_TEST_RECEIVER": bank.url}
    first = workers.start(db_url, "A", env=env)
    mcp_server.start_http(None, "--stateless")
    asked: list[str] = []
    said: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return APPROVE

    hinted = anyio.Event()

    async def told(progress: float, total: float | None, message: str | None) -> None:
        said.append(message or "")
        if "send it with tenure_signal" in (message or ""):
            hinted.set()

    async def answer_elsewhere() -> None:
        job = await anyio.to_thread.run_sync(waiting_job, ledger)
        first.kill()
        await anyio.to_thread.run_sync(first.wait)
        await anyio.to_thread.run_sync(lambda: workers.start(db_url, "B", env=env))
        memo = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "by signal"}}
        with anyio.fail_after(30):
            await hinted.wait()  # the call said what its job waits for, and how to answer
        async with connected(mcp_server.over_http(acme, mode="legacy")) as other:
            for name, payload in [("approval", {"ok": True}), ("memo", memo)]:
                await anyio.to_thread.run_sync(waiting_for, ledger, job.id, name)
                sent = await other.call_tool(
                    "tenure_signal", {"id": job.id, "name": name, "payload": payload}
                )
                assert not sent.is_error, sent

    async def scenario() -> types.CallToolResult:
        client = mcp_server.over_http(
            acme, mode="legacy", elicitation_callback=elicit, sampling_callback=sample
        )
        async with connected(client) as mcp, anyio.create_task_group() as group:
            group.start_soon(answer_elsewhere)
            with anyio.fail_after(90):
                result = await mcp.call_tool(
                    "pay_asked", {"amount": 4}, meta=meta({KEY: "k-4"}), progress_callback=told
                )
        return result

    result = asyncio.run(scenario())
    assert not result.is_error, result
    assert result.structured_content == {"paid": 4, "memo": "by signal", "by": "B"}
    assert asked == []
    assert any("send it with tenure_signal" in message for message in said), said
    job_id = result.meta["io.tenure/job-id"]  # type: ignore[index]
    assert applied(bank) == Counter({f"tool-job:{job_id}:charge": 1})


def waiting_for(ledger: tenure.Ledger, job_id: str, signal: str) -> None:
    """Returns once the job waits for `signal`."""

    def waits() -> bool:
        job = ledger.get(job_id)
        return job.state is JobState.WAITING and job.wait is not None and job.wait.signal == signal

    poll(waits, 30, f"the job to wait for {signal}")
