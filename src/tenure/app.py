"""The application: job classes registered with `@app.job`, and the database they use."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, Unpack

from tenure import labels as label_rules
from tenure.asking import Ask
from tenure.database_url import DEFAULT_URL, UrlSource, environment_url
from tenure.errors import InvalidArgument, InvalidJobClass
from tenure.ledger import Ledger, connect
from tenure.options import SubmitKwargs, SubmitOptions, submit_options
from tenure.rates import Rate, RateRule, rate_rule
from tenure.retrieval import DEFAULT_CACHE_TTL, Retriever, Search, new_retriever
from tenure.schedules import Every, Schedule, run_key
from tenure.tooltypes import ToolTypes, TypedValue, is_schema_type, tool_types
from tenure.types import JSON
from tenure.validation import DEFAULT_MAX_PAYLOAD_BYTES, MAX_NAME_LENGTH, encode_json
from tenure.waits import signal_questions

Handler = Callable[..., Any]
H = TypeVar("H", bound=Handler)
# check(ctx, checkpoint) -> None; raises tenure.ResumeRefused(code, message) to refuse.
ResumeCheck = Callable[[Any, dict[str, Any]], None]
Migration = Callable[[dict[str, Any]], dict[str, Any]]
M = TypeVar("M", bound=Migration)
A = TypeVar("A", bound=Callable[[Any, Any], Any])
Narrowing = Callable[[str | None, str, str], bool]
N = TypeVar("N", bound=Narrowing)

NO_TOOL_TYPES = ToolTypes(None, None, None, None, None)
TASK_SUPPORT = ("optional", "forbidden", "required")
# The client capabilities a tool may need (MCP's names for what a `tenure.Ask` asks).
NEEDS = ("elicitation", "sampling", "roots")


@dataclass(frozen=True, slots=True)
class JobClass:
    """How jobs of one kind run: lease arithmetic, retries and time limits.

    The lease comes from here, never from a payload: a model cannot choose its own lease.
    """

    kind: str
    handler: Handler
    lease: float = 90.0
    heartbeat: float = 30.0
    missed: int = 1
    jitter: float = 20.0
    max_attempts: int = 5
    backoff: float = 1.0
    backoff_cap: float = 300.0
    stage_timeout: float | None = 600.0
    max_lease_lifetime: float | None = 3600.0
    version: int = 1
    resume_checks: tuple[ResumeCheck, ...] = ()
    concurrency_limit: int | None = None
    spawns: tuple[str, ...] = ()
    tool: bool = False
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    labels: dict[str, str | None] | None = None
    # Its tool's types (`tenure.tooltypes`): the handler's payload type (it gets the validated
    # value), its result type (dumped to JSON) and the output schema of that result.
    payload_type: TypedValue | None = None
    result_type: TypedValue | None = None
    output_schema: dict[str, Any] | None = None
    # MCP tasks (SEP-2663): "optional" (a task for a client that declares the extension, else
    # the result), "forbidden" (always the result) or "required" (-32021 for other clients).
    task_support: str = "optional"
    # The handler returns MCP content blocks (text, image, audio, resource…), which are the
    # tool's answer as they are.
    returns_content: bool = False
    # The client capabilities its tool cannot work without ("elicitation", "sampling",
    # "roots"): a call from a client that did not declare one is refused before any job.
    needs: tuple[str, ...] = ()
    # Questions a client of the 2026-07-28 protocol is asked before the job is made (SEP-2322
    # rounds, then the job or its task); their answers are the job's first signals.
    asks_first: tuple[tuple[str, Ask], ...] = ()
    # When the workers running the kind fire it (`tenure.schedules`), if they do.
    schedule: Schedule | None = None
    # Its fleet-wide rate limit and how its jobs are keyed (`tenure.rates`), if it has one.
    rate: RateRule | None = None
    # When its run's budget is spent: "fail" (`budget_exhausted`) or "hold" (given back, held
    # until `ledger.operations.raise_budget`).
    on_budget: str = "fail"
    # True for an `async def` handler (asked at every run: found once).
    is_async: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.handler))

    @property
    def margin(self) -> float:
        """How much confirmed lease an effect needs before it may start (invariant 8)."""
        return self.heartbeat + self.jitter

    def handler_payload(self, payload: JSON) -> Any:
        """What the handler receives: the payload, or the validated value of its type."""
        return payload if self.payload_type is None else self.payload_type.validate(payload)

    def stored_result(self, result: Any) -> JSON:
        """What is stored of a handler's result: itself, or its typed value dumped to JSON."""
        return result if self.result_type is None else self.result_type.dump(result)

    def labels_of(self, submitted: dict[str, str] | None) -> dict[str, str]:
        """A job's labels: the class's fixed values and what its submit set."""
        return label_rules.merged(self.labels, submitted)


