"""LangGraph tools that are tenure jobs (extra `tenure[langgraph]`).

`durable_tool(target, kind)` is a LangChain tool for `ToolNode`, `create_agent` or any
graph that runs tool calls. Each call is a tenure job keyed `THREAD_ID:TOOL_CALL_ID`: the
thread id from the run's config, the tool call id from the `AIMessage` the checkpointer saved.
A graph resumed after a crash re-runs the tool node from its start (LangGraph's way), so the
tool is called again with the same ids and finds the same job: its result, not a second
effect. A job that waits for a signal suspends the graph with `interrupt()`, and the value the
graph is resumed with (`Command(resume=...)`) is sent as that signal.
"""

from __future__ import annotations

from tenure.extras import needs

needs(
    "langgraph", "langgraph", "langchain_core", "jsonschema", what="tenure.integrations.langgraph"
)

import contextvars
import re
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from langgraph.config import get_stream_writer
from langgraph.types import interrupt

from tenure.errors import InvalidArgument, JobFailed
from tenure.integrations.jobcalls import (
    JobCalls,
    ToolSpec,
    ended_message,
    outcome,
    result_text,
    tool_spec,
)
from tenure.types import Job
from tenure.waits import awaited_signal

# What the chat models' tool-calling APIs accept as a function's name.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("tenure_tool_call_id")


class MissingCallIdentity(InvalidArgument):
    """A durable tool was called without a thread id or a tool call id: it refuses rather than
    make a key that a resumed graph could not find again."""


class DurableTool(BaseTool):
    """A tool whose calls are tenure jobs; made by `durable_tool`."""

    calls: Any
    spec: Any
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool = True

    def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        token = _CALL_ID.set(kwargs.get("tool_call_id"))
        try:
            return super().run(tool_input, *args, **kwargs)
        finally:
            _CALL_ID.reset(token)

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        token = _CALL_ID.set(kwargs.get("tool_call_id"))
        try:
            return await super().arun(tool_input, *args, **kwargs)
        finally:
            _CALL_ID.reset(token)

    def _run(self, config: RunnableConfig, **arguments: Any) -> tuple[str, dict[str, Any]]:
        calls: JobCalls = self.calls
        spec: ToolSpec = self.spec
        key = f"{_thread_id(config, self.name)}:{_call_id(self.name)}"
        problems = spec.problems(arguments)
        if problems:
            raise ToolException("invalid arguments, no job was made: " + "; ".join(problems))
        job_id = calls.submit(arguments, key)
        report = _Progress(_stream_writer(), job_id, key)
        answered: list[str] = []
        job = calls.wait(job_id, or_signal_besides=answered, seen=report.seen)
        if not job.terminal:
            # A resumed node calls interrupt() again from the first: answered ones first.
            answered = calls.signals_received(job_id)
            for name in answered:
                interrupt(_question(job_id, name, key))
        while not job.terminal:
            asks = awaited_signal(job)
            if asks is not None and asks not in answered:
                calls.signal(job_id, asks, interrupt(_question(job_id, asks, key)))
                answered.append(asks)
            job = calls.wait(job_id, or_signal_besides=answered, seen=report.seen)
        try:
            result = outcome(job)
        except JobFailed as failed:
            raise ToolException(ended_message(failed.job)) from None
        return result_text(result), {"job_id": job_id, "result": result}


def durable_tool(
    target: Any,
    kind: str,
    *,
    name: str | None = None,
    description: str | None = None,
    args_schema: dict[str, Any] | None = None,
    timeout: float | None = None,
    tenant: str | None = None,
) -> DurableTool:
    """A tool that submits its arguments as a `kind` job and returns its result.

    `target`: a `tenure.Ledger`, a `tenure.App` (its job class gives the default description
    and schema) or a `tenure.Client`; `args_schema`: a JSON Schema of the arguments (the job's
    payload); `timeout`: how long a call waits for its job (None: as long as it takes).

    The tool message's content is the result as JSON text and its artifact `{"job_id",
    "result"}`. A failed or cancelled job is the tool's error (a `ToolMessage` with status
    `error`); a job that has not ended in time or a store that does not answer raises, which
    fails the graph's step: the job goes on, and the graph resumed on its thread finds it.
    """
    spec = tool_spec(
        target,
        kind,
        name=name,
        description=description,
        schema=args_schema,
        name_pattern=_TOOL_NAME,
    )
    calls = JobCalls(target, kind, timeout=timeout, tenant=tenant)
    return DurableTool(
        name=spec.name,
        description=spec.description,
        args_schema=spec.schema,
        calls=calls,
        spec=spec,
    )


def _thread_id(config: RunnableConfig, tool: str) -> str:
    thread = (config.get("configurable") or {}).get("thread_id")
    if thread is None or not str(thread).strip():
        raise MissingCallIdentity(
            f"tool {tool!r} needs the graph's thread id: compile the graph with a checkpointer "
            'and run it with config={"configurable": {"thread_id": ...}}'
        )
    return str(thread)


def _call_id(tool: str) -> str:
    call_id = _CALL_ID.get(None)
    if not call_id:
        raise MissingCallIdentity(
            f"tool {tool!r} needs the model's tool call id: call it with a ToolCall "
            '({"name", "args", "id", "type": "tool_call"}), as ToolNode does'
        )
    return call_id


class _Progress:
    """The call's progress as the graph's custom stream events (`stream_mode="custom"`):
    `{"tenure_job", "call", "state", "step"}` each time the call sees its job change (at the
    submit, at each read of its wait, at the end); no read is made for them."""

    def __init__(self, writer: Callable[[Any], None], job_id: str, key: str) -> None:
        self.writer, self.job_id, self.key = writer, job_id, key
        self.last: tuple[str, int] | None = None

    def seen(self, job: Job) -> None:
        now = (job.state.value, job.step)
        if now != self.last:
            self.last = now
            event = {"tenure_job": self.job_id, "call": self.key, "state": now[0], "step": now[1]}
            self.writer(event)


def _stream_writer() -> Callable[[Any], None]:
    """The graph's stream writer; outside a graph (a tool invoked on its own), none."""
    try:
        return get_stream_writer()
    except (RuntimeError, KeyError):
        return lambda event: None


def _question(job_id: str, signal: str, key: str) -> dict[str, str]:
    """What the graph's interrupt shows: the job, the signal it waits for, the call."""
    return {"tenure_job": job_id, "signal": signal, "call": key}
