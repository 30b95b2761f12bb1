"""What the process holding a synchronous call says to its caller on the call's own stream, on
the protocols before 2026-07-28: the job's question as a request (`elicitation/create`,
`sampling/createMessage`, `roots/list`), and its progress as log messages at the level the
client set with `logging/setLevel`. The 2026 protocol asks through `input_required` results
and tasks instead (see `server.py`); this is for the clients most people run today.

Nothing here is durable, by design: the question is the job's wait and the answer becomes the
job's signal (stored once), so a caller that loses this process asks again by calling again
with its key, or answers with `tenure_signal`."""

from __future__ import annotations

import logging
from typing import Any

import anyio.to_thread
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    CreateMessageResult,
    ElicitResult,
    ListRootsResult,
    LoggingMessageNotification,
    LoggingMessageNotificationParams,
    ServerRequest,
)
from pydantic import BaseModel, TypeAdapter, ValidationError

from tenure.asking import ELICIT, LIST_ROOTS, SAMPLE
from tenure.ledger import Ledger
from tenure.logs import emit
from tenure.types import Job, JobState, StageStatus
from tenure.waits import awaited_signal, describe_wait

log = logging.getLogger("tenure")

# MCP's log levels, in order of severity (RFC 5424's names).
LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
# A question's answer may take a person a while; past this the call falls back to waiting
# for the signal by another way (`tenure_signal`, another call with the key).
ANSWER_TIMEOUT_SECONDS = 600.0
_RESULTS: dict[str, type[BaseModel]] = {
    ELICIT: ElicitResult,
    SAMPLE: CreateMessageResult,
    LIST_ROOTS: ListRootsResult,
}
_REQUEST: TypeAdapter[Any] = TypeAdapter(ServerRequest)


class LogLevels:
    """The level each client set with `logging/setLevel`, by its session: the `Mcp-Session-Id`
    over HTTP, the one connection over stdio (`STDIO`). No level set: no log messages; a
    stateless request has no session, so it never gets any. The oldest of MAX_SESSIONS are
    forgotten (their clients then get no more log messages until they set a level again)."""

    STDIO = "stdio"
    MAX_SESSIONS = 10_000

    def __init__(self) -> None:
        self._levels: dict[str, str] = {}

    def set(self, session: str | None, level: str) -> None:
        if session is None:
            return
        self._levels.pop(session, None)
        if len(self._levels) >= self.MAX_SESSIONS:
            del self._levels[next(iter(self._levels))]
        self._levels[session] = level

    def allows(self, session: str | None, level: str) -> bool:
        """Whether a message at `level` goes to this session's client."""
        chosen = None if session is None else self._levels.get(session)
        return chosen is not None and LEVELS.index(level) >= LEVELS.index(chosen)


async def send_log(session: ServerSession, request_id: Any, level: str, text: str) -> None:
    """A `notifications/message` on the call's stream (ids, stage names, states; no content)."""
    notification = LoggingMessageNotification(
        params=LoggingMessageNotificationParams(level=level, data=text, logger="tenure")  # type: ignore[arg-type]
    )
    await session.send_notification(notification, related_request_id=request_id)


async def ask_caller(session: ServerSession, request_id: Any, question: dict[str, Any]) -> Any:
    """Put a job's question (`{"method", "params"}`, an input request) to the caller on the
    call's stream and return its answer as JSON; None when it cannot be asked or was not
    answered (no back channel, an error, a malformed or late answer): the job still waits,
    and another call with its key or `tenure_signal` answers it."""
    method = question["method"]
    try:
        request = _REQUEST.validate_python(question)
        answer = await session.send_request(
            request,
            _RESULTS[method],
            request_read_timeout_seconds=ANSWER_TIMEOUT_SECONDS,
            metadata=ServerMessageMetadata(related_request_id=request_id),
        )
    except (MCPError, ValidationError, TimeoutError) as exc:
        emit(log, logging.INFO, "question_unanswered", method=method, reason=type(exc).__name__)
        return None
    return answer.model_dump(by_alias=True, mode="json", exclude_none=True)


class Progress:
    """What one call hears of its job: `notifications/progress` (when it gave a progress
    token) and, where its client set a log level that lets `info` through, the same words as
    `notifications/message`: the job's state at once, then each finished stage, what it waits
    for, and how it ended. The stages are read only when the job's step moved on."""

    def __init__(
        self,
        session: ServerSession,
        ledger: Ledger,
        job_id: str,
        *,
        request_id: Any = None,
        logs: bool = False,
    ) -> None:
        self.session, self.ledger, self.job_id = session, ledger, job_id
        self.request_id, self.logs = request_id, logs
        self.step: int | None = None
        self.done: set[int] = set()
        self.waiting: str | None = None
        self.ended = False

    async def say(self, text: str) -> None:
        await self.session.report_progress(len(self.done), None, text)
        if self.logs:
            await send_log(self.session, self.request_id, "info", text)

    async def seen(self, job: Job) -> None:
        if self.step is None:
            await self.say(f"job {job.id} {job.state.value}")
        elif job.step != self.step:
            stages = await anyio.to_thread.run_sync(self.ledger.stages, self.job_id)
            for stage in stages:
                if stage.status is StageStatus.DONE and stage.position not in self.done:
                    self.done.add(stage.position)
                    await self.say(f"{stage.kind.value} {stage.name} done")
        self.step = job.step
        waiting = describe_wait(job.wait) if job.state is JobState.WAITING else None
        if waiting and waiting != self.waiting:
            hint = " (send it with tenure_signal)" if awaited_signal(job) else ""
            await self.say(f"waiting for {waiting}{hint}")
        self.waiting = waiting
        if job.terminal and not self.ended and self.logs:
            self.ended = True
            await send_log(self.session, self.request_id, "info", f"job {job.id} {job.state.value}")
