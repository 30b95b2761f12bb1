"""What `tenure mcp` lists: a tool per job class marked `tool=True` (its arguments are the job's
payload, checked against the class's JSON Schema before any job is made) and four tools of
tenure's own for clients without the tasks extension."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mcp_types import CallToolResult, ContentBlock, TextContent, Tool
from pydantic import TypeAdapter, ValidationError

from tenure.app import App
from tenure.asking import Ask
from tenure.errors import InvalidArgument, InvalidJobClass
from tenure.integrations.arguments import argument_problems, schema_validator
from tenure.integrations.jobcalls import ended_message, result_text
from tenure.types import JSON, Job, JobState
from tenure.waits import describe_wait

# SEP-986: what a tool name may be.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
JOB_ID_META = "io.tenure/job-id"
_ID = {"type": "string", "description": "the job id (the task id)"}
_BY_ID = {
    "type": "object",
    "properties": {"id": _ID},
    "required": ["id"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class JobTool:
    """One job class offered as a tool."""

    kind: str
    description: str
    input_schema: dict[str, Any]
    max_attempts: int
    validator: Any
    output_schema: dict[str, Any] | None = None
    task_support: str = "optional"
    returns_content: bool = False
    needs: tuple[str, ...] = ()
    asks_first: tuple[tuple[str, Ask], ...] = ()

    def listing(self) -> Tool:
        return Tool(
            name=self.kind,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
        )

    def argument_errors(self, arguments: dict[str, Any]) -> list[str]:
        return argument_problems(self.validator, arguments)


def job_tools(app: App) -> dict[str, JobTool]:
    """The app's tool job classes by name; a name MCP cannot carry or a schema that is not one
    is refused at start, not at the first call."""
    tools: dict[str, JobTool] = {}
    for kind, job_class in sorted(app.job_classes.items()):
        if not job_class.tool:
            continue
        if not _TOOL_NAME.match(kind) or kind in OWN_TOOLS:
            raise InvalidJobClass(
                f"job class {kind!r} cannot be an MCP tool: a tool name is 1-128 of A-Z a-z 0-9 "
                f"_ - . and not one of {', '.join(sorted(OWN_TOOLS))}"
            )
        schema = job_class.input_schema or {}
        try:
            validator = schema_validator(schema, f"job class {kind!r}")
        except InvalidArgument as exc:
            raise InvalidJobClass(str(exc)) from None
        tools[kind] = JobTool(
            kind=kind,
            description=job_class.description or "",
            input_schema=schema,
            max_attempts=job_class.max_attempts,
            validator=validator,
            output_schema=job_class.output_schema,
            task_support=job_class.task_support,
            returns_content=job_class.returns_content,
            needs=job_class.needs,
            asks_first=job_class.asks_first,
        )
    return tools


OWN_TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            name="tenure_status",
            description="The state of a tenure job started by a tool call: queued, running, "
            "waiting (and for what), succeeded, failed or cancelled.",
            input_schema=_BY_ID,
        ),
        Tool(
            name="tenure_result",
            description="The result of a tenure job, waiting up to wait_seconds for it to end.",
            input_schema={
                "type": "object",
                "properties": {
                    "id": _ID,
                    "wait_seconds": {"type": "number", "minimum": 0, "maximum": 300},
                },
                "required": ["id"],
                "additionalProperties": False,
            },
        ),
        Tool(
            name="tenure_signal",
            description="Send a named signal (an approval, an answer) to a job waiting for it.",
            input_schema={
                "type": "object",
                "properties": {
                    "id": _ID,
                    "name": {"type": "string", "description": "the signal's name"},
                    "payload": {
                        "description": "the signal's payload: any JSON value",
                        # One `type` per branch: portable to single-type dialects (the MCP
                        # Inspector's --strict check).
                        "anyOf": [
                            {"type": kind}
                            for kind in ("object", "array", "string", "number", "boolean", "null")
                        ],
                    },
                },
                "required": ["id", "name"],
                "additionalProperties": False,
            },
        ),
        Tool(
            name="tenure_cancel",
            description="Cancel a job: it will not publish a result, and its fencing token is "
            "bumped so that the receivers refuse its late effects.",
            input_schema=_BY_ID,
        ),
    )
}
_OWN_VALIDATORS = {
    name: schema_validator(dict(tool.input_schema), f"tool {name!r}")
    for name, tool in OWN_TOOLS.items()
}


def own_argument_errors(name: str, arguments: dict[str, Any]) -> list[str]:
    return argument_problems(_OWN_VALIDATORS[name], arguments)


def text_result(value: JSON, *, error: bool = False, job_id: str | None = None) -> CallToolResult:
    """A tool result carrying `value` as JSON text (and as structured content if an object)."""
    text = result_text(value)
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=value if isinstance(value, dict) and not error else None,
        is_error=error,
        _meta=None if job_id is None else {JOB_ID_META: job_id},
    )


def error_result(message: str, job_id: str | None = None) -> CallToolResult:
    return text_result(message, error=True, job_id=job_id)


def job_result(job: Job, *, as_content: bool = False) -> CallToolResult:
    """What a tool call of an ended job answers: its result (`as_content`: the MCP content
    blocks it is), or a tool error saying why not."""
    if job.state is not JobState.SUCCEEDED:
        return error_result(ended_message(job), job.id)
    if not as_content:
        return text_result(job.result, job_id=job.id)
    try:
        blocks = _CONTENT.validate_python(job.result)
    except ValidationError as exc:
        problem = exc.errors(include_input=False, include_url=False)[0]
        where = "/".join(map(str, problem["loc"]))
        return error_result(
            f"job {job.id} returned no MCP content blocks ({where}: {problem['msg']})", job.id
        )
    return CallToolResult(content=blocks, _meta={JOB_ID_META: job.id})


_CONTENT: TypeAdapter[list[ContentBlock]] = TypeAdapter(list[ContentBlock])


def job_summary(job: Job) -> dict[str, Any]:
    """A job's state without its payload or result: ids, times and what it waits for."""
    summary: dict[str, Any] = {
        "id": job.id,
        "kind": job.kind,
        "state": job.state.value,
        "attempt": job.attempt,
        "created_at": job.created_at.isoformat(),
        "updated_at": job.updated_at.isoformat(),
    }
    if job.state is JobState.WAITING:
        summary["waiting_for"] = describe_wait(job.wait)
    return summary
