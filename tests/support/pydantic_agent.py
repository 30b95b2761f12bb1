"""A Pydantic AI run with a durable `pay_approved` tool and a function model, as its own
process:

    python -m tests.support.pydantic_agent ask|answer MESSAGES OUT URL

`ask` starts the run (conversation `order-9`): the job waits for its approval, so the run ends
with `DeferredToolRequests`; the messages are stored in MESSAGES as JSON and the process ends.
`answer` loads them in a fresh process, approves the call (`{"ok": true}` as the signal) and
finishes the run: its output goes to OUT.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

import tenure
from tenure.integrations.pydantic_ai import durable_tool
from tests.support.apps import AMOUNT


def scripted(tool: str, amount: int) -> FunctionModel:
    """Asks `tool` to pay once (call id `pay-1`), then says what the tool answered."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart):
            return ModelResponse(parts=[TextPart(f"done: {json.dumps(last.content)}")])
        call = ToolCallPart(tool, {"amount": amount}, tool_call_id="pay-1")
        return ModelResponse(parts=[call])

    return FunctionModel(respond)


def payer(target: Any, kind: str, amount: int) -> Agent[None, Any]:
    tool = durable_tool(target, kind, json_schema=AMOUNT)
    return Agent(scripted(kind, amount), tools=[tool], output_type=[str, DeferredToolRequests])


def main(mode: str, messages: Path, out: Path, url: str) -> None:
    ledger = tenure.connect(url)
    try:
        agent = payer(ledger, "pay_approved", 9)
        if mode == "ask":
            result = agent.run_sync("Pay 9.", conversation_id="order-9")
            assert isinstance(result.output, DeferredToolRequests), result.output
            messages.write_bytes(ModelMessagesTypeAdapter.dump_json(result.all_messages()))
            return
        history = ModelMessagesTypeAdapter.validate_json(messages.read_bytes())
        approvals = DeferredToolResults(approvals={"pay-1": True}, metadata={"pay-1": {"ok": True}})
        result = agent.run_sync(message_history=history, deferred_tool_results=approvals)
        out.write_text(json.dumps({"final": result.output}))
    finally:
        ledger.close()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