def _positive(kind: str, name: str, value: Any, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidJobClass(f"job class {kind!r}: {name} must be a number, got {value!r}")
    if value <= 0:
        raise InvalidJobClass(f"job class {kind!r}: {name} must be positive, got {value!r}")


def validate(job_class: JobClass) -> JobClass:
    """Reject unsafe lease arithmetic: lease > (missed + 1) x heartbeat + jitter."""
    c = job_class
    if not isinstance(c.kind, str) or not c.kind.strip():
        raise InvalidJobClass(f"a job class needs a non-empty kind, got {c.kind!r}")
    for name in ("lease", "heartbeat", "backoff", "backoff_cap"):
        _positive(c.kind, name, getattr(c, name))
    for name in ("stage_timeout", "max_lease_lifetime"):
        _positive(c.kind, name, getattr(c, name), allow_none=True)
    if isinstance(c.jitter, bool) or not isinstance(c.jitter, int | float) or c.jitter < 0:
        raise InvalidJobClass(f"job class {c.kind!r}: jitter must be >= 0, got {c.jitter!r}")
    for name, minimum in (("missed", 0), ("max_attempts", 1), ("version", 1)):
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InvalidJobClass(
                f"job class {c.kind!r}: {name} must be an integer >= {minimum}, got {value!r}"
            )
    needed = (c.missed + 1) * c.heartbeat + c.jitter
    if not c.lease > needed:
        raise InvalidJobClass(
            f"job class {c.kind!r}: lease {c.lease:g}s must exceed (missed + 1) x heartbeat + "
            f"jitter = ({c.missed} + 1) x {c.heartbeat:g}s + {c.jitter:g}s = {needed:g}s; "
            "lengthen the lease, beat more often or plan for fewer missed heartbeats"
        )
    if c.max_lease_lifetime is not None and c.max_lease_lifetime < c.lease:
        raise InvalidJobClass(
            f"job class {c.kind!r}: max_lease_lifetime {c.max_lease_lifetime:g}s is shorter "
            f"than one lease ({c.lease:g}s)"
        )
    if not callable(c.handler):
        raise InvalidJobClass(f"job class {c.kind!r}: the handler must be callable")
    _check_limits(c)
    if not all(isinstance(kind, str) and kind for kind in c.spawns):
        raise InvalidJobClass(f"job class {c.kind!r}: spawns must list job kinds (strings)")
    _check_tool(c)
    _check_labels(c)
    if not all(callable(check) for check in c.resume_checks):
        raise InvalidJobClass(f"job class {c.kind!r}: every resume check must be callable")
    return c


def _check_limits(c: JobClass) -> None:
    """A concurrency limit of at least one; what a spent budget does."""
    limit = c.concurrency_limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidJobClass(
            f"job class {c.kind!r}: concurrency_limit must be an integer >= 1, got {limit!r}"
        )
    if c.on_budget not in ("fail", "hold"):
        raise InvalidJobClass(
            f"job class {c.kind!r}: on_budget is 'fail' or 'hold', got {c.on_budget!r}"
        )


def _check_labels(c: JobClass) -> None:
    """Label keys a metric can carry, fixed values short and printable (`tenure.labels`)."""
    try:
        label_rules.check_declared(c.labels, f"job class {c.kind!r}")
    except InvalidArgument as exc:
        raise InvalidJobClass(str(exc)) from None


def _check_tool(c: JobClass) -> None:
    """A tool needs words for the model and an object schema for its arguments."""
    if c.task_support not in TASK_SUPPORT:
        raise InvalidJobClass(
            f"job class {c.kind!r}: task_support must be one of {', '.join(TASK_SUPPORT)}, "
            f"got {c.task_support!r}"
        )
    unknown = [need for need in c.needs if need not in NEEDS]
    if unknown or (c.needs and not c.tool):
        raise InvalidJobClass(
            f"job class {c.kind!r}: needs names the client capabilities a tool cannot work "
            f"without, of {', '.join(NEEDS)} (and only with tool=True), got {list(c.needs)!r}"
        )
    if c.asks_first and not c.tool:
        raise InvalidJobClass(f"job class {c.kind!r}: asks_first is for tools (tool=True)")
    if not c.tool:
        return
    if not isinstance(c.description, str) or not c.description.strip():
        raise InvalidJobClass(f"job class {c.kind!r}: a tool needs a description for the model")
    schema = c.input_schema
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise InvalidJobClass(
            f"job class {c.kind!r}: a tool needs input_schema, a JSON Schema of "
            '{"type": "object", ...} (its arguments are the job\'s payload)'
        )


def _schedule(
    kind: str,
    when: str | Every | None,
    timezone: str,
    missed_slots: str,
    max_catch_up: int,
    payload: JSON | Callable[[datetime], JSON],
    jitter: float,
) -> Schedule | None:
    """A class's schedule, checked where it is declared (`InvalidJobClass`)."""
    if when is None:
        if (timezone, missed_slots, max_catch_up, payload, jitter) != ("UTC", "skip", 10, None, 0):
            raise InvalidJobClass(
                f"job class {kind!r}: timezone, missed_slots, max_catch_up, schedule_payload "
                "and schedule_jitter apply only with schedule=..."
            )
        return None
    try:
        schedule = Schedule(when, timezone, missed_slots, max_catch_up, payload, jitter)
        if not callable(payload):
            encode_json(payload, "schedule_payload", DEFAULT_MAX_PAYLOAD_BYTES)
        longest = run_key(kind, datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=UTC))
        if len(longest) > MAX_NAME_LENGTH:
            most = MAX_NAME_LENGTH - len(longest) + len(kind)
            raise InvalidArgument(
                f"a scheduled kind's name may have at most {most} characters (the keys of "
                "its slots' jobs hold it)"
            )
    except InvalidArgument as exc:
        raise InvalidJobClass(f"job class {kind!r}: {exc}") from None
    return schedule


