"""`tenure.Client` and `tenure.AsyncClient`: `tenure serve`'s HTTP API from Python (httpx).

One core, async at the edge: every call is described once (`_Call`: method, path, body, whether
it may be retried) and its answer read once (`_read`); the two clients only send. HTTP errors
become tenure's exceptions; a transport error (refused, reset, timed out) is retried only for a
call that is safe to repeat (reads, a submit with an idempotency key, cancel, signal) and then
raises `ServiceUnavailable`. Every request has a bounded timeout.
"""

from __future__ import annotations

from tenure.extras import needs

needs("client", "httpx", what="tenure.Client")

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Self, Unpack
from urllib.parse import quote

import httpx

from tenure import tracing
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import (
    SERVED,
    AccessDenied,
    InvalidArgument,
    JobFailed,
    JobNotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    StoreUnavailable,
    TenureError,
)
from tenure.evidence import Evidence, reference_from
from tenure.options import SubmitKwargs, SubmitOptions, changed_options, submit_options
from tenure.types import JSON, Event, EventType, Job, JobState
from tenure.wait_state import WaitState

# The server answers a long-poll after at most its --max-wait (30 s by default); each wait
# request asks for no more than this and the client loops until its own timeout.
_LONG_POLL = 25.0
_RETRY_PAUSE = 0.2

# The service's codes back to their classes; its database away is this client's service away.
_BY_CODE: dict[str, Callable[[str], TenureError]] = {
    **{kind.error_code: kind for kind in SERVED},
    StoreUnavailable.error_code: ServiceUnavailable,
}
_BY_STATUS: dict[int, Callable[[str], TenureError]] = {
    400: InvalidArgument,
    401: AccessDenied,
    403: AccessDenied,
    404: JobNotFound,
    413: PayloadTooLarge,
    415: InvalidArgument,
    422: InvalidArgument,
    503: ServiceUnavailable,
}


@dataclass(frozen=True, slots=True)
class _Call:
    """One request: what to send, and whether sending it twice is harmless."""

    method: str
    path: str
    body: Any = None
    has_body: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    retry: bool = True
    wait: float = 0.0  # a long-poll: the read timeout grows by this much


def _path(job_id: str, *rest: str) -> str:
    return "/".join(["/v1/jobs", quote(str(job_id), safe=""), *(quote(r, safe="") for r in rest)])


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def job_from_json(data: dict[str, Any]) -> Job:
    """A `Job` from the API's JSON."""
    times = ("lease_until", "heartbeat_at", "run_after", "created_at", "updated_at")
    values: dict[str, Any] = {name: data.get(name) for name in Job.__dataclass_fields__}
    values.update({name: _time(data.get(name)) for name in times})
    values["state"] = JobState(data["state"])
    values["evidence"] = ()  # the job's answer leaves it out: `evidence(job_id)` reads it
    values["wait"] = WaitState.parse(data.get("wait"))
    values["token"] = data["fencing_token"]  # the wire's name for it
    return Job(**values)


def evidence_from_json(data: dict[str, Any]) -> Evidence:
    """An `Evidence` from the API's JSON."""
    at = _time(data["at"])
    assert at is not None
    return Evidence(
        seq=int(data["seq"]),
        ref=reference_from(str(data["type"]), data["ref"]),
        retriever=data.get("retriever"),
        token=int(data["token"]),
        attempt=int(data["attempt"]),
        at=at,
    )


def event_from_json(data: dict[str, Any]) -> Event:
    """An `Event` from the API's JSON."""
    at = _time(data["at"])
    assert at is not None
    return Event(
        seq=int(data["seq"]),
        job_id=data["job_id"],
        type=EventType(data["type"]),
        at=at,
        token=data.get("token"),
        owner_id=data.get("owner_id"),
        detail=data.get("detail") or {},
        version=data.get("version"),
        idempotency_key=data.get("idempotency_key"),
    )


def _read(response: httpx.Response) -> Any:
    """The answer's JSON, or the tenure exception its error stands for."""
    if response.is_success:
        return response.json()
    try:
        error = response.json()["error"]
        code, message = str(error.get("code")), str(error.get("message"))
    except (ValueError, KeyError, TypeError, AttributeError):
        code, message = "", response.text[:200]
    kind = _BY_CODE.get(code) or _BY_STATUS.get(response.status_code)
    text = f"{response.status_code} {code or 'error'}: {message}"
    if kind is None:
        raise TenureError(text)
    raise kind(text)


