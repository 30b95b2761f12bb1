"""OpenTelemetry traces (extra `tenure[otel]`): a job carries the trace it was submitted in, each
attempt is a span of that trace, each stage and effect a child span, and a receiver's fence
decision continues it from the effect's `traceparent` header.

Without `opentelemetry-api` installed nothing is imported (a `find_spec` is all this module
does) and every call is a no-op; with it installed but no tracer provider set, spans are not
started either. Attributes are ids, tokens, names, labels and outcomes, never payloads,
results or error messages.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

from tenure.errors import InvalidArgument

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

    from tenure.types import Lease

T = TypeVar("T")
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_SCOPE = "tenure"


def check_traceparent(value: object) -> str:
    """A W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), or `InvalidArgument`."""
    match = _TRACEPARENT.match(value) if isinstance(value, str) else None
    if match is None or match[1] == "ff" or set(match[2]) == {"0"} or set(match[3]) == {"0"}:
        raise InvalidArgument(
            f"traceparent must be a W3C trace context like 00-<32 hex>-<16 hex>-01, got {value!r}"
        )
    return str(value)


@functools.cache
def installed() -> bool:
    """True when `opentelemetry-api` can be imported (the `otel` extra)."""
    return importlib.util.find_spec("opentelemetry") is not None


def enabled() -> bool:
    """True when spans would go somewhere: the API is installed and a tracer provider is set."""
    if not installed():
        return False
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def current_traceparent() -> str | None:
    """The `traceparent` of the current span (None without one, or without the API)."""
    if not installed():
        return None
    from opentelemetry import trace

    return _format(trace.get_current_span().get_span_context())


def _format(context: Any) -> str | None:
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _parent(traceparent: str | None) -> Context | None:
    """A context whose span is the remote parent `traceparent` names (None: the current one)."""
    if traceparent is None:
        return None
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    _, trace_id, span_id, flags = _TRACEPARENT.match(traceparent).groups()  # type: ignore[union-attr]
    remote = SpanContext(int(trace_id, 16), int(span_id, 16), True, TraceFlags(int(flags, 16)))
    return trace.set_span_in_context(NonRecordingSpan(remote))


def _tracer() -> Any:
    from opentelemetry import trace

    from tenure._version import __version__

    return trace.get_tracer(_SCOPE, __version__)


def _fail(span: Span, exc: BaseException) -> None:
    """An error status that names the exception's type (its message may quote content)."""
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


