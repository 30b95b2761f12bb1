"""`tenure mcp` driven by the official `mcp` SDK's client, against real processes: the server
over stdio and streamable HTTP, `tenure worker` processes killed with SIGKILL mid-effect, a
fenced bank on loopback, and the tasks extension (SEP-2663) across a restart of the server."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError

import tenure
from tenure import JobState
from tenure.demo.bank import BankServer
from tenure.mcp.client import CreatedTask, DurableTasks, cancel_task, get_task, update_task
from tests.support.apps import AMOUNT
from tests.support.cli import tenure_cli
from tests.support.fixtures import applied, kill_in_effect_then_start_another
from tests.support.mcp_server import APP, McpServer, connected, meta
from tests.support.processes import ROOT
from tests.support.waiting import poll
from tests.support.workers import Workers

pytestmark = pytest.mark.slow
KEY = "io.tenure/idempotency-key"
PRINCIPAL = "io.tenure/principal"


async def in_thread(fn: Any, *args: Any) -> Any:
    return await anyio.to_thread.run_sync(fn, *args)


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
def test_a_tool_call_answers_from_the_second_worker_when_the_first_is_killed_mid_effect(
    transport: str,
    ledger: tenure.Ledger,
    db_url: str,
    workers: Workers,
    bank: BankServer,
    mcp_server: McpServer,
    tmp_path: Path,
) -> None:
    """The official client lists the tools with their schemas, a bad argument is a tool error
    and no job; a call whose worker is SIGKILLed after the bank applied the charge answers
    with the result of the second worker, the bank applied it once, progress came as stages
    finished; the same key finds the same job; over HTTP another tenant sees none of it."""
    env = {"TENURE_TEST_RECEIVER": bank.url}
    acme = ledger.operations.create_tenant("acme")
    globex = ledger.operations.create_tenant("globex")
    # A tenant's name stands for nothing more than that tenant, whatever it spells.
    lookalike = ledger.operations.create_tenant("admin")
    if transport == "streamable-http":
        mcp_server.start_http()
    doomed = workers.start(db_url, "A", env={**env, "TENURE_TEST_KILL_AT": "in_effect"})

    def client() -> Client:
        if transport == "stdio":
            return mcp_server.stdio()
        return mcp_server.over_http(acme)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {"progress": []}
        async with connected(client()) as mcp:
            listed = {tool.name: tool for tool in (await mcp.list_tools()).tools}
            assert listed["pay"].input_schema == AMOUNT
            assert listed["pay"].description == "Pay an amount, once."
            assert {"tenure_status", "tenure_result", "tenure_signal", "tenure_cancel"} <= set(
                listed
            )
            bad = await mcp.call_tool("pay", {"amount": "seven"})
            assert bad.is_error and "amount" in bad.content[0].text  # type: ignore[union-attr]
            bad_key = await mcp.call_tool("pay", {"amount": 1}, meta=meta({KEY: 17}))
            assert bad_key.is_error and "idempotency key" in bad_key.content[0].text  # type: ignore[union-attr]
            bad_principal = await mcp.call_tool(
                "pay", {"amount": 1}, meta=meta({PRINCIPAL: "x" * 300})
            )
            assert bad_principal.is_error and "principal" in bad_principal.content[0].text  # type: ignore[union-attr]
            assert await in_thread(lambda: ledger.list(kind="pay")) == []

            async def progress(progress: float, total: float | None, message: str | None) -> None:
                seen["progress"].append(message)

            async def kill_a_then_start_b() -> None:
                await in_thread(
                    kill_in_effect_then_start_another, workers, db_url, tmp_path, doomed, env
                )

            async with anyio.create_task_group() as group:
                group.start_soon(kill_a_then_start_b)
                seen["first"] = await mcp.call_tool(
                    "pay",
                    {"amount": 7},
                    progress_callback=progress,
                    meta=meta({KEY: "order-1", PRINCIPAL: "user:42"}),
                )
            seen["again"] = await mcp.call_tool("pay", {"amount": 7}, meta=meta({KEY: "order-1"}))
        return seen

    seen = asyncio.run(scenario())
    first = seen["first"]
    assert not first.is_error, first
    assert first.structured_content == {"paid": 7, "by": "B"}
    job_id = first.meta["io.tenure/job-id"]
    assert seen["again"].meta["io.tenure/job-id"] == job_id
    assert seen["again"].structured_content == first.structured_content
    job = ledger.get(job_id)
    assert (job.state, job.attempt, job.tenant, job.principal) == (
        JobState.SUCCEEDED,
        2,
        "acme" if transport != "stdio" else "default",
        "user:42",
    )
    assert applied(bank) == Counter({f"tool-job:{job_id}:charge": 1})
    messages = seen["progress"]
    # The first word of the call: the job's id and state (a worker may have claimed it already).
    assert messages[0] in (f"job {job_id} queued", f"job {job_id} running")
    assert "step quote done" in messages and "effect charge done" in messages
    if transport == "streamable-http":
        check_http_tenancy(mcp_server, ledger, job_id, [globex, lookalike])


def test_a_synchronous_call_asks_its_caller_and_survives_a_killed_worker(
    ledger: tenure.Ledger,
    db_url: str,
    workers: Workers,
    bank: BankServer,
    mcp_server: McpServer,
    tmp_path: Path,
) -> None:
    """SEP-2322 with the official client's own driver: the job's questions (a form, then its
    model) come back as `input_required`, the client's callbacks answer them, and the call
    resumes the same job by its requestState; the worker is SIGKILLed in the effect after the
    answers and the call still ends with one charge. A client that cannot answer gets the state
    alone and resumes once tenure_signal answered; an altered state or other arguments are
    -32602, and the question's words are in no event."""
    env = {"TENURE_TEST_RECEIVER": bank.url}
    acme = ledger.operations.create_tenant("acme")
    mcp_server.start_http()
    doomed = workers.start(db_url, "A", env={**env, "TENURE_TEST_KILL_AT": "in_effect"})
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"ok": True})

    async def sample(
        context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked.append(params.messages[0].content.text)  # type: ignore[union-attr]
        text = types.TextContent(type="text", text="for the order")
        return types.CreateMessageResult(role="assistant", content=text, model="test-model")

    async def kill_a_then_start_b() -> None:
        await in_thread(kill_in_effect_then_start_another, workers, db_url, tmp_path, doomed, env)

    async def answered() -> types.CallToolResult:
        client = mcp_server.over_http(acme, elicitation_callback=elicit, sampling_callback=sample)
        async with connected(client) as mcp, anyio.create_task_group() as group:
            group.start_soon(kill_a_then_start_b)
            result = await mcp.call_tool("pay_asked", {"amount": 6})
        return result

    first = asyncio.run(answered())
    assert not first.is_error, first
    assert first.structured_content == {"paid": 6, "memo": "for the order", "by": "B"}
    assert asked == ["Approve this payment?", "A memo line?"]
    job_id = first.meta["io.tenure/job-id"]  # type: ignore[index]
    assert applied(bank) == Counter({f"tool-job:{job_id}:charge": 1})
    waits = [e.detail for e in ledger.events(job_id) if e.type.value == "job_waiting"]
    assert [w.get("ask") for w in waits] == ["elicitation/create", "sampling/createMessage"]
    assert "Approve" not in repr(ledger.events(job_id))

    async def unanswerable() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connected(mcp_server.over_http(acme)) as mcp:
            held = await mcp.session.call_tool(
                "pay_asked", {"amount": 2}, allow_input_required=True
            )
            assert isinstance(held, types.InputRequiredResult), held
            seen["requests"], state = held.input_requests, held.request_state
            assert state is not None
            for bad_state, arguments in [
                (state + "-TAMPERED", {"amount": 2}),
                (state, {"amount": 3}),
            ]:
                with pytest.raises(MCPError) as refused:
                    await mcp.session.call_tool("pay_asked", arguments, request_state=bad_state)
                seen.setdefault("codes", []).append(refused.value.code)
            job_id = state.split(":")[1]
            sent = await mcp.call_tool(
                "tenure_signal", {"id": job_id, "name": "approval", "payload": {"ok": False}}
            )
            assert not sent.is_error, sent
            seen["end"] = await mcp.session.call_tool(
                "pay_asked", {"amount": 2}, request_state=state
            )
        return seen

    seen = asyncio.run(unanswerable())
    # The client declared neither elicitation nor sampling: no question it cannot answer.
    assert not seen["requests"]
    assert seen["codes"] == [-32602, -32602]
    assert seen["end"].structured_content == {"paid": 0, "answer": {"ok": False}}
    assert len(ledger.list(kind="pay_asked")) == 2


def check_http_tenancy(
    server: McpServer, ledger: tenure.Ledger, job_id: str, others: list[str]
) -> None:
    """Other tenants (one named like the admin) see and cancel nothing; the admin key sees the
    job; no key is 401; the server logged ids and hashes, not the payload."""
    for key in others:
        asyncio.run(other_tenant_sees_nothing(server, key, job_id))
    assert ledger.get(job_id).state is JobState.SUCCEEDED
    assert asyncio.run(status_as(server, server.admin.key, job_id)) == "succeeded"
    assert httpx.post(server.url, json={}).status_code == 401
    logged = (server.folder / "mcp-http.log").read_text()
    assert "job_submitted" in logged and "amount" not in logged


async def status_as(server: McpServer, key: str, job_id: str) -> Any:
    async with connected(server.over_http(key)) as mcp:
        answer = await mcp.call_tool("tenure_status", {"id": job_id})
        return (answer.structured_content or {}).get("state")


async def other_tenant_sees_nothing(server: McpServer, key: str, job_id: str) -> None:
    async with connected(server.over_http(key, DurableTasks())) as mcp:
        for tool in ("tenure_status", "tenure_cancel"):
            answer = await mcp.call_tool(tool, {"id": job_id})
            assert answer.is_error and "no job has the id" in answer.content[0].text  # type: ignore[union-attr]
        for call in (get_task, cancel_task):
            with pytest.raises(MCPError) as refused:
                await call(mcp.session, job_id)
            assert refused.value.code == -32602


def test_tasks_survive_a_restart_take_input_and_a_cancel_fences_the_late_effect(
    ledger: tenure.Ledger,
    db_url: str,
    workers: Workers,
    bank: BankServer,
    mcp_server: McpServer,
    tmp_path: Path,
) -> None:
    """A client with the tasks extension gets a task at once (no worker yet), polls it through
    a second `tenure mcp` process, answers its `input_required` with `tasks/update`; another
    task is cancelled with `tasks/cancel` while its worker holds the effect, and the late
    charge is refused by the bank's fence."""
    env = {"TENURE_TEST_RECEIVER": bank.url, "TENURE_TEST_KILL_AT": "before_send"}

    async def create() -> CreatedTask:
        async with connected(mcp_server.stdio(DurableTasks())) as mcp:
            created = await mcp.session.call_tool("pay_approved", {"amount": 3}, allow_claimed=True)
            assert isinstance(created, CreatedTask)
            return created

    created = asyncio.run(create())
    assert created.status == "working"
    assert ledger.get(created.task_id).state is JobState.QUEUED  # durably made, nobody ran it
    workers.start(db_url, "W", env=env)

    async def after_restart() -> dict[str, Any]:
        async with connected(mcp_server.stdio(DurableTasks())) as mcp:
            task = await get_task(mcp.session, created.task_id)
            while task.status != "input_required":
                await anyio.sleep(0.05)
                task = await get_task(mcp.session, created.task_id)
            request = task.requests["approval"]
            assert request["method"] == "elicitation/create"
            # Malformed answers are refused with -32602 and store nothing: a valid one follows.
            malformed: list[dict[str, Any]] = [
                {"approval": 5},
                {"approval": {"action": "maybe"}},
                {"approval": {"action": "accept", "content": [1]}},
                {"approval": {"action": "accept", "content": {"s": "\x00"}}},
                {"approval": {"action": "accept", "content": {"s": "x" * (1024 * 1024 + 1)}}},
            ]
            for bad in malformed:
                with pytest.raises(MCPError) as refused:
                    await update_task(mcp.session, created.task_id, bad)
                assert refused.value.code == -32602, bad
            assert (await get_task(mcp.session, created.task_id)).status == "input_required"
            answer = {"approval": {"action": "accept", "content": {"ok": True}}}
            await update_task(mcp.session, created.task_id, answer)
            await update_task(mcp.session, created.task_id, {"unknown": {"action": "accept"}})
            while not task.terminal:
                await anyio.sleep(0.05)
                task = await get_task(mcp.session, created.task_id)
            doomed = await mcp.session.call_tool("pay", {"amount": 9}, allow_claimed=True)
            assert isinstance(doomed, CreatedTask)
            await in_thread(lambda: poll(lambda: list(tmp_path.glob("at-before_send-*")), 30))
            await cancel_task(mcp.session, doomed.task_id)
            cancelled = await get_task(mcp.session, doomed.task_id)
            return {"done": task, "cancelled": cancelled, "doomed": doomed.task_id}

    seen = asyncio.run(after_restart())
    done = seen["done"]
    assert done.status == "completed"
    assert done.tool_result().structured_content == {"paid": 3, "by": "W"}
    assert seen["cancelled"].status == "cancelled"
    doomed = seen["doomed"]
    (tmp_path / "release-before_send").touch()
    refused = poll(
        lambda: [e for e in bank.bank.events if e.what == "refused"], 30, "the bank's refusal"
    )
    assert [e.key for e in refused] == [f"tool-job:{doomed}:charge"]
    assert applied(bank) == Counter({f"tool-job:{created.task_id}:charge": 1})
    assert ledger.get(doomed).state is JobState.CANCELLED


def test_a_client_without_the_extension_gets_results_and_no_tasks(
    ledger: tenure.Ledger, db_url: str, workers: Workers, mcp_server: McpServer
) -> None:
    """Without the extension: tasks/get is refused with -32021; a call waiting for a signal
    says so in its progress and ends when tenure_signal sends it; tenure_result answers."""

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {"progress": []}
        async with connected(mcp_server.stdio()) as mcp:
            with pytest.raises(MCPError) as refused:
                await get_task(mcp.session, "0" * 32)
            seen["code"] = refused.value.code

            asked = anyio.Event()

            async def progress(progress: float, total: float | None, message: str | None) -> None:
                seen["progress"].append(message)
                if message and message.startswith("job "):
                    seen["id"] = message.split()[1]
                if message and "tenure_signal" in message:
                    asked.set()

            async def answer() -> None:
                await asked.wait()
                sent = await mcp.call_tool(
                    "tenure_signal",
                    {"id": seen["id"], "name": "approval", "payload": {"ok": False}},
                )
                seen["signal"] = sent.structured_content

            async with anyio.create_task_group() as group:
                group.start_soon(answer)
                seen["call"] = await mcp.call_tool(
                    "pay_approved", {"amount": 4}, progress_callback=progress
                )
            seen["result"] = await mcp.call_tool("tenure_result", {"id": seen["id"]})
        return seen

    workers.start(db_url, "W")
    seen = asyncio.run(scenario())
    assert seen["code"] == -32021
    assert seen["signal"]["stored"] is True
    assert seen["call"].structured_content == {"paid": 0, "answer": {"ok": False}}
    assert seen["result"].structured_content == seen["call"].structured_content
    assert "waiting for signal approval until" in " ".join(seen["progress"])


def test_bad_tool_classes_and_a_missing_tenant_are_refused(db_url: str) -> None:
    with pytest.raises(tenure.InvalidJobClass, match="description"):
        tenure.App(db_url).job("t", tool=True, input_schema={"type": "object"})(lambda c, p: 1)
    with pytest.raises(tenure.InvalidJobClass, match="input_schema"):
        tenure.App(db_url).job("t", tool=True, description="d", input_schema={"type": "array"})(
            lambda c, p: 1
        )
    needs_cases: list[tuple[Any, bool]] = [(["telepathy"], True), (["sampling"], False)]
    for needs, tool in [*needs_cases, ("sampling ", True)]:
        with pytest.raises(tenure.InvalidJobClass, match="needs"):
            tenure.App(db_url).job(
                "t", tool=tool, description="d", input_schema={"type": "object"}, needs=needs
            )(lambda c, p: 1)
    form = tenure.Ask.form("Sure?")
    asks_first_cases: list[tuple[Any, bool, str]] = [
        ({"ok": form}, False, "asks_first is for tools"),
        ({"ok": None}, True, "every asks_first needs a tenure.Ask"),
        ({}, True, "asks_first needs a question"),
        (["ok"], True, "non-empty mapping"),
        ({"bad\x00": form}, True, "signal name"),
        ({"ok": "Sure?"}, True, "must be a tenure.Ask"),
    ]
    for asks_first, tool, message in asks_first_cases:
        with pytest.raises(tenure.InvalidJobClass, match=message):
            tenure.App(db_url).job(
                "t", tool=tool, description="d", input_schema={"type": "object"},
                asks_first=asks_first,
            )(lambda c, p: 1)  # fmt: skip
    from tenure.mcp import TenureMcp

    app = tenure.App(db_url)
    bad = {"type": "object", "properties": {"a": {"type": "nonsense"}}}
    app.job("t", tool=True, description="d", input_schema=bad)(lambda c, p: 1)
    with pytest.raises(tenure.InvalidJobClass, match="not a JSON Schema"):
        TenureMcp(app, app.ledger)
    app.close()
    missing = tenure_cli("mcp", APP, "--tenant", "nosuch", db=db_url, env={"PYTHONPATH": str(ROOT)})
    assert missing.returncode == 1 and "there is no tenant 'nosuch'" in missing.stderr
