"""OpenAI Agents SDK tools that are tenure jobs (extra `tenure[openai-agents]`).

`durable_tool(target, kind)` is an `agents.FunctionTool` whose every call is a tenure job,
keyed `RUN_KEY:CALL_ID`: the run key is the caller's (`run_key=`, or the run context's
`tenure_run_key`) and the call id is the model's, which the SDK keeps in the `RunState` it
saves at an interruption. A run restored with `RunState.from_json` after a crash re-issues the
same call with the same id, so it finds the same job: the same answer, one effect. A model asked
again mints new call ids, which is why the run key alone is never the key.
"""

from __future__ import annotations

from tenure.extras import needs

needs("openai-agents", "agents", "jsonschema", what="tenure.integrations.openai_agents")

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from tenure.errors import InvalidArgument, JobFailed
from tenure.integrations.jobcalls import JobCalls, ended_message, outcome, result_text, tool_spec

RUN_KEY_ATTRIBUTE = "tenure_run_key"
# What the Responses and Chat Completions APIs accept as a function's name.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

RunKey = str | Callable[[ToolContext[Any]], str]
# The SDK's own per-call policy: (run context, the call's arguments, call id) -> needs approval?
ApprovalPolicy = Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]


class MissingRunKey(InvalidArgument):
    """A durable tool was called without a run key: it refuses rather than make a key that a
    resumed run could not find again."""


def durable_tool(
    target: Any,
    kind: str,
    *,
    name: str | None = None,
    description: str | None = None,
    params_schema: dict[str, Any] | None = None,
    timeout: float | None = None,
    run_key: RunKey | None = None,
    tenant: str | None = None,
    needs_approval: bool | ApprovalPolicy = False,
) -> FunctionTool:
    """A `FunctionTool` that submits its arguments as a `kind` job and returns its result.

    `target`: a `tenure.Ledger`, a `tenure.App` (its job class gives the default description
    and schema) or a `tenure.Client`. `run_key`: a string, or a function of the tool context,
    else the run context's `tenure_run_key` (an attribute or a mapping key). `timeout`: how
    long a call waits for its job (None: as long as it takes). `needs_approval` as for any
    `FunctionTool`: the SDK interrupts the run, and the `RunState` it hands back is the one to
    save.

    A failed or cancelled job is the tool's error, told to the model; a job that has not ended
    in time or a store that does not answer raises, which ends the run: the job goes on, and
    the run restored from its saved state finds it again.
    """
    spec = tool_spec(
        target,
        kind,
        name=name,
        description=description,
        schema=params_schema,
        name_pattern=_TOOL_NAME,
    )
    calls = JobCalls(target, kind, timeout=timeout, tenant=tenant)
    if run_key is not None and not callable(run_key) and not _usable(run_key):
        raise InvalidArgument(f"run_key must be a non-empty string or a function, got {run_key!r}")

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        key = f"{_run_key_of(ctx, run_key)}:{ctx.tool_call_id}"
        try:
            payload = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            return f"error: the arguments are not JSON ({exc.msg}); no job was made"
        problems = spec.problems(payload)
        if problems:
            return "error: invalid arguments, no job was made: " + "; ".join(problems)
        job_id = await asyncio.to_thread(calls.submit, payload, key)
        try:
            result = outcome(await calls.await_end(job_id))
        except JobFailed as failed:
            return f"error: {ended_message(failed.job)}"
        return result_text(result)

    return FunctionTool(
        name=spec.name,
        description=spec.description,
        params_json_schema=spec.schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,
        needs_approval=needs_approval,
    )


def _run_key_of(ctx: ToolContext[Any], run_key: RunKey | None) -> str:
    if callable(run_key):
        found: Any = run_key(ctx)
        where = "the run_key function returned"
    elif run_key is not None:
        return run_key
    else:
        context = ctx.context
        if isinstance(context, Mapping):
            found = context.get(RUN_KEY_ATTRIBUTE)
        else:
            found = getattr(context, RUN_KEY_ATTRIBUTE, None)
        where = f"the run context's {RUN_KEY_ATTRIBUTE!r} is"
    if not _usable(found):
        raise MissingRunKey(
            f"tool {ctx.tool_name!r} needs a run key to make a job a resumed run finds again: "
            f"pass durable_tool(..., run_key=...) or give the run context a "
            f"{RUN_KEY_ATTRIBUTE!r} ({where} {found!r})"
        )
    return str(found)


def _usable(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())
