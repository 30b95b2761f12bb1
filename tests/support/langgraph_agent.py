"""A LangGraph graph whose `ToolNode` runs durable tools, with a scripted model, on a real
checkpointer (SQLite file or PostgreSQL), as its own process:

    python -m tests.support.langgraph_agent DB_URL CHECKPOINTS THREAD OUT (start TOOL... |
        resume | answer JSON)

`start` asks the model, which calls each TOOL (in parallel, one call each; `pay` is paid 3,
then 4, and so on) with call ids it mints, as a real model does. `resume` runs the thread on
from its last checkpoint; `answer` resumes an interrupt with the JSON value. OUT gets the
final messages, or the pending interrupts.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

import tenure
from tenure.integrations.langgraph import durable_tool
from tests.support.apps import AMOUNT


def scripted_model(tools: list[str]) -> Any:
    """First turn: one call of each tool; after the tools answered: what they said."""

    def model(state: MessagesState) -> dict[str, list[AnyMessage]]:
        answered = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        if answered:
            said = [{"content": m.content, "status": m.status} for m in answered]
            return {"messages": [AIMessage(content=json.dumps(said))]}
        calls = [
            {
                "name": tool,
                "args": {"amount": 3 + n},
                "id": f"call_{uuid.uuid4().hex}",
                "type": "tool_call",
            }
            for n, tool in enumerate(tools)
        ]
        return {"messages": [AIMessage(content="", tool_calls=calls)]}

    return model


def graph(ledger: tenure.Ledger, tools: list[str], saver: BaseCheckpointSaver[Any]) -> Any:
    kinds = ("pay", "pay_approved", "pay_confirmed")
    durable = [durable_tool(ledger, kind, args_schema=AMOUNT) for kind in kinds]
    builder = StateGraph(MessagesState)
    builder.add_node("model", scripted_model(tools))
    builder.add_node("tools", ToolNode(durable))
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


@contextmanager
def checkpointer(where: str) -> Iterator[BaseCheckpointSaver[Any]]:
    if where.startswith("postgresql://"):
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(where) as saver:
            saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(where) as saver:
            yield saver


def main(db_url: str, where: str, thread: str, out: Path, command: str, *rest: str) -> None:
    config: Any = {"configurable": {"thread_id": thread}}
    with tenure.connect(db_url) as ledger, checkpointer(where) as saver:
        run = graph(ledger, list(rest) if command == "start" else [], saver)
        if command == "start":
            final = run.invoke({"messages": [("user", "pay")]}, config)
        elif command == "resume":
            final = run.invoke(None, config)
        else:
            final = run.invoke(Command(resume=json.loads(rest[0])), config)
        messages = final["messages"]
        out.write_text(
            json.dumps(
                {
                    "interrupts": [i.value for i in final.get("__interrupt__", [])],
                    "calls": [
                        c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls
                    ],
                    "final": messages[-1].content,
                    "artifacts": [m.artifact for m in messages if isinstance(m, ToolMessage)],
                }
            )
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), sys.argv[5], *sys.argv[6:])
