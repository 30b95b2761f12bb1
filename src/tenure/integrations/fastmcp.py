"""FastMCP tools that are tenure jobs (extra `tenure[fastmcp]`, FastMCP 4.x).

`@durable(app)` under FastMCP's own `@mcp.tool` turns a tool function into two things from one
definition, so that the FastMCP server and `tenure worker server:app` import the same module:

- a job class of `app` (kind: the function's name) whose handler is the function: it runs in a
  `tenure worker`, its first parameter the job's `tenure.JobContext` (steps, fenced effects,
  cancellation), its other parameters the tool's arguments, given back from the job's payload
  with the types the function declares;
- the function FastMCP registers, with the same parameters but the first, so FastMCP's own
  parsing makes the schema and its own validation refuses bad arguments before any job is
  made. Its body submits the arguments as the job's payload and awaits the job's end.

The call is keyed by the client's `_meta["io.tenure/idempotency-key"]`, as `tenure mcp`'s
tools are: a retry after a lost answer, a dropped connection or a restarted server finds the
same job (the same answer, one effect). Without a key each call is a new job. A client's
`notifications/cancelled` for the call cancels the job (its token bumped: a fenced receiver
refuses its late effect); anything else that ends the call on the server's side (a shutdown, a
dropped connection, FastMCP's own tool timeout) leaves the job to finish, for a retry to find.

FastMCP's decorator, its parsing and validation of a function tool, and its request context
(`get_context()`, the request's `_meta`, `report_progress`) are the public surface this uses.
The one reach below it: telling a client's cancellation from the server's own reads the MCP
SDK's per-request `cancel_requested`, which FastMCP exposes on no public path (through
`FastMCPRequestContext._srctx`, its documented escape hatch, and the session's request
channel); the extra pins FastMCP below 5, and a path that moved reads as "not cancelled".
"""

from __future__ import annotations

from tenure.extras import needs

needs("fastmcp", "fastmcp", "jsonschema", what="tenure.integrations.fastmcp")

import asyncio
import contextlib
import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import pydantic_core
from fastmcp import Context
from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import get_context
from pydantic import TypeAdapter, ValidationError

from tenure.app import App
from tenure.errors import (
    IdempotencyConflict,
    InvalidArgument,
    InvalidJobClass,
    JobFailed,
    NonRetryable,
    TerminalJob,
)
from tenure.integrations.jobcalls import JobCalls, ended_message, outcome
from tenure.types import JSON

__all__ = ["KEY_META", "Tenant", "durable"]

# The same `_meta` key as `tenure mcp`'s (tenure.mcp.KEY_META), so a client keys both alike.
KEY_META = "io.tenure/idempotency-key"
# The tenant a call's job is submitted as: a name, or a function of the FastMCP request.
Tenant = str | Callable[[Context], str]
ToolFunction = Callable[..., Any]


def durable(
    app: App,
    *,
    kind: str | None = None,
    timeout: float | None = None,
    tenant: Tenant = "default",
    cancel_with_client: bool = True,
    **job_class: Any,
) -> Callable[[ToolFunction], Callable[..., Awaitable[Any]]]:
    """Make a FastMCP tool function a tenure job of `app`; put it under `@mcp.tool`.

    The function's first parameter gets the job's `tenure.JobContext` (it runs in a worker,
    where no MCP request is: FastMCP's `Context` cannot be asked for); the others are the
    tool's arguments. `kind` names the job class (default: the function's name); `job_class`
    are `@app.job`'s keywords (`lease`, `max_attempts`, `stage_timeout`…). `timeout`: how long
    a call waits for its job (None: as long as it takes; past it the call is a tool error and
    the job goes on). `tenant`: whose job it is, a name or a function of the FastMCP `Context`
    (the access token's client, say), so that clients' keys never meet. `cancel_with_client`:
    a client's `notifications/cancelled` cancels the job (False: the job runs on, for a retry
    with the key to find).
    """
    if not isinstance(cancel_with_client, bool):
        raise InvalidArgument(
            f"cancel_with_client must be True or False, got {cancel_with_client!r}"
        )
    if not (isinstance(tenant, str) or callable(tenant)):
        raise InvalidArgument(f"tenant must be a name or a function of the Context, got {tenant!r}")
    if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
        raise InvalidArgument(f"timeout must be seconds > 0 or None, got {timeout!r}")

    def decorate(fn: ToolFunction) -> Callable[..., Awaitable[Any]]:
        shape = ToolShape.of(fn)
        name = kind if kind is not None else fn.__name__
        app.job(name, **job_class)(job_handler(shape))
        calls = DurableCalls(app, name, shape, timeout, tenant, cancel_with_client)
        return shape.mcp_function(calls.call)

    return decorate