class AttemptTrace:
    """The span of one attempt (`tenure.job`) and its stages; a no-op without a span."""

    def __init__(self, span: Span | None = None, token: int = 0) -> None:
        self.span = span
        self.token = token
        self._ended = False
        self._told: set[str] = set()

    def active(self) -> AbstractContextManager[None]:
        """The attempt's span is the current one on this thread for the block."""
        return nullcontext() if self.span is None else _activated(self.span)

    def bind(self, coroutine: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        """`coroutine` with the attempt's span current inside it (an async handler runs on the
        worker's event loop thread, which does not share the claiming thread's context)."""
        if self.span is None:
            return coroutine

        async def bound() -> T:
            with self.active():
                return await coroutine

        return bound()

    def event(self, name: str, token: int, **attributes: str | int | bool) -> None:
        """A span event (`lease_lost`, `ownership_unknown`, `result_rejected`, …) with the
        token; once per name and attempt (the renewer and a write may both find a lost lease)."""
        if self.span is None or name in self._told:
            return
        self._told.add(name)
        self.span.add_event(f"tenure.{name}", {"tenure.token": token, **attributes})

    @contextmanager
    def stage(
        self, kind: str, name: str, position: int, *, in_doubt: bool = False
    ) -> Iterator[None]:
        """A child span `tenure.step` or `tenure.effect`, current for the block."""
        if self.span is None:
            yield
            return
        from opentelemetry import trace

        attributes = _stage_attributes(kind, name, position, in_doubt, replayed=False)
        with _tracer().start_as_current_span(
            f"tenure.{kind}",
            context=trace.set_span_in_context(self.span),
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except BaseException as exc:
                from tenure.errors import StaleFence

                if isinstance(exc, StaleFence):
                    span.add_event("tenure.stale_fence", {"tenure.token": self.token})
                _fail(span, exc)
                raise

    def replayed(self, kind: str, name: str, position: int) -> None:
        """A stage recorded done by an earlier attempt: returned from the record, not run."""
        if self.span is None:
            return
        from opentelemetry import trace

        attributes = _stage_attributes(kind, name, position, False, replayed=True)
        context = trace.set_span_in_context(self.span)
        _tracer().start_span(f"tenure.{kind}", context=context, attributes=attributes).end()

    def end(self, outcome: str, *, failed: bool) -> None:
        """End the attempt's span with what became of it (succeeded, failed, retried, …), an
        error status when `failed`; the first call ends it (a run settled by its stage timeout
        ends before its handler)."""
        if self.span is None or self._ended:
            return
        self._ended = True
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("tenure.outcome", outcome)
        if failed:
            self.span.set_status(Status(StatusCode.ERROR, outcome))
        self.span.end()


@contextmanager
def _activated(span: Span) -> Iterator[None]:
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        context.detach(token)


NO_TRACE = AttemptTrace()


def start_attempt(lease: Lease, labels: Mapping[str, str]) -> AttemptTrace:
    """The span of the attempt `lease` grants, in the trace the job was submitted in."""
    if not enabled():
        return NO_TRACE
    from opentelemetry.trace import SpanKind

    attributes: dict[str, str | int] = {
        "tenure.job.id": lease.job_id,
        "tenure.job.kind": lease.kind,
        "tenure.tenant": lease.tenant,
        "tenure.token": lease.token,
        "tenure.attempt": lease.attempt,
        "tenure.owner": lease.owner_id,
    }
    if lease.variant is not None:
        attributes["tenure.variant"] = lease.variant
    attributes.update({f"tenure.label.{key}": value for key, value in labels.items()})
    span = _tracer().start_span(
        "tenure.job", context=_parent(lease.traceparent), kind=SpanKind.CONSUMER,
        attributes=attributes,
    )  # fmt: skip
    return AttemptTrace(span, lease.token)


def _stage_attributes(
    kind: str, name: str, position: int, in_doubt: bool, *, replayed: bool
) -> dict[str, str | int | bool]:
    return {
        "tenure.stage.kind": kind,
        "tenure.stage.name": name,
        "tenure.stage.position": position,
        "tenure.stage.in_doubt": in_doubt,
        "tenure.stage.replayed": replayed,
    }


class FenceSpan:
    """What a receiver's fence decision records on its span."""

    def __init__(self, span: Span | None) -> None:
        self.span = span

    def outcome(self, value: str) -> None:
        if self.span is not None:
            self.span.set_attribute("tenure.fence.outcome", value)

    def stale(self, token: int, highest: int) -> None:
        if self.span is not None:
            self.span.set_attribute("tenure.fence.outcome", "refused")
            self.span.add_event(
                "tenure.stale_fence", {"tenure.token": token, "tenure.fence.highest": highest}
            )


@contextmanager
def fence_span(scope: str, token: int, traceparent: str | None) -> Iterator[FenceSpan]:
    """The span of one fence decision (`tenure.fence`), a child of the effect that sent the
    command when its `traceparent` is given, else of the current span."""
    if not enabled():
        yield FenceSpan(None)
        return
    from opentelemetry.trace import SpanKind

    parent = None
    if traceparent is not None:
        try:
            parent = _parent(check_traceparent(traceparent))
        except InvalidArgument:
            parent = None  # a malformed header starts no trace of its own making
    with _tracer().start_as_current_span(
        "tenure.fence",
        context=parent,
        kind=SpanKind.SERVER if traceparent is not None else SpanKind.INTERNAL,
        attributes={"tenure.fence.scope": scope, "tenure.token": token},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield FenceSpan(span)
        except BaseException as exc:
            _fail(span, exc)
            raise


def effect_traceparent() -> str | None:
    """The `traceparent` an effect sends: its own span's (the current one inside `ctx.effect`)."""
    return current_traceparent() if enabled() else None