def _rate(kind: str, rate: Any, rate_key: Any, others: Any) -> RateRule | None:
    """A class's rate limit, checked where it is declared; a key it names with another class
    must come with the same rate (they share one row)."""
    try:
        rule = rate_rule(kind, rate, rate_key)
    except InvalidArgument as exc:
        raise InvalidJobClass(f"job class {kind!r}: {exc}") from None
    for other in others:
        theirs: RateRule | None = other.rate
        if rule is None or theirs is None or rule.key is None:
            continue
        if theirs.key == rule.key and theirs.rate != rule.rate:
            raise InvalidJobClass(
                f"job class {kind!r}: rate key {rule.key!r} is {other.kind!r}'s too, with "
                f"{theirs.rate}; kinds that share a key need the same rate"
            )
    return rule


class App:
    """Job classes and the database they run against.

    `App(url)` names the database (default `$TENURE_DATABASE_URL`, else `sqlite:///tenure.db`);
    `tenure worker --db` overrides it. Write `App()` so that the environment decides: every
    process of an app must use one database. `connect_options` go to `tenure.connect`.
    """

    def __init__(
        self, url: str | None = None, *, keep_error_messages: bool = True, **connect_options: Any
    ) -> None:
        from_environment = environment_url()
        self.url = url or from_environment or DEFAULT_URL
        # Where `url` came from: `tenure doctor` and the warning at a process's start say it.
        self.url_source = (
            UrlSource.APP
            if url
            else UrlSource.ENVIRONMENT
            if from_environment
            else UrlSource.DEFAULT
        )
        # A NonRetryable's message goes into the failed job's `error` (never a log or event).
        self.keep_error_messages = keep_error_messages
        self.connect_options = connect_options
        self.job_classes: dict[str, JobClass] = {}
        # kind -> from_version -> pure function checkpoint(vN) -> checkpoint(vN+1)
        self.checkpoint_migrations: dict[str, dict[int, Migration]] = {}
        # kind -> business assertions of (payload, result), run by `tenure eval`
        self.assertions: dict[str, list[Callable[[Any, Any], Any]]] = {}
        # name -> a search and its permission functions, used by `ctx.retrieve`
        self.retrievers: dict[str, Retriever] = {}
        # (parent principal, child principal, tenant) -> whether the child's is no wider
        self.narrowing: Narrowing | None = None
        self._ledger: Ledger | None = None

    def job(
        self,
        kind: str,
        *,
        lease: float = 90.0,
        heartbeat: float = 30.0,
        missed: int = 1,
        jitter: float = 20.0,
        max_attempts: int = 5,
        backoff: float = 1.0,
        backoff_cap: float = 300.0,
        stage_timeout: float | None = 600.0,
        max_lease_lifetime: float | None = 3600.0,
        version: int = 1,
        resume_checks: list[ResumeCheck] | tuple[ResumeCheck, ...] = (),
        concurrency_limit: int | None = None,
        spawns: list[str] | tuple[str, ...] = (),
        tool: bool = False,
        description: str | None = None,
        input_schema: dict[str, Any] | type | None = None,
        labels: Mapping[str, str | None] | None = None,
        task_support: str = "optional",
        returns_content: bool = False,
        needs: list[str] | tuple[str, ...] = (),
        asks_first: Mapping[str, Ask] | None = None,
        schedule: str | Every | None = None,
        timezone: str = "UTC",
        missed_slots: str = "skip",
        max_catch_up: int = 10,
        schedule_payload: JSON | Callable[[datetime], JSON] = None,
        schedule_jitter: float = 0.0,
        rate: Rate | None = None,
        rate_key: str | Callable[[Any], str] | None = None,
        on_budget: str = "fail",
    ) -> Callable[[H], H]:
        """Register the decorated function as the handler of `kind`.

        Raises `InvalidJobClass` at once unless lease > (missed + 1) x heartbeat + jitter.
        `version` is the checkpoint schema this handler writes and reads; `resume_checks` run
        before a job resumes from a checkpoint (see `checkpoint_migration`).
        `concurrency_limit`: at most that many jobs of this kind run at once, across workers.
        `spawns`: the kinds a handler may submit as child jobs (`ctx.spawn`); any other kind
        fails the job. The model plans; this list decides.
        `tool=True` makes the kind an MCP tool of `tenure mcp`, described by `description` (by
        default the handler's docstring), its arguments (the payload) checked against
        `input_schema` before a job is made: a JSON Schema, or a Pydantic model, TypedDict or
        dataclass (the handler gets the validated value when its payload parameter is
        annotated with that type, which alone also serves as the schema); a return annotation
        of such a type is the tool's output schema. `task_support` ("optional", "forbidden",
        "required") says when `tenure mcp` answers a call with a task (SEP-2663);
        `returns_content=True`: the handler returns a list of MCP content blocks (`{"type":
        "image", "data": …, "mimeType": …}`, text, audio, resources), the tool's answer as is.
        `needs` names the client capabilities the tool cannot work without ("elicitation",
        "sampling", "roots": what its `tenure.Ask`s ask): a call from a client that did not
        declare one is refused with -32021 before any job is made.
        `asks_first` ({signal name: `tenure.Ask`}) are questions a client of the 2026-07-28
        protocol answers before the job is made (an `input_required` round without a task, then
        the job, or its task, with the answers as its first signals); the handler waits for
        them as for any signal (`ctx.wait_for_all(...)`), which is how other clients are asked.
        `schedule` fires the kind by itself: a cron expression (in `timezone`, an IANA name;
        needs the `cron` extra) or `tenure.Every(seconds)`. Every worker running the kind
        submits each slot's job under the key `schedule:{kind}:{slot in UTC}`, so one job
        exists per slot whatever the number of workers; its payload is `schedule_payload` (a
        value, or a function of the slot's time). Slots a scheduler reaches more than a minute
        late (the workers were down, the schedule paused) follow `missed_slots`: "skip" (none
        runs), "once" (the latest runs) or "all" (the latest `max_catch_up` run).
        `schedule_jitter` (seconds, at most the period) delays each slot's job by its own share
        of it, the same on every worker, so that a fleet's schedules do not all start at once.
        `rate=tenure.Rate(count, per=seconds)` paces the claims of the key at that rate
        across every worker of the database, enforced in the claim (at most `count + burst`
        in any one period; see `tenure.Rate`); `rate_key`
        names the key (default the kind; kinds naming one key share it), or is a function of
        the payload that returns it (one key per provider account, say). A handler that meets
        its provider's limit raises `tenure.RateLimited(retry_after=s)`: the key is held for
        that long and the job comes back then without spending an attempt.
        `on_budget`: when its run's budget (`submit(budget=)`) is spent, "fail" ends the job
        `failed` (`budget_exhausted`); "hold" gives it back without spending an attempt, held
        until `ledger.operations.raise_budget(job_id, usd=...)` raises the budget (a job
        whose run has no budget to raise fails all the same).
        `labels` break its metrics and spans down (`{"tool": "browser", "model": None}`): a
        value is fixed for the class, None leaves the key to each submit (`submit(labels=)`).
        """

        def register(handler: H) -> H:
            if kind in self.job_classes:
                raise InvalidJobClass(f"job class {kind!r} is registered twice")
            if asks_first is not None and isinstance(asks_first, Mapping) and not asks_first:
                raise InvalidJobClass(f"job class {kind!r}: asks_first needs a question")
            try:
                first = signal_questions(asks_first) if asks_first is not None else ((), {})
            except InvalidArgument as exc:
                raise InvalidJobClass(f"job class {kind!r}: asks_first: {exc}") from None
            if len(first[1]) != len(first[0]):
                raise InvalidJobClass(f"job class {kind!r}: every asks_first needs a tenure.Ask")
            when = _schedule(
                kind, schedule, timezone, missed_slots, max_catch_up, schedule_payload,
                schedule_jitter,
            )  # fmt: skip
            rule = _rate(kind, rate, rate_key, self.job_classes.values())
            if not (input_schema is None or isinstance(input_schema, dict)) and not (
                is_schema_type(input_schema)
            ):
                raise InvalidJobClass(
                    f"job class {kind!r}: input_schema must be a JSON Schema dictionary, or a "
                    f"Pydantic model, TypedDict or dataclass; got {input_schema!r}"
                )
            typed = NO_TOOL_TYPES
            if callable(handler) and (tool or is_schema_type(input_schema)):
                typed = tool_types(kind, handler, input_schema, description, tool=tool)
            schema = typed.input_schema if typed is not NO_TOOL_TYPES else input_schema
            self.job_classes[kind] = validate(
                JobClass(
                    kind=kind,
                    handler=handler,
                    lease=lease,
                    heartbeat=heartbeat,
                    missed=missed,
                    jitter=jitter,
                    max_attempts=max_attempts,
                    backoff=backoff,
                    backoff_cap=backoff_cap,
                    stage_timeout=stage_timeout,
                    max_lease_lifetime=max_lease_lifetime,
                    version=version,
                    resume_checks=tuple(resume_checks),
                    concurrency_limit=concurrency_limit,
                    spawns=tuple(spawns) if not isinstance(spawns, str) else (spawns,),
                    tool=tool,
                    description=description if typed is NO_TOOL_TYPES else typed.description,
                    input_schema=schema if isinstance(schema, dict) else None,
                    labels=None if labels is None else dict(labels),
                    payload_type=typed.payload,
                    result_type=typed.result,
                    output_schema=typed.output_schema,
                    task_support=task_support,
                    returns_content=returns_content,
                    needs=(needs,) if isinstance(needs, str) else tuple(needs),
                    asks_first=tuple(first[1].items()),
                    schedule=when,
                    rate=rule,
                    on_budget=on_budget,
                )
            )
            if self._ledger is not None:  # opened before this class
                if labels is not None:
                    self._ledger.operations.declare_labels({kind: dict(labels)})
                self._ledger.operations.declare_versions({kind: version})
            return handler

        return register

    def assertion(self, kind: str) -> Callable[[A], A]:
        """Register a business assertion of `kind`: `check(payload, result)` passes by
        returning True or None, fails by returning False or raising (the message of an
        `AssertionError` is the reason). `tenure eval` judges a recording and its replay with
        them; the result is None for a job that did not succeed."""
        if not isinstance(kind, str) or not kind:
            raise InvalidJobClass(f"an assertion needs the kind it judges, got {kind!r}")

        def register(check: A) -> A:
            if not callable(check):
                raise InvalidJobClass(f"assertion for {kind!r}: {check!r} is not callable")
            self.assertions.setdefault(kind, []).append(check)
            return check

        return register

    def checkpoint_migration(self, kind: str, *, from_version: int) -> Callable[[M], M]:
        """Register a pure function turning a `kind` checkpoint of `from_version` into one of
        `from_version + 1`. A job resuming from an older checkpoint gets them applied in
        order; the original is kept beside the result."""
        if isinstance(from_version, bool) or not isinstance(from_version, int) or from_version < 1:
            raise InvalidJobClass(
                f"checkpoint migration of {kind!r}: from_version must be an integer >= 1, "
                f"got {from_version!r}"
            )

        def register(migration: M) -> M:
            if not callable(migration):
                raise InvalidJobClass(f"checkpoint migration of {kind!r} must be callable")
            versions = self.checkpoint_migrations.setdefault(kind, {})
            if from_version in versions:
                raise InvalidJobClass(
                    f"checkpoint migration of {kind!r} from version {from_version} is "
                    "registered twice"
                )
            versions[from_version] = migration
            return migration

        return register

    def retriever(
        self,
        name: str,
        *,
        index_version: Callable[[], Any],
        cache_ttl: float = DEFAULT_CACHE_TTL,
    ) -> Callable[[Search], Retriever]:
        """Register a search function `fn(query, *, allowed, limit) -> list[DocumentRef]` as
        the retriever `name`; `index_version()` names the index it searches. The decorator
        returns a `Retriever`: give it `@r.permissions` and `@r.recheck` (and optionally
        `@r.current_version`). `cache_ttl` seconds bound a cached result's life (0: no cache)."""

        def register(search: Search) -> Retriever:
            found = new_retriever(name, search, index_version, cache_ttl)
            if name in self.retrievers:
                raise InvalidJobClass(f"retriever {name!r} is already registered")
            self.retrievers[name] = found
            return found

        return register

    def narrows(self, fn: N) -> N:
        """Register `fn(parent_principal, child_principal, tenant) -> bool`: whether a child
        may act for `child_principal` when its parent acts for `parent_principal` (True only
        for the same or a narrower one). Without it a child acts for its parent's principal
        and naming another fails the parent."""
        if not callable(fn):
            raise InvalidJobClass(f"narrows needs a function, got {fn!r}")
        self.narrowing = fn
        return fn

    def connect(self, url: str | None = None, **overrides: Any) -> Ledger:
        """A new ledger on the app's database (or `url`); the caller closes it. `overrides`
        replace the app's connect options for this ledger. The classes' label declarations
        are written there, so that any process's submit is checked against them."""
        ledger = connect(url or self.url, **{**self.connect_options, **overrides})
        declared = {k: c.labels for k, c in self.job_classes.items() if c.labels is not None}
        try:
            if declared:
                ledger.operations.declare_labels(declared)
            if self.job_classes:
                ledger.operations.declare_versions(
                    {k: c.version for k, c in self.job_classes.items()}
                )
        except BaseException:
            ledger.close()
            raise
        return ledger

    @property
    def ledger(self) -> Ledger:
        """A ledger shared by `submit` and friends in this process, opened on first use."""
        if self._ledger is None:
            self._ledger = self.connect()
        return self._ledger

    def submit(
        self,
        kind: str,
        payload: JSON,
        options: SubmitOptions | None = None,
        **changes: Unpack[SubmitKwargs],
    ) -> str:
        """Submit a job of a registered kind, with the class's max_attempts unless given.

        A kind the app has no class for is refused (`InvalidArgument`): it is most likely a
        typo, and no worker of this app would run it. Submit it with `app.ledger.submit`.
        """
        job_class = self.job_classes.get(kind)
        if job_class is None:
            known = ", ".join(sorted(self.job_classes)) or "none"
            raise InvalidArgument(
                f"the app has no job class {kind!r} (its kinds: {known}); register it with "
                "@app.job, or submit it with app.ledger.submit"
            )
        chosen = submit_options(options, changes)
        if chosen.max_attempts is None:
            chosen = chosen.merged({"max_attempts": job_class.max_attempts})
        return self.ledger.submit(kind, payload, chosen)

    def close(self) -> None:
        """Close the shared ledger, if it was opened."""
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None
