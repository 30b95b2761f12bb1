"""A framework's tool call as a tenure job: the one path both adapters take.

`JobCalls(target, kind)` submits the call's arguments as the job's payload under a key the
adapter derives from what its framework keeps stable across a resume, and awaits the job's end
on a `Ledger`, an `App` (its shared ledger) or a `Client` (a process that only reaches `tenure
serve`). Only a succeeded job is a result; a failed or cancelled one is `JobFailed`, which the
adapters hand to the model as their framework's tool error; a job that has not ended in time,
or a database or service that does not answer, is an exception that stops the agent's run,
since the job goes on and a resumed run finds it again by its key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from tenure.app import App
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import InvalidArgument, JobFailed
from tenure.integrations.arguments import argument_problems, schema_validator
from tenure.ledger import Ledger, await_end
from tenure.types import JSON, Job, JobState
from tenure.validation import check_name
from tenure.waits import awaited_signal, signals_received

# Each wait on a Client is at most this long, so that a cancelled run stops soon.
_WAIT_SLICE = 5.0
# On a ledger a wait costs a read at each end, none between: once the unclaimed warning is
# past, slices this long (a sync caller cannot be cancelled mid-wait anyway).
_LEDGER_SLICE = 60.0
# A wait for the job's end *or* its asking for a signal reads the job this often (a job that
# suspends announces nothing).
_FIRST_POLL, _SIGNAL_POLL = 0.02, 0.25
ANY_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}


log = logging.getLogger("tenure.integrations")
# How long a tool call waits for a worker to take its job up before saying that none has.
UNCLAIMED_WARNING = 10.0


def unclaimed_message(job: Job, waited: float, where: str) -> str:
    """That no worker has taken a call's job up (the usual cause: no `tenure worker` for the
    kind, or one on another database). Ids and the kind only, never the payload."""
    return (
        f"job {job.id} of kind {job.kind!r} has waited {waited:.0f} s and no worker has "
        f"claimed it: is a `tenure worker` for {job.kind!r} running on {where}?"
    )


def unclaimed(job: Job) -> bool:
    """A job no worker has claimed yet (queued, never attempted)."""
    return job.state is JobState.QUEUED and job.attempt == 0


def ended_message(job: Job) -> str:
    """Why an ended job has no result, in words for a model or a person (no payload)."""
    if job.state is JobState.CANCELLED:
        return f"job {job.id} was cancelled"
    error = job.error if isinstance(job.error, dict) else {}
    reason = error.get("message") or error.get("code") or "no reason recorded"
    return f"job {job.id} failed after {job.attempt} attempt(s): {reason}"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a framework shows the model: a name, words, and the arguments' schema."""

    name: str
    description: str
    schema: dict[str, Any]
    validator: Any

    def problems(self, arguments: Any) -> list[str]:
        if not isinstance(arguments, dict):
            return [f"(arguments): must be a JSON object, got {type(arguments).__name__}"]
        return argument_problems(self.validator, arguments)


def tool_spec(
    target: Any,
    kind: str,
    *,
    name: str | None,
    description: str | None,
    schema: dict[str, Any] | None,
    name_pattern: re.Pattern[str],
) -> ToolSpec:
    """The tool's spec: what the caller gave, else what the App's job class declares (its
    `description` and `input_schema`), else the kind and any JSON object."""
    job_class = target.job_classes.get(kind) if isinstance(target, App) else None
    if isinstance(target, App) and job_class is None:
        raise InvalidArgument(
            f"the app has no job class {kind!r}: register it with @app.job, or pass the "
            "app's ledger"
        )
    name = kind if name is None else name
    if not isinstance(name, str) or not name_pattern.match(name):
        raise InvalidArgument(
            f"{name!r} cannot be a tool name here ({name_pattern.pattern}): pass name=..."
        )
    if description is None:
        description = (job_class.description if job_class else None) or f"Runs {kind}, once."
    if not isinstance(description, str) or not description.strip():
        raise InvalidArgument("a tool needs a description for the model")
    if schema is None:
        schema = (job_class.input_schema if job_class else None) or ANY_OBJECT
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise InvalidArgument(
            'the arguments\' schema must be a JSON Schema of {"type": "object", ...}: the '
            "arguments are the job's payload"
        )
    return ToolSpec(name, description, schema, schema_validator(schema, f"tool {name!r}"))


