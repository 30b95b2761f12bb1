"""An OpenAI Agents SDK run with a durable `pay` tool and a scripted model, as its own process:

    python -m tests.support.openai_agent STATE OUT URL API_KEY

The model mints a new call id each time it is asked (as a real one does). Without STATE the
run starts: the tool needs approval, so the SDK interrupts it; the `RunState` is saved to
STATE, approved, and the run goes on into the tool (the test kills the process there). With
STATE the run is restored from it, approved again, and finishes: its final output goes to OUT.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from agents import Agent, Runner, RunState, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import tenure
from tenure.integrations.openai_agents import durable_tool
from tests.support.apps import AMOUNT

set_tracing_disabled(True)  # no network: nothing to export to


def tool_output(call: ModelCall) -> str:
    """What the tool answered, as the model is shown it."""
    items = call.input if isinstance(call.input, list) else []
    outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
    return str(outputs[-1]["output"])


def asks_to_pay(amount: int) -> ModelStep:
    return ModelStep(
        output=[function_call("pay", {"amount": amount}, call_id=f"call_{uuid.uuid4().hex}")]
    )


def answers() -> ModelStep:
    return ModelStep.respond(lambda call: [assistant_message(f"done: {tool_output(call)}")])


def agent(tools: list[Any], steps: list[ModelStep]) -> Agent[Any]:
    return Agent(
        name="payer", instructions="Pay what is asked.", tools=tools, model=ScriptedModel(steps)
    )


async def main(state_file: Path, out: Path, url: str, api_key: str) -> None:
    with tenure.Client(url, api_key) as client:
        pay = durable_tool(client, "pay", params_schema=AMOUNT, needs_approval=True)
        if not state_file.exists():
            payer = agent([pay], [asks_to_pay(7), answers()])
            result = await Runner.run(payer, "Pay 7.", context={"tenure_run_key": "order-77"})
            state = result.to_state()
            partial = state_file.with_suffix(".partial")
            partial.write_text(json.dumps(state.to_json()))
            os.replace(partial, state_file)
        else:
            payer = agent([pay], [answers()])
            state = await RunState.from_json(payer, json.loads(state_file.read_text()))
        for interruption in state.get_interruptions():
            state.approve(interruption)
        result = await Runner.run(payer, state)
        out.write_text(json.dumps({"final": result.final_output}))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]))