@dataclass(frozen=True, slots=True)
class ToolShape:
    """A tool function read once: its arguments (every parameter but the first, each with
    the adapter that writes its value as JSON and reads it back) and its result's type."""

    fn: ToolFunction
    signature: inspect.Signature
    arguments: TypeAdapter[Any]
    dumpers: Mapping[str, TypeAdapter[Any]]
    result: TypeAdapter[Any] | None

    @classmethod
    def of(cls, fn: ToolFunction) -> ToolShape:
        """Read `fn`; `InvalidJobClass` for what a durable tool cannot be."""
        where = f"durable tool {getattr(fn, '__name__', fn)!r}"
        if not inspect.isfunction(fn):
            raise InvalidJobClass(f"{where}: give the function itself, got {fn!r}")
        if hasattr(fn, "__fastmcp__"):
            raise InvalidJobClass(
                f"{where}: FastMCP registered it already; put @durable(app) under @mcp.tool"
            )
        hints = _hints(fn, where)
        parameters = [
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in inspect.signature(fn).parameters.values()
        ]
        _check_first(parameters, where)
        arguments = parameters[1:]
        returned = hints.get("return", inspect.Signature.empty)
        empty = inspect.Parameter.empty
        return cls(
            fn=fn,
            signature=inspect.Signature(arguments, return_annotation=returned),
            arguments=TypeAdapter(typing.cast(Any, _collector(arguments))),
            dumpers={p.name: TypeAdapter(Any if p.annotation is empty else p.annotation)
                     for p in arguments},
            result=None if returned is inspect.Signature.empty else TypeAdapter(returned),
        )  # fmt: skip

    def payload(self, arguments: Mapping[str, Any]) -> dict[str, JSON]:
        """The validated arguments, defaults filled in, as JSON: the job's payload (so that a
        call that spells a default and one that leaves it out are the same job)."""
        bound = self.signature.bind(**arguments)
        bound.apply_defaults()
        return {
            name: self.dumpers[name].dump_python(value, mode="json")
            for name, value in bound.arguments.items()
        }

    def handler_arguments(self, payload: JSON) -> dict[str, Any]:
        """The payload as the function's typed arguments; `NonRetryable` (`invalid_payload`)
        naming the fields, not their values, when it does not fit (a job submitted by other
        means, or a function changed since the job was made)."""
        try:
            found: dict[str, Any] = self.arguments.validate_python(payload)
        except ValidationError as exc:
            problems = [
                f"{'/'.join(map(str, e['loc'])) or '(payload)'}: {e['msg']}"
                for e in exc.errors(include_input=False, include_url=False)
            ]
            raise NonRetryable(
                f"the payload does not fit the tool's arguments: {'; '.join(problems)}",
                code="invalid_payload",
            ) from None
        return found

    def stored(self, value: Any) -> JSON:
        """What the job keeps of the function's result: JSON, by its declared type."""
        if self.result is None:
            return pydantic_core.to_jsonable_python(value)
        return self.result.dump_python(value, mode="json")

    def answer(self, result: JSON) -> Any:
        """The job's result as the function's declared type, for FastMCP to send as it would
        send the function's own return value."""
        if self.result is None:
            return result
        try:
            return self.result.validate_python(result)
        except ValidationError:
            raise ToolError(
                f"the job's result does not fit {self.fn.__name__}'s return type (a job made "
                "by an older version of the tool?)"
            ) from None

    def mcp_function(
        self, call: Callable[[dict[str, Any]], Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        """The function FastMCP registers: the tool's parameters but the first, its name and
        docstring (FastMCP's description), and a body that calls `call(arguments)`."""

        async def tool(**arguments: Any) -> Any:
            return await call(arguments)

        tool.__signature__ = self.signature  # type: ignore[attr-defined]
        tool.__annotations__ = {
            **{p.name: p.annotation for p in self.signature.parameters.values()
               if p.annotation is not inspect.Parameter.empty},
            **({} if self.result is None else {"return": self.signature.return_annotation}),
        }  # fmt: skip
        for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(tool, attribute, getattr(self.fn, attribute))
        return tool


def job_handler(shape: ToolShape) -> ToolFunction:
    """The job class's handler: the tool function with the job's context and the payload's
    arguments (an `async def` tool gets an async handler: the worker awaits it)."""
    fn = shape.fn
    if inspect.iscoroutinefunction(fn):

        async def run_async(ctx: Any, payload: JSON) -> JSON:
            return shape.stored(await fn(ctx, **shape.handler_arguments(payload)))

        handler: ToolFunction = run_async
    else:

        def run(ctx: Any, payload: JSON) -> JSON:
            return shape.stored(fn(ctx, **shape.handler_arguments(payload)))

        handler = run
    handler.__name__, handler.__doc__ = fn.__name__, fn.__doc__
    return handler


class DurableCalls:
    """A FastMCP tool's calls as jobs of one kind: submit under the client's key, await the
    end, cancel the job when the client cancels the call."""

    def __init__(
        self,
        app: App,
        kind: str,
        shape: ToolShape,
        timeout: float | None,
        tenant: Tenant,
        cancel_with_client: bool,
    ) -> None:
        self.app, self.kind, self.shape = app, kind, shape
        self.timeout, self.tenant, self.cancel_with_client = timeout, tenant, cancel_with_client

    async def call(self, arguments: dict[str, Any]) -> Any:
        """One call: its job's result, or a `ToolError` saying why there is none."""
        request = _request()
        try:
            tenant = self._tenant(request)
            calls = JobCalls(self.app, self.kind, timeout=self.timeout, tenant=tenant)
        except InvalidArgument as exc:  # a tenant function's answer that names no tenant
            raise ToolError(f"no job was made: {exc}") from None
        payload = self.shape.payload(arguments)
        with anyio.CancelScope(shield=True):  # a job made is one this call can cancel
            job_id = await self._submit(calls, payload, request)
        try:
            if request is not None:
                # The id at once, when the client asked for progress: it can cancel the job or
                # read it (`tenure cancel ID`, `tenure status ID`) whatever befalls this call.
                await request.report_progress(0, None, f"tenure job {job_id}")
            job = await calls.await_end(job_id)
        except TimeoutError as late:
            raise ToolError(str(late)) from None
        except anyio.get_cancelled_exc_class():
            if self.cancel_with_client and _client_cancelled(request):
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._cancel, job_id)
            raise
        try:
            return self.shape.answer(outcome(job))
        except JobFailed as failed:
            raise ToolError(ended_message(failed.job)) from None

    async def _submit(self, calls: JobCalls, payload: JSON, request: Context | None) -> str:
        """The call's job: the one the client's key names (made now or by a former call), or
        a new one when the client gave no key. The app's submit: the job class's attempts."""
        key = _meta(request).get(KEY_META)
        try:
            return await asyncio.to_thread(
                self.app.submit, self.kind, payload, idempotency_key=key, tenant=calls.tenant
            )
        except (InvalidArgument, IdempotencyConflict) as exc:
            # A bad key, a payload a job cannot hold (a NUL, nested too deep, too large), or
            # a key used before with other arguments.
            raise ToolError(f"no job was made: {exc}") from None

    def _tenant(self, request: Context | None) -> str:
        if isinstance(self.tenant, str):
            return self.tenant
        if request is None:
            raise ToolError("no MCP request to take the tenant from: no job was made")
        return self.tenant(request)

    def _cancel(self, job_id: str) -> None:
        with contextlib.suppress(TerminalJob):  # it ended meanwhile: nothing to cancel
            self.app.ledger.cancel(job_id)


def _request() -> Context | None:
    """The FastMCP context of the call (None when the function is called outside a server)."""
    try:
        return get_context()
    except RuntimeError:
        return None


def _meta(request: Context | None) -> Mapping[str, Any]:
    """The call's `_meta`, as the client sent it."""
    context = request.request_context if request is not None else None
    meta = context.meta if context is not None else None
    return meta if isinstance(meta, Mapping) else {}


def _client_cancelled(request: Context | None) -> bool:
    """Whether the client sent `notifications/cancelled` for this call. The MCP SDK sets its
    request channel's `cancel_requested` then, before it interrupts the call, and only then:
    not for a shutdown, a dropped connection or a 2026-07-28 client closing its stream. FastMCP
    has no public path to it; one that moved reads as "not cancelled" (the job goes on)."""
    context = request.request_context if request is not None else None
    if context is None:
        return False
    channel = getattr(context._srctx.session, "_request_outbound", None)
    cancelled = getattr(channel, "cancel_requested", None)
    return isinstance(cancelled, anyio.Event) and cancelled.is_set()


def _hints(fn: ToolFunction, where: str) -> dict[str, Any]:
    """The function's resolved annotations (FastMCP resolves them too, at registration)."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError) as exc:
        raise InvalidJobClass(f"{where}: its annotations cannot be resolved ({exc})") from None


def _check_first(parameters: list[inspect.Parameter], where: str) -> None:
    """The first parameter takes the job's context; the others are named arguments."""
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise InvalidJobClass(
            f"{where}: its first parameter must take the job's context (ctx: tenure.JobContext)"
        )
    first = parameters[0].annotation
    if isinstance(first, type) and issubclass(first, Context):
        raise InvalidJobClass(
            f"{where}: a durable tool runs in a tenure worker, where no MCP request is; its "
            "first parameter is the job's context (ctx: tenure.JobContext), not FastMCP's"
        )
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD and
           p.kind is not inspect.Parameter.KEYWORD_ONLY for p in parameters[1:]):  # fmt: skip
        raise InvalidJobClass(f"{where}: a tool's arguments are named (no *args, **kwargs, /)")


def _collector(parameters: list[inspect.Parameter]) -> Callable[..., dict[str, Any]]:
    """A function of the tool's arguments that returns them: a `TypeAdapter` of it validates
    a payload into the function's typed arguments, defaults included, as FastMCP does."""

    def collect(**arguments: Any) -> dict[str, Any]:
        return arguments

    collect.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    collect.__annotations__ = {
        p.name: p.annotation for p in parameters if p.annotation is not inspect.Parameter.empty
    }
    return collect