class JobCalls:
    """Tool calls of one kind as jobs on a `Ledger`, an `App` or a `Client`.

    `timeout` is how long a call waits for its job's end (None: as long as it takes);
    `tenant` is the tenant a Ledger or App submits as (a Client's key decides its own);
    `clock` times the timeout and the unclaimed warning.
    """

    def __init__(
        self,
        target: Any,
        kind: str,
        *,
        timeout: float | None,
        tenant: str | None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        self.kind = check_name(kind, "kind")
        if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
            raise InvalidArgument(f"timeout must be seconds > 0 or None, got {timeout!r}")
        self.timeout = None if timeout is None else float(timeout)
        self.ledger = target.ledger if isinstance(target, App) else target
        if not isinstance(self.ledger, Ledger):
            self.ledger = None
            if not _is_client(target):
                raise InvalidArgument(
                    "the target must be a tenure.Ledger, a tenure.App or a tenure.Client, "
                    f"got {type(target).__name__}"
                )
            if tenant is not None:
                raise InvalidArgument("a Client submits as its key's tenant: drop tenant=")
        # What the calls go to: the ledger, or the client (the same names and meanings).
        self.api: Any = self.ledger if self.ledger is not None else target
        self.tenant = check_name(tenant or "default", "tenant")
        self._warned = False

    def submit(self, payload: JSON, key: str) -> str:
        """The job for this key: made now, or the one a former call of the key made."""
        key = check_name(key, "idempotency key")
        if self.ledger is None:
            return str(self.api.submit(self.kind, payload, idempotency_key=key))
        return self.ledger.submit(self.kind, payload, idempotency_key=key, tenant=self.tenant)

    def signal(self, job_id: str, name: str, payload: JSON) -> bool:
        return bool(self.api.signal(job_id, name, payload))

    def signals_received(self, job_id: str) -> list[str]:
        """The signals the job took so far, in order (each an answer the framework relayed)."""
        return signals_received(self.api.events(job_id))

    def wait(
        self,
        job_id: str,
        *,
        or_signal_besides: Collection[str] | None = None,
        seen: Callable[[Job], None] | None = None,
    ) -> Job:
        """The job once it ended, or (given `or_signal_besides`) once it waits for a signal
        not in it (a job a signal woke still says it waits until a worker takes it up);
        `TimeoutError` past the timeout (the job goes on). `seen` gets each read of the job."""
        or_signal = or_signal_besides is not None
        besides = or_signal_besides or ()
        started = self.clock.monotonic()
        deadline = None if self.timeout is None else started + self.timeout
        pause = _FIRST_POLL
        while True:
            slice_ = self._slice(started)
            remaining = slice_ if deadline is None else deadline - self.clock.monotonic()
            wait = min(pause if or_signal else slice_, remaining)
            job: Job = self.api.wait(job_id, max(0.0, wait))
            if seen is not None:
                seen(job)
            self._check_claimed(job, started)
            asks = awaited_signal(job)
            if job.terminal or (or_signal and asks is not None and asks not in besides):
                return job
            if deadline is not None and self.clock.monotonic() >= deadline:
                raise self._late(job)
            pause = min(pause * 2, _SIGNAL_POLL)

    def _slice(self, started: float) -> float:
        if self.ledger is None or self.clock.monotonic() - started < UNCLAIMED_WARNING:
            return _WAIT_SLICE
        return _LEDGER_SLICE

    async def await_end(self, job_id: str) -> Job:
        """`wait` for asyncio code: a cancelled run stops waiting at once (the job goes on)."""
        if self.ledger is not None:
            ledger = self.ledger
            started = self.clock.monotonic()

            async def seen(reading: Job) -> None:
                self._check_claimed(reading, started)

            job = await await_end(
                ledger,
                job_id,
                lambda: asyncio.to_thread(ledger.get, job_id),
                self.timeout,
                seen=seen,
            )
            if not job.terminal:
                raise self._late(job)
            return job
        started = self.clock.monotonic()
        deadline = None if self.timeout is None else started + self.timeout
        while True:
            remaining = _WAIT_SLICE if deadline is None else deadline - self.clock.monotonic()
            job = await asyncio.to_thread(
                self.api.wait, job_id, max(0.0, min(_WAIT_SLICE, remaining))
            )
            self._check_claimed(job, started)
            if job.terminal:
                return job
            if deadline is not None and self.clock.monotonic() >= deadline:
                raise self._late(job)

    def _check_claimed(self, job: Job, since: float) -> None:
        """Once, after UNCLAIMED_WARNING seconds: say that no worker has taken the job up
        (the usual cause: no `tenure worker` for the kind, or one on another database)."""
        if self._warned or not unclaimed(job):
            return
        if self.clock.monotonic() - since < UNCLAIMED_WARNING:
            return
        self._warned = True
        where = (
            self.ledger.operations.where if self.ledger is not None else "the service's database"
        )
        log.warning("%s", unclaimed_message(job, UNCLAIMED_WARNING, where))

    def _late(self, job: Job) -> TimeoutError:
        return TimeoutError(
            f"job {job.id} ({self.kind}) has not ended after {self.timeout:g} s (it is "
            f"{job.state.value}); it goes on, and a resumed run finds it again by its key"
        )


def result_text(result: JSON) -> str:
    """A result as a model reads it: text as it is, anything else as compact JSON."""
    return result if isinstance(result, str) else json.dumps(result, separators=(",", ":"))


def outcome(job: Job) -> JSON:
    """An ended job's result; `JobFailed` if it failed or was cancelled."""
    if job.state is not JobState.SUCCEEDED:
        raise JobFailed(job)
    return job.result


def _is_client(target: Any) -> bool:
    try:
        from tenure.client import Client
    except ImportError:  # httpx is not installed: nothing can be a Client
        return False
    return isinstance(target, Client)
