"""Several questions in one round (`ctx.wait_for_all`) over MCP, with the official `mcp` SDK's
client against `tenure mcp` and `tenure worker` processes and a fenced bank on loopback: on the
2026-07-28 protocol both come in one `input_required`, a partial answer is taken and the next
round asks only for the rest, a malformed answer refuses the round and stores nothing; on
2025-11-25 both are put on the call's stream, one after the other. One charge each time."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import MCPError

import tenure
from tenure.demo.bank import BankServer
from tenure.types import EventType
from tests.support.fixtures import applied
from tests.support.mcp_server import McpServer, connected
from tests.support.workers import Workers

pytestmark = pytest.mark.slow
APPROVE = types.ElicitResult(action="accept", content={"ok": True})
MEMO = types.CreateMessageResult(
    role="assistant", content=types.TextContent(type="text", text="for the order"), model="m"
)


async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return APPROVE


async def sample(
    context: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return MEMO


def signals_of(ledger: tenure.Ledger, job_id: str) -> list[str]:
    return [
        str(e.detail["name"]) for e in ledger.events(job_id) if e.type is EventType.SIGNAL_RECEIVED
    ]


def test_a_partial_answer_is_taken_and_the_next_round_asks_only_for_the_rest(
    ledger: tenure.Ledger,
    db_url: str,
    workers: Workers,
    bank: BankServer,
    mcp_server: McpServer,
) -> None:
    acme = ledger.operations.create_tenant("acme")
    mcp_server.start_http()
    workers.start(db_url, "W", env={"TENURE_TEST_RECEIVER": bank.url})
    seen: dict[str, Any] = {}

    async def rounds() -> None:
        client = mcp_server.over_http(acme, elicitation_callback=elicit, sampling_callback=sample)
        async with connected(client) as mcp:
            call = mcp.session.call_tool
            arguments = {"amount": 4}
            first = await call("pay_asked_at_once", arguments, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            seen["first"] = {k: v.method for k, v in (first.input_requests or {}).items()}
            state = first.request_state
            with pytest.raises(MCPError) as refused:  # one malformed answer: none is taken
                await call(
                    "pay_asked_at_once",
                    arguments,
                    input_responses={"approval": APPROVE, "memo": types.ListRootsResult(roots=[])},
                    request_state=state,
                )
            seen["refused"] = refused.value.code
            nul_memo = types.CreateMessageResult(
                role="assistant", content=types.TextContent(type="text", text="a\x00b"), model="m"
            )
            with pytest.raises(MCPError) as refused:  # checked as stored: none is taken
                await call(
                    "pay_asked_at_once",
                    arguments,
                    input_responses={"approval": APPROVE, "memo": nul_memo},
                    request_state=state,
                )
            seen["refused_nul"] = refused.value.code
            second = await call(
                "pay_asked_at_once",
                arguments,
                input_responses={"approval": APPROVE},
                request_state=state,
                allow_input_required=True,
            )
            assert isinstance(second, types.InputRequiredResult), second
            seen["second"] = sorted(second.input_requests or {})
            seen["end"] = await call(
                "pay_asked_at_once",
                arguments,
                input_responses={"memo": MEMO},
                request_state=second.request_state,
            )

    asyncio.run(rounds())
    assert seen["first"] == {"approval": "elicitation/create", "memo": "sampling/createMessage"}
    assert seen["refused"] == seen["refused_nul"] == -32602
    assert seen["second"] == ["memo"]
    end = seen["end"]
    assert not end.is_error, end
    assert end.structured_content == {"paid": 4, "memo": "for the order", "by": "W"}
    job_id = end.meta["io.tenure/job-id"]
    assert signals_of(ledger, job_id) == ["approval", "memo"]  # the refused round stored none
    assert applied(bank) == Counter({f"tool-job:{job_id}:charge": 1})


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
def test_a_client_before_2026_is_asked_each_question_on_its_stream(
    ledger: tenure.Ledger,
    db_url: str,
    workers: Workers,
    bank: BankServer,
    mcp_server: McpServer,
) -> None:
    workers.start(db_url, "W", env={"TENURE_TEST_RECEIVER": bank.url})
    asked: list[str] = []

    async def elicit_noted(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append("elicitation")
        return APPROVE

    async def sample_noted(
        context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked.append("sampling")
        return MEMO

    options = {"mode": "legacy", "elicitation_callback": elicit_noted}
    client = mcp_server.stdio(**options, sampling_callback=sample_noted)

    async def call() -> types.CallToolResult:
        async with connected(client) as mcp:
            assert mcp.protocol_version == "2025-11-25"
            return await mcp.call_tool("pay_asked_at_once", {"amount": 9})

    result = asyncio.run(call())
    assert not result.is_error, result
    assert result.structured_content == {"paid": 9, "memo": "for the order", "by": "W"}
    assert asked == ["elicitation", "sampling"]  # in the order the handler named them
    job_id = result.meta["io.tenure/job-id"]  # type: ignore[index]
    assert applied(bank) == Counter({f"tool-job:{job_id}:charge": 1})


def test_a_question_asked_before_the_job_makes_one_job_once_answered(
    ledger: tenure.Ledger,
    db_url: str,
    workers: Workers,
    bank: BankServer,
    mcp_server: McpServer,
) -> None:
    """`asks_first`: round 1 makes no job; a malformed answer or an altered state is -32602
    and makes none; the answering round makes the job with the answer as its signal, and the
    same round again finds that job (one charge)."""
    acme = ledger.operations.create_tenant("acme")
    mcp_server.start_http()
    workers.start(db_url, "W", env={"TENURE_TEST_RECEIVER": bank.url})
    seen: dict[str, Any] = {}

    async def rounds() -> None:
        client = mcp_server.over_http(acme, elicitation_callback=elicit)
        async with connected(client) as mcp:
            call, arguments = mcp.session.call_tool, {"amount": 3}
            first = await call("pay_approved_first", arguments, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            seen["asked"] = sorted(first.input_requests or {})
            seen["jobs_after_round_1"] = len(ledger.list(kind="pay_approved_first"))
            state = first.request_state
            refusals = []
            cases: list[tuple[dict[str, Any], str | None]] = [
                ({"approval": types.ListRootsResult(roots=[])}, state),
                ({"approval": APPROVE}, "tenure-first:altered"),
            ]
            for responses, bad_state in cases:
                with pytest.raises(MCPError) as refused:
                    await call(
                        "pay_approved_first",
                        arguments,
                        input_responses=responses,
                        request_state=bad_state,
                    )
                refusals.append(refused.value.code)
            seen["refusals"] = refusals
            seen["jobs_after_refusals"] = len(ledger.list(kind="pay_approved_first"))
            answered: dict[str, Any] = {"approval": APPROVE}
            seen["ends"] = [
                await call(
                    "pay_approved_first", arguments, input_responses=answered, request_state=state
                )
                for _ in range(2)
            ]

    asyncio.run(rounds())
    assert seen["asked"] == ["approval"]
    assert seen["jobs_after_round_1"] == 0
    assert seen["refusals"] == [-32602, -32602]
    assert seen["jobs_after_refusals"] == 0
    ends = seen["ends"]
    assert [end.structured_content for end in ends] == [{"paid": 3, "by": "W"}] * 2
    job_ids = {end.meta["io.tenure/job-id"] for end in ends}
    assert len(job_ids) == 1 and len(ledger.list(kind="pay_approved_first")) == 1
    (job_id,) = job_ids
    assert signals_of(ledger, job_id) == ["approval"]
    assert applied(bank) == Counter({f"tool-job:{job_id}:charge": 1})


def test_questions_asked_before_the_job_may_be_answered_one_round_at_a_time(
    ledger: tenure.Ledger, db_url: str, workers: Workers, mcp_server: McpServer
) -> None:
    """The first round's state carries the answers given so far: the next round asks only for
    the rest, and an altered state is -32602."""
    acme = ledger.operations.create_tenant("acme")
    mcp_server.start_http()
    workers.start(db_url, "W")
    seen: dict[str, Any] = {}

    def named(name: str) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": name})

    async def rounds() -> None:
        client = mcp_server.over_http(acme, elicitation_callback=elicit)
        async with connected(client) as mcp:
            call = mcp.session.call_tool
            first = await call("greet_named_first", {}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            seen["asked"] = sorted(first.input_requests or {})
            second = await call(
                "greet_named_first",
                {},
                input_responses={"first_name": named("Ada")},
                request_state=first.request_state,
                allow_input_required=True,
            )
            assert isinstance(second, types.InputRequiredResult), second
            seen["then"] = sorted(second.input_requests or {})
            seen["jobs"] = len(ledger.list(kind="greet_named_first"))
            assert second.request_state is not None
            with pytest.raises(MCPError) as refused:
                await call(
                    "greet_named_first",
                    {},
                    input_responses={"last_name": named("Lovelace")},
                    request_state=second.request_state + "%%",
                )
            seen["altered"] = refused.value.code
            seen["end"] = await call(
                "greet_named_first",
                {},
                input_responses={"last_name": named("Lovelace")},
                request_state=second.request_state,
            )

    asyncio.run(rounds())
    assert seen["asked"] == ["first_name", "last_name"]
    assert seen["then"] == ["last_name"] and seen["jobs"] == 0
    assert seen["altered"] == -32602
    assert seen["end"].structured_content == {"hello": "Ada Lovelace"}