class _Calls:
    """The calls both clients make (see the module docstring)."""

    def __init__(self, url: str, api_key: str | None, timeout: float, retries: int) -> None:
        if timeout <= 0:
            raise InvalidArgument("the client's timeout must be a positive number of seconds")
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def submit(self, kind: str, payload: JSON, options: SubmitOptions) -> _Call:
        # The body carries every option left off its default, by its own name; the trace goes
        # in its header.
        fields = changed_options(options)
        fields.pop("traceparent", None)
        if "run_after" in fields:
            raise InvalidArgument(
                "the HTTP API takes no run_after: submit a delayed job through the ledger"
            )
        if "labels" in fields:
            fields["labels"] = dict(fields["labels"])
        body: dict[str, Any] = {"kind": kind, "payload": payload, **fields}
        # The caller's trace (given, or its current OpenTelemetry span): the job joins it.
        trace = options.traceparent or tracing.current_traceparent()
        headers = {"traceparent": trace} if trace else {}
        # Without a key a resent submit would be a second job: never retried.
        retry = options.idempotency_key is not None
        return _Call("POST", "/v1/jobs", body, True, headers=headers, retry=retry)

    def get(self, job_id: str, wait: float = 0.0) -> _Call:
        params = {"wait": round(wait, 3)} if wait > 0 else {}
        return _Call("GET", _path(job_id), params=params, wait=wait)

    def cancel(self, job_id: str) -> _Call:
        return _Call("POST", _path(job_id, "cancel"))

    def signal(self, job_id: str, name: str, payload: JSON) -> _Call:
        # Stored once per name: a resent signal is answered as the first.
        return _Call("POST", _path(job_id, "signals", name), payload, True)

    def evidence(self, job_id: str) -> _Call:
        return _Call("GET", _path(job_id, "evidence"))

    def events(self, job_id: str) -> _Call:
        return _Call("GET", _path(job_id, "events"))

    def request(self, client: httpx.Client | httpx.AsyncClient, call: _Call) -> httpx.Request:
        timeout = httpx.Timeout(self.timeout, read=self.timeout + call.wait)
        extra: dict[str, Any] = {"json": call.body} if call.has_body else {}
        return client.build_request(
            call.method,
            self.url + call.path,
            params=call.params,
            headers={**self.headers, **call.headers},
            timeout=timeout,
            **extra,
        )

    def unavailable(self, exc: httpx.TransportError) -> ServiceUnavailable:
        return ServiceUnavailable(
            f"tenure serve at {self.url} did not answer ({type(exc).__name__}: {exc}); "
            "is it running, and is the URL right?"
        )

    def attempts(self, call: _Call) -> int:
        return 1 + (self.retries if call.retry else 0)


def _result(job: Job, job_id: str, timeout: float) -> JSON:
    if not job.terminal:
        raise TimeoutError(f"job {job_id} is still {job.state.value} after {timeout:g}s")
    if job.state is not JobState.SUCCEEDED:
        raise JobFailed(job)
    return job.result


