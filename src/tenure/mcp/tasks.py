"""SEP-2663 (`io.modelcontextprotocol/tasks`) over tenure jobs: the task id is the job id and
the task's state is read from the job, so a task lives as long as its job, across restarts of
`tenure mcp` and on any replica. A job waiting for signals is `input_required`, with one input
request per signal still to come (its handler's `tenure.Ask`); `tasks/update` answers any of
them by sending their signals. A synchronous call answers the same way (SEP-2322), see
`server.py`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from tenure.asking import CAPABILITY, Ask
from tenure.errors import InvalidArgument
from tenure.mcp.tools import job_result
from tenure.types import JSON, Job, JobState
from tenure.waits import awaited_ask, awaited_signal, awaited_signals, describe_wait

TASKS = "io.modelcontextprotocol/tasks"
POLL_INTERVAL_MS = 500
INTERNAL_ERROR = -32603
# The failure codes that are not a tool's own error (see `_protocol_error`).
PROTOCOL_FAILURES = frozenset({"handler_error", "lease_expired"})

_STATUS = {
    JobState.QUEUED: "working",
    JobState.RUNNING: "working",
    JobState.WAITING: "working",
    JobState.SUCCEEDED: "completed",
    # The SEP keeps `failed` for protocol-level errors (`_protocol_error`); a job that failed
    # by its tool's verdict is reported as the call would report it: `completed`, `isError`.
    JobState.FAILED: "completed",
    JobState.CANCELLED: "cancelled",
}


def _time(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def task_of(job: Job, result_type: str = "complete", *, as_content: bool = False) -> dict[str, Any]:
    """The task a job is now, as `tasks/get` (result_type "complete") or a `tools/call` that
    made a task (result_type "task") answers it. Its input requests are not filtered by the
    client's capabilities: a task's client reads them when it polls and answers those it can
    (a synchronous call's driver must answer every one, see `server._input_required`)."""
    signal = awaited_signal(job)
    status = "input_required" if signal is not None else _STATUS[job.state]
    task: dict[str, Any] = {
        "resultType": result_type,
        "taskId": job.id,
        "status": status,
        "statusMessage": _message(job),
        "createdAt": _time(job.created_at),
        "lastUpdatedAt": _time(job.updated_at),
        # Kept until `tenure purge` removes the ended job: no TTL of the task's own.
        "ttlMs": None,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if signal is not None:
        task["inputRequests"] = input_requests(job, None)
    if job.state is JobState.FAILED and _protocol_error(job):
        task["status"] = "failed"
        task["error"] = {
            "code": INTERNAL_ERROR,
            "message": f"job {job.id} failed: {job.error.get('code')}",
            "data": {"code": job.error.get("code")},
        }
        return task
    if status == "completed":
        answer = job_result(job, as_content=as_content)
        task["result"] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    return task


def _protocol_error(job: Job) -> bool:
    """A job that ended without its tool reporting an error: its handler raised something
    unforeseen, or its worker died on every attempt. The SEP's `failed`; a NonRetryable (the
    tool's own verdict) stays a tool error, `completed` with `isError`."""
    return isinstance(job.error, dict) and job.error.get("code") in PROTOCOL_FAILURES


def _message(job: Job) -> str:
    if job.state is JobState.WAITING:
        return f"waiting for {describe_wait(job.wait)}"
    if job.state is JobState.RUNNING:
        return f"running (attempt {job.attempt} of {job.max_attempts})"
    return job.state.value


def input_requests(job: Job, capabilities: Any) -> dict[str, Any]:
    """The input a job waiting for signals asks of its caller, keyed by each signal's name (a
    wait for several lists those still to come): its handler's question (`tenure.Ask`), or a
    form naming the signal. A question whose method the client did not declare is left out
    (the job still waits: `tenure_signal` or another client may answer it)."""
    requests: dict[str, Any] = {}
    for signal in awaited_signals(job):
        ask = _ask(job, signal)
        if capabilities is None or getattr(capabilities, CAPABILITY[ask.method], None):
            requests[signal] = ask.document()
    return requests


def signal_payload(job: Job, signal: str, response: Any) -> JSON:
    """The signal an input response to the job's question for `signal` sends (see
    `Ask.answer`); raises `InvalidArgument` for a response of the wrong shape, or for a signal
    the job does not wait for: nothing is sent."""
    if signal not in awaited_signals(job):
        raise InvalidArgument(f"job {job.id} waits for no signal {signal!r}")
    return cast(JSON, _ask(job, signal).answer(response))


def _ask(job: Job, signal: str) -> Ask:
    asked = awaited_ask(job, signal)
    if asked is not None:
        return asked
    return Ask.form(f"job {job.id} ({job.kind}) waits for the signal {signal!r}")
