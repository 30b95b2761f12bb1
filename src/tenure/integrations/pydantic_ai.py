"""Pydantic AI tools that are tenure jobs (extra `tenure[pydantic-ai]`).

`durable_tool(target, kind)` is a `pydantic_ai.Tool` (`durable_toolset(target, kinds)` a
`FunctionToolset` of several) whose every call is a tenure job, keyed `RUN_KEY:CALL_ID`: the
run key is the run's `conversation_id` (Pydantic AI keeps it on the message history, so a run
resumed from stored messages has the same one) unless `run_key=` says otherwise, and the call
id is the model's `tool_call_id`, kept in the message history. An agent resumed from its
stored messages after a crash issues the same call again and finds the same job: the same
answer, one effect.

A job that waits for a signal (`ctx.wait_for` in its handler) makes the call a deferred tool
call needing approval (`ApprovalRequired`): the run ends with `DeferredToolRequests`. Resume
it with `DeferredToolResults(approvals={call_id: True}, metadata={call_id: payload})`: the
approved call finds its job and sends the signal it waits for, with `payload` (default
`True`), then returns the job's result.
"""

from __future__ import annotations

from tenure.extras import needs

needs("pydantic-ai", "pydantic_ai", "jsonschema", what="tenure.integrations.pydantic_ai")

import asyncio
import re
from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai import RunContext, Tool
from pydantic_ai.exceptions import ApprovalRequired, ModelRetry, ToolFailed
from pydantic_ai.toolsets import FunctionToolset

from tenure.errors import IdempotencyConflict, InvalidArgument, JobFailed
from tenure.integrations.jobcalls import JobCalls, ended_message, outcome, tool_spec
from tenure.types import JSON
from tenure.waits import awaited_signal

# What model APIs accept as a function's name.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
RunKey = str | Callable[[RunContext[Any]], str]


class MissingRunKey(InvalidArgument):
    """A durable tool was called without a run key or a call id: it refuses rather than make
    a key that a resumed run could not find again."""


def durable_tool(
    target: Any,
    kind: str,
    *,
    name: str | None = None,
    description: str | None = None,
    json_schema: dict[str, Any] | None = None,
    timeout: float | None = None,
    run_key: RunKey | None = None,
    tenant: str | None = None,
) -> Tool[Any]:
    """A `Tool` that submits its arguments as a `kind` job and returns its result.

    `target`: a `tenure.Ledger`, a `tenure.App` (its job class gives the default description
    and schema) or a `tenure.Client`. `run_key`: a string or a function of the run context
    (default: the run's `conversation_id`). `timeout`: how long a call waits for its job
    (None: as long as it takes).

    Arguments that do not fit the schema go back to the model as a retry prompt naming the
    fields, and no job is made; a failed or cancelled job is the tool's failure, told to the
    model (`ToolFailed`); a job that has not ended in time or a store that does not answer
    raises, which ends the run: the job goes on, and the resumed run finds it again.
    """
    spec = tool_spec(
        target, kind, name=name, description=description, schema=json_schema,
        name_pattern=_TOOL_NAME,
    )  # fmt: skip
    calls = JobCalls(target, kind, timeout=timeout, tenant=tenant)
    if run_key is not None and not callable(run_key) and not _usable(run_key):
        raise InvalidArgument(f"run_key must be a non-empty string or a function, got {run_key!r}")

    def check(ctx: RunContext[Any], **arguments: Any) -> None:
        problems = spec.problems(arguments)
        if problems:
            raise ModelRetry("invalid arguments, no job was made: " + "; ".join(problems))

    async def call(ctx: RunContext[Any], **arguments: Any) -> JSON:
        key = f"{_run_key_of(ctx, run_key, spec.name)}:{_call_id(ctx, spec.name)}"
        try:
            job_id = await asyncio.to_thread(calls.submit, arguments, key)
        except (InvalidArgument, IdempotencyConflict) as exc:
            # Arguments the schema allows but a job cannot hold (nested too deep, too large,
            # a NUL), or an approval that changed them: the model reads why.
            raise ToolFailed(f"no job was made: {exc}") from None
        received = await asyncio.to_thread(calls.signals_received, job_id)
        if ctx.tool_call_approved:
            await asyncio.to_thread(_answer, calls, job_id, ctx.tool_call_metadata, received)
        job = await asyncio.to_thread(calls.wait, job_id, or_signal_besides=received)
        if not job.terminal:
            signal = awaited_signal(job)
            raise ApprovalRequired(metadata={"tenure_job": job.id, "signal": signal, "key": key})
        try:
            return outcome(job)
        except JobFailed as failed:
            raise ToolFailed(ended_message(failed.job)) from None

    return Tool.from_schema(
        call,
        name=spec.name,
        description=spec.description,
        json_schema=spec.schema,
        takes_ctx=True,
        args_validator=check,
    )


def durable_toolset(
    target: Any,
    kinds: Sequence[str],
    *,
    timeout: float | None = None,
    run_key: RunKey | None = None,
    tenant: str | None = None,
) -> FunctionToolset[Any]:
    """A `FunctionToolset` of `durable_tool`s, one per kind (each named after its kind)."""
    if isinstance(kinds, str) or not kinds:
        raise InvalidArgument("kinds must be a non-empty list of job kinds")
    tools = [
        durable_tool(target, kind, timeout=timeout, run_key=run_key, tenant=tenant)
        for kind in kinds
    ]
    return FunctionToolset(tools)


def _answer(calls: JobCalls, job_id: str, metadata: Any, received: list[str]) -> None:
    """An approved call: send the signal its job waits for (the approval's metadata, or
    True), once; a job that no longer waits (answered already, ended) is left as it is."""
    job = calls.wait(job_id, or_signal_besides=received)
    signal = awaited_signal(job)
    if signal is not None and not job.terminal:
        calls.signal(job_id, signal, True if metadata is None else metadata)
        received.append(signal)


def _run_key_of(ctx: RunContext[Any], run_key: RunKey | None, tool: str) -> str:
    found: Any = run_key(ctx) if callable(run_key) else run_key or ctx.conversation_id
    if not _usable(found):
        raise MissingRunKey(
            f"tool {tool!r} needs a run key to make a job a resumed run finds again: run the "
            f"agent with a conversation_id, or pass durable_tool(..., run_key=...) (got {found!r})"
        )
    return str(found)


def _call_id(ctx: RunContext[Any], tool: str) -> str:
    if not _usable(ctx.tool_call_id):
        raise MissingRunKey(f"tool {tool!r} was called without the model's tool call id")
    return str(ctx.tool_call_id)


def _usable(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())
