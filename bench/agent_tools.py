"""What making a framework's tool durable costs per call: the same no-op tool, plain and as a
tenure job (`durable_tool`), through the OpenAI Agents SDK's `Runner` with its scripted model
and through a LangGraph `ToolNode`, with one `tenure worker` process (default settings).

    python bench/agent_tools.py [--postgres URL] [--rounds 50]

Printed per backend, p50 / p95 in milliseconds. OpenAI Agents: a whole run (the scripted model
asks for the tool once, then answers). LangGraph: a graph of one `ToolNode` run on one call. The
durable column adds the submit, the worker's claim and run, the end's trip back and the read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `python bench/agent_tools.py` from the checkout

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.testing import ModelStep, ScriptedModel, assistant_message  # noqa: E402
from agents.testing import function_call as model_calls  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402

import tenure  # noqa: E402
from bench.wait_latency import fresh_schema, percentiles  # noqa: E402
from tenure.integrations import langgraph as durable_langgraph  # noqa: E402
from tenure.integrations import openai_agents as durable_openai  # noqa: E402

APP = "bench.mcp_app:app"
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}
set_tracing_disabled(True)


@function_tool(name_override="noop")
def plain_openai(n: int) -> str:
    """Do nothing."""
    return f'{{"n":{n}}}'


@tool("noop")
def plain_langgraph(n: int) -> str:
    """Do nothing."""
    return f'{{"n":{n}}}'


async def openai_runs(noop: Any, rounds: int) -> list[float]:
    took = []
    for n in range(-1, rounds):  # the first round warms connections and the worker
        steps = [
            ModelStep(output=[model_calls("noop", {"n": n}, call_id=f"call_{uuid.uuid4().hex}")]),
            ModelStep(output=[assistant_message("done")]),
        ]
        agent = Agent(name="bench", tools=[noop], model=ScriptedModel(steps))
        started = time.perf_counter()
        await Runner.run(agent, "go", context={"tenure_run_key": "bench"})
        if n >= 0:
            took.append((time.perf_counter() - started) * 1000)
    return took


def langgraph_calls(noop: Any, rounds: int) -> list[float]:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([noop]))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    node = builder.compile()
    took = []
    for n in range(-1, rounds):
        call = {
            "name": "noop",
            "args": {"n": n},
            "id": f"call_{uuid.uuid4().hex}",
            "type": "tool_call",
        }
        config: Any = {"configurable": {"thread_id": "bench"}}
        started = time.perf_counter()
        answer = node.invoke({"messages": [AIMessage(content="", tool_calls=[call])]}, config)
        assert '"n":' in answer["messages"][-1].content, answer
        if n >= 0:
            took.append((time.perf_counter() - started) * 1000)
    return took


def measure(url: str, rounds: int, folder: Path) -> list[tuple[str, list[float], list[float]]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TENURE_DATABASE_URL": url}
    log = open(folder / "worker.log", "ab")  # noqa: SIM115 - closed below
    with tenure.connect(url) as ledger:  # migrated before the worker starts
        command = [sys.executable, "-m", "tenure.cli", "worker", APP]
        worker = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=log)
        try:
            durable_a = durable_openai.durable_tool(ledger, "noop", params_schema=SCHEMA)
            durable_l = durable_langgraph.durable_tool(ledger, "noop", args_schema=SCHEMA)
            return [
                (
                    "OpenAI Agents, a run",
                    asyncio.run(openai_runs(plain_openai, rounds)),
                    asyncio.run(openai_runs(durable_a, rounds)),
                ),
                (
                    "LangGraph, a ToolNode graph",
                    langgraph_calls(plain_langgraph, rounds),
                    langgraph_calls(durable_l, rounds),
                ),
            ]
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
            log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("TENURE_TEST_POSTGRES_URL"))
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    heads = ("backend, framework", "plain tool p50 / p95 ms", "durable tool p50 / p95 ms")
    print(f"{heads[0]:40} {heads[1]:>26} {heads[2]:>26}")
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        backends = [("SQLite", f"sqlite:///{folder}/tools.db")]
        if args.postgres:
            backends.append(("PostgreSQL", fresh_schema(args.postgres, "tenure_bench_tools")))
        for backend, url in backends:
            for what, plain, durable in measure(url, args.rounds, folder):
                label = f"{backend}, {what}"
                print(f"{label:40} {percentiles(plain):>26} {percentiles(durable):>26}")
    if not args.postgres:
        print("PostgreSQL skipped (pass --postgres URL)")


if __name__ == "__main__":
    main()
