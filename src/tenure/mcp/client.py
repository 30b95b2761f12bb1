"""The client side of the tasks extension for the official `mcp` SDK's `Client`, which ships the
extension plumbing but no SEP-2663 runtime: `DurableTasks()` in `Client(extensions=[...])` makes
`call_tool` accept a task and poll it to its result; `get_task`, `update_task` and
`cancel_task` drive a task by hand (after a restart, from a task id the caller kept)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, EmptyResult, Request, RequestParams, Result, TextContent
from pydantic import ConfigDict

from tenure.mcp.tasks import TASKS

TERMINAL = frozenset({"completed", "failed", "cancelled"})
# Answers an input request (key, request) of a task with its input response.
InputAnswer = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class _Task(Result):
    model_config = ConfigDict(extra="allow")

    task_id: str
    status: str
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def requests(self) -> dict[str, Any]:
        """The outstanding input requests (`inputRequests`) of an `input_required` task."""
        # An extra field: the SDK keeps `inputRequests` out of the models of claimed results.
        found = (self.model_extra or {}).get("inputRequests")
        return found if isinstance(found, dict) else {}

    def tool_result(self) -> CallToolResult:
        """A completed task's tool result; a cancelled one as a tool error."""
        if self.status == "completed" and self.result is not None:
            return CallToolResult.model_validate(self.result)
        if self.status == "failed":
            error = self.error or {}
            raise MCPError(int(error.get("code", -32603)), str(error.get("message", "failed")))
        text = f"task {self.task_id} is {self.status}"
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


class CreatedTask(_Task):
    """What `tools/call` answers when the server made a task (`resultType: "task"`)."""

    result_type: Literal["task"] = "task"


class Task(_Task):
    """A task as `tasks/get` reports it."""

    result_type: Literal["complete"] = "complete"


class TaskParams(RequestParams):
    task_id: str


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any]


class GetTaskRequest(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTaskRequest(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTaskRequest(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


async def get_task(session: ClientSession, task_id: str) -> Task:
    return await session.send_request(GetTaskRequest(params=TaskParams(task_id=task_id)), Task)


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> None:
    params = UpdateTaskParams(task_id=task_id, input_responses=responses)
    await session.send_request(UpdateTaskRequest(params=params), EmptyResult)


async def cancel_task(session: ClientSession, task_id: str) -> None:
    await session.send_request(CancelTaskRequest(params=TaskParams(task_id=task_id)), EmptyResult)


class DurableTasks(ClientExtension):
    """Declares `io.modelcontextprotocol/tasks` and resolves a task that `call_tool` gets by
    polling `tasks/get` at the server's `pollIntervalMs`; `answer` (if given) answers input
    requests, else the call waits for someone else to (`tenure signal`, another client)."""

    identifier = TASKS

    def __init__(self, answer: InputAnswer | None = None) -> None:
        self.answer = answer

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve),)

    async def _resolve(self, created: CreatedTask, context: ClaimContext) -> CallToolResult:
        task: _Task = created
        answered: set[str] = set()
        while not task.terminal:
            if self.answer is not None and task.status == "input_required":
                responses = {
                    key: await self.answer(key, request)
                    for key, request in task.requests.items()
                    if key not in answered
                }
                if responses:
                    await update_task(context.session, task.task_id, responses)
                    answered |= set(responses)
            await anyio.sleep((task.poll_interval_ms or 1000) / 1000)
            task = await get_task(context.session, task.task_id)
        return task.tool_result()