class Client:
    """`tenure serve` from synchronous code: `with tenure.Client(url, api_key) as client:`.

    `timeout` bounds each request (a long-poll adds its wait); `retries` is how many times a
    call that is safe to repeat is resent after a transport error. `clock` times `wait`'s
    deadline and the pauses between retries (a test may pass a `FakeClock`).
    """

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeout: float = 10.0,
        retries: int = 2,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._calls = _Calls(url, api_key, timeout, retries)
        self._http = httpx.Client()
        self._clock = clock

    def submit(
        self,
        kind: str,
        payload: JSON,
        options: SubmitOptions | None = None,
        **changes: Unpack[SubmitKwargs],
    ) -> str:
        """Submit a job; its id. A repeated key returns the key's job (same kind and payload).
        The options as for `Ledger.submit` (the trace: the current span's by default; the
        tenant: the API key's unless an admin key names one), except `run_after`, which the
        HTTP API does not take."""
        call = self._calls.submit(kind, payload, submit_options(options, changes))
        return str(self._send(call)["id"])

    def get(self, job_id: str) -> Job:
        """The job as stored now."""
        return job_from_json(self._send(self._calls.get(job_id)))

    def wait(self, job_id: str, timeout: float = 30.0) -> Job:
        """The job once it has ended, or as it is when `timeout` seconds have passed."""
        deadline = self._clock.monotonic() + max(0.0, timeout)
        while True:
            remaining = deadline - self._clock.monotonic()
            job = job_from_json(self._send(self._calls.get(job_id, min(remaining, _LONG_POLL))))
            if job.terminal or deadline - self._clock.monotonic() <= 0:
                return job

    def result(self, job_id: str, timeout: float = 30.0) -> JSON:
        """The job's result once it succeeded; `JobFailed` if it failed or was cancelled,
        `TimeoutError` if it has not ended within `timeout` seconds."""
        return _result(self.wait(job_id, timeout), job_id, timeout)

    def cancel(self, job_id: str) -> None:
        """Cancel the job (its token bumped); `TerminalJob` if it has ended."""
        self._send(self._calls.cancel(job_id))

    def signal(self, job_id: str, name: str, payload: JSON = None) -> bool:
        """Send a signal; True if stored now, False for a repeat (see `Ledger.signal`)."""
        return bool(self._send(self._calls.signal(job_id, name, payload))["stored"])

    def events(self, job_id: str) -> list[Event]:
        """The job's flight recorder, oldest first."""
        return [event_from_json(e) for e in self._send(self._calls.events(job_id))["events"]]

    def evidence(self, job_id: str) -> list[Evidence]:
        """The references the job recorded, in order."""
        answer = self._send(self._calls.evidence(job_id))
        return [evidence_from_json(e) for e in answer["evidence"]]

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _send(self, call: _Call) -> Any:
        attempts = self._calls.attempts(call)
        for attempt in range(attempts):
            try:
                return _read(self._http.send(self._calls.request(self._http, call)))
            except httpx.TransportError as exc:
                if attempt == attempts - 1:
                    raise self._calls.unavailable(exc) from exc
                self._clock.sleep(_RETRY_PAUSE * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover


class AsyncClient:
    """`tenure serve` from async code: `async with tenure.AsyncClient(url, api_key) as c:`.
    The same calls as `Client`, awaited; `aclose()` closes it. `clock` times `wait`'s deadline
    (the pauses between retries are the event loop's `asyncio.sleep`)."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeout: float = 10.0,
        retries: int = 2,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._calls = _Calls(url, api_key, timeout, retries)
        self._http = httpx.AsyncClient()
        self._clock = clock

    async def submit(
        self,
        kind: str,
        payload: JSON,
        options: SubmitOptions | None = None,
        **changes: Unpack[SubmitKwargs],
    ) -> str:
        """See `Client.submit`."""
        call = self._calls.submit(kind, payload, submit_options(options, changes))
        return str((await self._send(call))["id"])

    async def get(self, job_id: str) -> Job:
        """See `Client.get`."""
        return job_from_json(await self._send(self._calls.get(job_id)))

    async def wait(self, job_id: str, timeout: float = 30.0) -> Job:
        """See `Client.wait`."""
        deadline = self._clock.monotonic() + max(0.0, timeout)
        while True:
            remaining = deadline - self._clock.monotonic()
            answer = await self._send(self._calls.get(job_id, min(remaining, _LONG_POLL)))
            job = job_from_json(answer)
            if job.terminal or deadline - self._clock.monotonic() <= 0:
                return job

    async def result(self, job_id: str, timeout: float = 30.0) -> JSON:
        """See `Client.result`."""
        return _result(await self.wait(job_id, timeout), job_id, timeout)

    async def cancel(self, job_id: str) -> None:
        """See `Client.cancel`."""
        await self._send(self._calls.cancel(job_id))

    async def signal(self, job_id: str, name: str, payload: JSON = None) -> bool:
        """See `Client.signal`."""
        return bool((await self._send(self._calls.signal(job_id, name, payload)))["stored"])

    async def events(self, job_id: str) -> list[Event]:
        """See `Client.events`."""
        answer = await self._send(self._calls.events(job_id))
        return [event_from_json(e) for e in answer["events"]]

    async def evidence(self, job_id: str) -> list[Evidence]:
        """See `Client.evidence`."""
        answer = await self._send(self._calls.evidence(job_id))
        return [evidence_from_json(e) for e in answer["evidence"]]

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, call: _Call) -> Any:
        attempts = self._calls.attempts(call)
        for attempt in range(attempts):
            try:
                return _read(await self._http.send(self._calls.request(self._http, call)))
            except httpx.TransportError as exc:
                if attempt == attempts - 1:
                    raise self._calls.unavailable(exc) from exc
                await asyncio.sleep(_RETRY_PAUSE * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover
