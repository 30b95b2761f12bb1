"""The MCP server of an app's tools: `tools/call` submits a job (keyed by the client's
`_meta["io.tenure/idempotency-key"]`) and answers with its result, with progress as stages
finish; a client that declares the tasks extension gets the job as a task at once. Handlers run
in `tenure worker` processes; this server only submits, reads, signals and cancels."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    CallToolResult,
    EmptyResult,
    ListToolsResult,
    PaginatedRequestParams,
    RequestParams,
    SetLevelRequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

from tenure._version import __version__
from tenure.app import NEEDS, App
from tenure.errors import (
    IdempotencyConflict,
    InvalidArgument,
    JobNotFound,
    PrincipalNotAllowed,
    SignalConflict,
    TenureError,
    TerminalJob,
)
from tenure.integrations.jobcalls import UNCLAIMED_WARNING, unclaimed, unclaimed_message
from tenure.ledger import Ledger, Principal, await_end
from tenure.ledger.callers import readable, submit_as
from tenure.logs import emit
from tenure.mcp.backchannel import LogLevels, Progress, ask_caller
from tenure.mcp.first_round import FirstRound, first_round, names_first_round
from tenure.mcp.tasks import TASKS, input_requests, signal_payload, task_of
from tenure.mcp.tools import (
    OWN_TOOLS,
    JobTool,
    error_result,
    job_result,
    job_summary,
    job_tools,
    own_argument_errors,
    text_result,
)
from tenure.options import SubmitOptions
from tenure.principals import Binding
from tenure.types import JSON, Job
from tenure.validation import check_job_id, encode_json
from tenure.waits import awaited_signals, signals_received, wait_state

KEY_META = "io.tenure/idempotency-key"
log = logging.getLogger("tenure")
MAX_WARNED = 10_000
PRINCIPAL_META = "io.tenure/principal"
# The access token's claim that carries the principal a key is bound to.
PRINCIPAL_CLAIM = "io.tenure/principal"
# A call whose client asked for progress reads its job this often while it waits.
PROGRESS_READ_SECONDS = 1.0
# A synchronous call that may answer `input_required` reads its job while it waits (a job that
# starts to wait announces nothing): after 0.25 s, then twice as long each time, up to 2 s.
INPUT_READ_SECONDS = 0.25
INPUT_READ_MAX_SECONDS = 2.0
STATE_PREFIX = "tenure-job:"
# SEP-2243: a routing header that disagrees with the request body.
HEADER_MISMATCH = -32020
# The scope of the admin key's access token (every tenant): a scope, not a client id, so that no
# tenant's name can stand for it.
ADMIN_SCOPE = "tenure:admin"
T = TypeVar("T")
Context = ServerRequestContext[Any, Any]

INSTRUCTIONS = (
    "Each tool runs as a durable tenure job: it survives worker crashes and is fenced so that "
    "a stale worker cannot repeat its effects. Give _meta['io.tenure/idempotency-key'] to make "
    "a retried call find the same job, and _meta['io.tenure/principal'] to say whom it acts "
    "for. tenure_status, tenure_result, tenure_signal and "
    "tenure_cancel act on a job by the id a call reports."
)


class TaskParams(RequestParams):
    task_id: str


class UpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict)


class TenureMcp:
    """The low-level `mcp` server over one ledger. `tenant` is the caller over stdio; None
    (streamable HTTP) lets each request's bearer key decide."""

    def __init__(self, app: App, ledger: Ledger, *, tenant: str | None = "default") -> None:
        self.ledger = ledger
        self.tenant = tenant
        # Jobs whose unclaimed warning this process logged (tasks/get is polled).
        self.warned: set[str] = set()
        self.tools = job_tools(app)
        self.server: Server[Any] = Server(
            "tenure",
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.server.add_request_handler("tasks/get", TaskParams, self._tasks_get)
        self.server.add_request_handler("tasks/update", UpdateParams, self._tasks_update)
        self.server.add_request_handler("tasks/cancel", TaskParams, self._tasks_cancel)
        # Protocols before 2026-07-28: the job's progress as log messages at the client's
        # level (registering the handler declares the logging capability).
        self.log_levels = LogLevels()
        self.server.add_request_handler("logging/setLevel", SetLevelRequestParams, self._set_level)
        self.server.extensions[TASKS] = {}

    async def _set_level(self, ctx: Context, params: SetLevelRequestParams) -> Any:
        self.log_levels.set(_session_key(ctx), params.level)
        return EmptyResult()

    async def _list_tools(self, ctx: Context, params: PaginatedRequestParams | None) -> Any:
        listed = [tool.listing() for tool in self.tools.values()]
        return ListToolsResult(tools=[*listed, *OWN_TOOLS.values()])

    async def _call_tool(self, ctx: Context, params: CallToolRequestParams) -> Any:
        caller = _caller(ctx, self.tenant)
        arguments = params.arguments or {}
        if params.name in OWN_TOOLS:
            return await self._own_tool(ctx, caller, params.name, arguments)
        tool = self.tools.get(params.name)
        if tool is None:
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r}")
        _check_needs(ctx, tool)
        as_task = _declares_tasks(ctx) and tool.task_support != "forbidden"
        if tool.task_support == "required" and not as_task:
            raise _missing_tasks_capability()
        errors = tool.argument_errors(arguments)
        if errors:
            return error_result("invalid arguments, no job was made: " + "; ".join(errors))
        first = None
        if tool.asks_first and _asks_for_input(ctx) and names_first_round(params.request_state):
            responses = {k: _plain(v) for k, v in (params.input_responses or {}).items()}
            try:
                first = first_round(
                    tool, _capabilities(ctx), responses, params.request_state,
                    self.ledger.max_payload_bytes,
                )  # fmt: skip
            except InvalidArgument as exc:
                raise MCPError(INVALID_PARAMS, f"input response refused: {exc}") from None
            if first.questions:  # answered before any job is made
                return first.input_required()
        job = await self._call_job(caller, tool, params, arguments, first)
        if not isinstance(job, Job):
            return job
        if as_task:
            return task_of(job, result_type="task")
        return await self._sync_answer(ctx, tool, job, params)

    async def _call_job(
        self,
        caller: Principal,
        tool: JobTool,
        params: CallToolRequestParams,
        arguments: Any,
        first: FirstRound | None = None,
    ) -> Job | CallToolResult:
        """The call's job: the one its `requestState` names, or the one it submits or finds
        by its key (a tool error when no job can be made); after questions asked first, with
        their answers sent as its signals."""
        if params.request_state is not None and first is None:
            return await self._resumed(caller, tool, params.request_state, arguments)
        meta: dict[str, Any] = dict(params.meta or {})  # checked by the submit
        try:
            options = SubmitOptions(
                idempotency_key=meta.get(KEY_META, first.key if first else None),
                tenant=caller.submits_as,
                max_attempts=tool.max_attempts,
                principal=meta.get(PRINCIPAL_META),
            )
            job_id, _ = await _run(submit_as, self.ledger, caller, tool.kind, arguments, options)
        # A bad key, a payload too large, a principal the key is not bound to.
        except (IdempotencyConflict, InvalidArgument, PrincipalNotAllowed) as exc:
            return error_result(str(exc))
        for name, payload in (first.answers if first else {}).items():
            # Answered before (the first stands), or the job ended meanwhile.
            with contextlib.suppress(SignalConflict, TerminalJob):
                await _run(self.ledger.signal, job_id, name, payload)
        # The job is committed: a tasks/get for this id resolves from here on.
        return await _run(self.ledger.get, job_id)

    async def _sync_answer(
        self, ctx: Context, tool: JobTool, job: Job, params: CallToolRequestParams
    ) -> Any:
        """A call answered without a task: the job's result once it ends; on the 2026
        protocol, `input_required` as soon as it waits for a signal."""
        meta = params.meta or {}
        # The SDK hands `_meta` over with its own key names (progress_token); both spellings.
        wants_progress = any(meta.get(k) is not None for k in ("progress_token", "progressToken"))
        if not _asks_for_input(ctx):
            if _can_be_asked(ctx):
                ended = await self._asked_on_stream(ctx, job, progress=wants_progress)
            else:  # nothing to ask it: no statement while the job runs, unless for progress
                ended = await self._await(ctx, job.id, progress=wants_progress)
            return job_result(ended, as_content=tool.returns_content)
        # Responses answer the job's questions as it asks them, those given before it asked
        # included; a response to a question it never asks is ignored.
        responses = params.input_responses or {}
        answered: set[str] = set()
        while not job.terminal:
            answered |= await self._answer(job, responses)
            missing = await self._missing(job)
            if missing:  # a wait for several answered in part asks again for the rest
                return _input_required(job, _capabilities(ctx), missing)
            answered.update(awaited_signals(job))  # sent by this call or someone else
            job = await self._await(
                ctx, job.id, progress=wants_progress, until_input=_asks_besides(answered)
            )
        return job_result(job, as_content=tool.returns_content)

    async def _asked_on_stream(self, ctx: Context, job: Job, *, progress: bool) -> Job:
        """The job once ended, on a protocol before 2026-07-28: each question it asks goes to
        the caller as a request on this call's stream, and the answer is the job's signal
        (stored once: an answer from elsewhere first stands). A question the client cannot
        answer (no back channel, an undeclared capability, no or a malformed answer) is left
        to `tenure_signal` or a later call with the key; the call waits on."""
        put: set[str] = set()
        while True:
            job = await self._await(ctx, job.id, progress=progress, until_input=_asks_besides(put))
            pending = [signal for signal in awaited_signals(job) if signal not in put]
            if job.terminal or not pending:
                return job
            questions = input_requests(job, _capabilities(ctx))
            for signal in pending:  # several questions of one wait: one after another
                put.add(signal)
                await self._ask_on_stream(ctx, job, signal, questions.get(signal))

    async def _ask_on_stream(
        self, ctx: Context, job: Job, signal: str, question: dict[str, Any] | None
    ) -> None:
        """Put one question to the caller and send its answer as the job's signal; no
        question (an undeclared capability), no answer or a malformed one sends nothing."""
        answer = None
        if question is not None:
            answer = await ask_caller(ctx.session, ctx.request_id, question)
        if answer is None:
            return
        try:
            payload = signal_payload(job, signal, answer)
        except InvalidArgument:
            emit(log, logging.INFO, "question_unanswered", job_id=job.id, reason="malformed")
            return
        with contextlib.suppress(SignalConflict, TerminalJob):
            await _run(self.ledger.signal, job.id, signal, payload)

    async def _resumed(self, caller: Principal, tool: JobTool, state: str, arguments: Any) -> Job:
        """The job a retried call's `requestState` names. It grants nothing the caller's key
        does not: the job must be one the caller may see, of this tool, with these arguments
        (a state altered on the way names none of them: -32602)."""
        try:
            job = await self._visible(caller, _state_job(state))
        except (JobNotFound, InvalidArgument):
            job = None
        if job is None or job.kind != tool.kind or job.payload != arguments:
            raise MCPError(
                INVALID_PARAMS,
                "requestState names no job of this call: it was altered, or the "
                "arguments differ from the first round's",
            )
        return job

    async def _missing(self, job: Job) -> list[str]:
        """The signals the job waits for that are not stored yet (a job a signal woke says it
        waits until a worker takes it up again)."""
        awaited = awaited_signals(job)
        if not awaited:
            return []
        received = set(signals_received(await _run(self.ledger.events, job.id)))
        return [name for name in awaited if name not in received]

    async def _answer(self, job: Job, responses: dict[str, Any]) -> set[str]:
        """Send the signals the job waits for that the responses answer (by name), and return
        their names; other responses are ignored. Every answer is checked before any is sent:
        one malformed refuses them all."""
        payloads: dict[str, JSON] = {}
        try:
            for signal in awaited_signals(job):
                if signal in responses:
                    payloads[signal] = signal_payload(job, signal, _plain(responses[signal]))
                    encode_json(payloads[signal], "input response", self.ledger.max_payload_bytes)
            for signal, payload in payloads.items():
                # Answered already, differently: the first answer stands.
                with contextlib.suppress(SignalConflict):
                    await _run(self.ledger.signal, job.id, signal, payload)
        except InvalidArgument as exc:  # a malformed, too large or NUL-holding answer
            raise MCPError(INVALID_PARAMS, f"input response refused: {exc}") from None
        return set(payloads)

    async def _await(
        self,
        ctx: Context,
        job_id: str,
        timeout: float | None = None,
        *,
        progress: bool = False,
        until_input: Callable[[Job], bool] | None = None,
    ) -> Job:
        """The job once ended (or at `timeout`, or once `until_input(job)` says it waits for
        input): no statement while it waits, unless the caller asked for progress, which is
        read every PROGRESS_READ_SECONDS, or may be asked for input (a job that starts to wait
        wakes no one): read after INPUT_READ_SECONDS, then less often, up to every
        INPUT_READ_MAX_SECONDS (or PROGRESS_READ_SECONDS, if that is sooner). A job no worker
        has claimed after UNCLAIMED_WARNING seconds is said to be so, once: in the log, and to
        the caller as progress if it asked for progress."""
        logs = self.log_levels.allows(_session_key(ctx), "info")
        reporter = Progress(ctx.session, self.ledger, job_id, request_id=ctx.request_id, logs=logs)
        progress = progress or logs
        if timeout is not None and timeout <= UNCLAIMED_WARNING:
            return await self._await_for(reporter, timeout, progress, until_input)
        job = await self._await_for(reporter, UNCLAIMED_WARNING, progress, until_input)
        if job.terminal or (until_input is not None and until_input(job)):
            return job
        if unclaimed(job):
            message = unclaimed_message(job, UNCLAIMED_WARNING, self.ledger.operations.where)
            emit(log, logging.WARNING, "job_unclaimed", job_id=job.id, kind=job.kind)
            await ctx.session.report_progress(len(reporter.done), None, message)
        rest = None if timeout is None else timeout - UNCLAIMED_WARNING
        return await self._await_for(reporter, rest, progress, until_input)

    async def _await_for(
        self,
        reporter: Progress,
        timeout: float | None,
        progress: bool,
        until_input: Callable[[Job], bool] | None,
    ) -> Job:
        job_id = reporter.job_id

        async def read() -> Job:
            return await _run(self.ledger.get, job_id)

        first, most = (INPUT_READ_SECONDS, INPUT_READ_MAX_SECONDS) if until_input else (None, None)
        if progress:
            first = min(first or PROGRESS_READ_SECONDS, PROGRESS_READ_SECONDS)
            most = min(most or PROGRESS_READ_SECONDS, PROGRESS_READ_SECONDS)
        return await await_end(
            self.ledger,
            job_id,
            read,
            timeout,
            seen=reporter.seen,
            read_every=first,
            settled=until_input,
            read_every_max=most,
        )

    async def _own_tool(
        self, ctx: Context, caller: Principal, name: str, arguments: dict[str, Any]
    ) -> CallToolResult:
        errors = own_argument_errors(name, arguments)
        if errors:
            return error_result("invalid arguments: " + "; ".join(errors))
        try:
            job = await self._visible(caller, arguments["id"])
            if name == "tenure_status":
                return text_result(job_summary(job), job_id=job.id)
            if name == "tenure_result":
                wait = float(arguments.get("wait_seconds", 0))
                job = await self._await(ctx, job.id, wait) if wait > 0 else job
                ended = job_result(job, as_content=self._as_content(job))
                return ended if job.terminal else text_result(job_summary(job))
            if name == "tenure_signal":
                stored = await _run(
                    self.ledger.signal, job.id, arguments["name"], arguments.get("payload")
                )
                state = (await _run(self.ledger.get, job.id)).state.value
                return text_result({"id": job.id, "stored": stored, "state": state})
            await _run(self.ledger.cancel, job.id)
            return text_result({"id": job.id, "cancelled": True}, job_id=job.id)
        except TenureError as exc:
            return error_result(str(exc))

    def _as_content(self, job: Job) -> bool:
        """Whether the job's tool answers with its result as MCP content blocks."""
        tool = self.tools.get(job.kind)
        return tool is not None and tool.returns_content

    async def _visible(self, caller: Principal, job_id: Any) -> Job:
        """The job if the caller may read it; another tenant's job (another principal's, for a
        bound key) is as unknown as none."""
        job = readable(caller, await _run(self.ledger.get, job_id))
        if job is None:
            raise JobNotFound(f"no job has the id {job_id}")
        return job

    async def _task(self, ctx: Context, task_id: str) -> Job:
        if not _declares_tasks(ctx):
            raise _missing_tasks_capability()
        routed = _header(ctx, "mcp-name")
        if routed is not None and routed != task_id:
            # SEP-2243: the routing header names the task the body names, or a balancer may
            # have sent it to the wrong replica.
            raise MCPError(HEADER_MISMATCH, "the Mcp-Name header does not match params.taskId")
        try:
            return await self._visible(_caller(ctx, self.tenant), task_id)
        except JobNotFound:
            raise MCPError(INVALID_PARAMS, "Failed to retrieve task: Task not found") from None

    async def _tasks_get(self, ctx: Context, params: TaskParams) -> Any:
        job = await self._task(ctx, params.task_id)
        task = task_of(job, as_content=self._as_content(job))
        if unclaimed(job):
            waited = (
                await _run(self.ledger.now) - max(job.created_at, job.run_after)
            ).total_seconds()
            if waited >= UNCLAIMED_WARNING:
                task["statusMessage"] = unclaimed_message(job, waited, self.ledger.operations.where)
                if job.id not in self.warned:
                    if len(self.warned) >= MAX_WARNED:
                        self.warned.clear()
                    self.warned.add(job.id)
                    emit(log, logging.WARNING, "job_unclaimed", job_id=job.id, kind=job.kind)
        return task

    async def _tasks_update(self, ctx: Context, params: UpdateParams) -> Any:
        job = await self._task(ctx, params.task_id)
        # Keys that are not outstanding (answered, never asked) are ignored, as the SEP says.
        await self._answer(job, params.input_responses)
        return {}

    async def _tasks_cancel(self, ctx: Context, params: TaskParams) -> Any:
        job = await self._task(ctx, params.task_id)
        if not job.terminal:
            # It may end meanwhile: cancellation is cooperative, the ack stands.
            with contextlib.suppress(TerminalJob):
                await _run(self.ledger.cancel, job.id)
        return {}


def _check_needs(ctx: Context, tool: JobTool) -> None:
    """-32021 before any job for a tool whose `needs` the client did not declare (a client
    whose capabilities this request does not show, a stateless one of an earlier protocol, is
    given the benefit of the doubt: its job's question waits for `tenure_signal`)."""
    capabilities = _capabilities(ctx)
    if capabilities is None:
        return
    missing = [need for need in tool.needs if getattr(capabilities, need, None) is None]
    if missing:
        raise MCPError(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            f"Missing required client capability: {', '.join(missing)}",
            {"requiredCapabilities": {need: {} for need in missing}},
        )


def _missing_tasks_capability() -> MCPError:
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Missing required client capability",
        {"requiredCapabilities": {"extensions": {TASKS: {}}}},
    )


def _header(ctx: Context, name: str) -> str | None:
    """A header of the HTTP request that carried this message (None over stdio)."""
    headers = getattr(ctx.request, "headers", None) if ctx.request is not None else None
    value = headers.get(name) if headers is not None else None
    return str(value) if value is not None else None


def _session_key(ctx: Context) -> str | None:
    """The client's session: its `Mcp-Session-Id` over HTTP (None when stateless), the one
    connection over stdio."""
    if ctx.request is None:
        return LogLevels.STDIO
    return _header(ctx, "mcp-session-id")


def _plain(response: Any) -> Any:
    """An input response as JSON: the SDK parses a call's responses into its result models
    (`ElicitResult`, ...); a `tasks/update`'s come as sent."""
    if isinstance(response, BaseModel):
        return response.model_dump(by_alias=True, mode="json", exclude_none=True)
    return response


def _asks_besides(answered: set[str]) -> Callable[[Job], bool]:
    """Whether a job waits for input other than the signals this call sent (a job a signal
    woke says it waits until a worker takes it up again)."""

    def asks(job: Job) -> bool:
        return any(signal not in answered for signal in awaited_signals(job))

    return asks


def _input_required(job: Job, capabilities: Any, missing: list[str]) -> dict[str, Any]:
    """SEP-2322: the call's job waits for signals (`missing`: those not stored yet); the
    client answers their questions by calling again with `inputResponses` and this
    `requestState`: the job's id and the stage that waits (a new one each round). Without a
    question it can answer, the client polls with the state while someone else signals."""
    state = wait_state(job)
    stage = state.position if state is not None else 0
    asked = input_requests(job, capabilities)
    return {
        "resultType": "input_required",
        "inputRequests": {name: asked[name] for name in missing if name in asked},
        "requestState": f"{STATE_PREFIX}{job.id}:{stage}",
    }


def _state_job(state: str) -> str:
    """The job id a requestState names (the stage is only the round's mark)."""
    job_id, _, stage = state.removeprefix(STATE_PREFIX).partition(":")
    if not state.startswith(STATE_PREFIX) or not stage.lstrip("-").isdigit():
        raise InvalidArgument("not a tenure requestState")
    return check_job_id(job_id)


def _asks_for_input(ctx: Context) -> bool:
    """Whether a synchronous call may answer `input_required` (SEP-2322, the 2026 protocol);
    on earlier ones a call whose job waits for a signal holds until the signal comes."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _can_be_asked(ctx: Context) -> bool:
    """Whether a client of a protocol before 2026-07-28 can be asked on the call's stream: it
    holds a session (stdio, or HTTP with an `Mcp-Session-Id`) and declared a capability a
    question needs. Only then does a call read its job while it waits, to see a question."""
    capabilities = _capabilities(ctx)
    if _session_key(ctx) is None or capabilities is None:
        return False
    return any(getattr(capabilities, need, None) is not None for need in NEEDS)


def _capabilities(ctx: Context) -> Any:
    return ctx.session.client_capabilities


def _declares_tasks(ctx: Context) -> bool:
    """The tasks extension applies where the request declares it, on the 2026 protocol."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and TASKS in capabilities.extensions)


def _caller(ctx: Context, stdio_tenant: str | None) -> Principal:
    """Over stdio the tenant the server was started for; over HTTP the bearer key's tenant
    (the transport refused requests without a live key)."""
    if stdio_tenant is not None:
        return Principal(tenant=stdio_tenant)
    request = ctx.request
    user = getattr(request, "scope", {}).get("user") if request is not None else None
    token = getattr(user, "access_token", None)
    if token is None:
        raise MCPError(INVALID_PARAMS, "no API key came with this request")
    if ADMIN_SCOPE in token.scopes:
        return Principal(tenant=None)
    bound = (token.claims or {}).get(PRINCIPAL_CLAIM)
    return Principal(tenant=token.client_id, binding=None if bound is None else Binding(bound))


async def _run(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A ledger call on a worker thread (the ledger is blocking and thread-safe)."""
    return await anyio.to_thread.run_sync(lambda: function(*args, **kwargs))
