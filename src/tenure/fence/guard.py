"""FenceGuard: the receiver side of fencing. A command runs once per idempotency key, and a new
command from a stale owner (a fence below the highest accepted for its scope) is refused."""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from tenure import tracing
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import FenceConflict, InvalidArgument, JobNotFound, StaleFence, renamed
from tenure.storage import FENCES, FenceStatus, FenceStore, open_store
from tenure.types import JSON, Job
from tenure.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_int, check_name, encode_json

# A key left running by a receiver that died is taken over after this long.
DEFAULT_STALE_AFTER = 300.0


class Action(enum.StrEnum):
    """What a receiver does with one command."""

    RUN = "run"
    REPLAY = "replay"
    WAIT = "wait"
    STALE = "stale"  # a token below the highest accepted
    CONFLICT = "conflict"  # the highest accepted token, sent by another claim


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one command: run it, replay a stored result, wait, or refuse it."""

    action: Action
    result: JSON = None
    highest: int = 0


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a receiver knows of one idempotency key (`FenceGuard.lookup`).

    `state` is `"never_ran"` (no command with this key ran to its end, or none came), `"running"`
    (one is running now, or its receiver died before it ended) or `"done"` (it ran and `result`
    is what it returned, None included: an email sent returns nothing and still happened).
    """

    state: Literal["never_ran", "running", "done"]
    result: JSON = None
    token: int | None = None

    @property
    def fence(self) -> int | None:
        """Deprecated name of `token` (removed in 0.3)."""
        renamed("Recorded.fence", "Recorded.token")
        return self.token

    @property
    def ran(self) -> bool:
        """True when the command ran to its end: do not send it again, use `result`."""
        return self.state == "done"


class FenceGuard:
    """Runs each command once per key and refuses stale owners, on SQLite or PostgreSQL.

    `apply(scope, fence, key, fn)`: `fn()` runs once per key and its JSON result is stored; a
    repeated key gets the stored result back without `fn` running (even with a lower fence: the
    same command is replayed, not re-run); a new key whose `fence` is below the highest accepted
    for `scope` raises `StaleFence`. Check and record are one transaction; a concurrent call with
    a key in progress waits for the first and gets its result. If `fn` raises, nothing is stored.

    `claim` (the sender's claim identity, `fx.claim`, sent as `X-Execution-Claim`) binds the
    token a receiver accepts to the claim that holds it: the same token from another claim
    raises `FenceConflict` (two holders of one token: only a database that lost part of its
    history hands a token out twice). Without a claim, an equal token is accepted as before.
    Every refusal carries the scope's highest accepted token (`exc.highest`): a worker floors
    its job's token there, so the job's next claim is above it.

    `current_token(scope)`, for a receiver that can read the ledger (`ledger_tokens(ledger)`),
    is the job's token now: a new command below it is refused too, so a cancel (or a takeover)
    bars the old owner's late effects before any newer owner has reached this receiver.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        stale_after: float = DEFAULT_STALE_AFTER,
        max_result_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        current_token: Callable[[str], int] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.current_token = current_token
        self.clock = clock
        # The guard needs fences alone: typed so, it can call nothing else of the store, and
        # it creates the fence tables alone (a receiver's database holds no job tables).
        self.store: FenceStore = open_store(url, timeout=timeout)
        self.stale_after = stale_after
        self.max_result_bytes = max_result_bytes
        try:
            self.store.migrate(only=FENCES)
        except BaseException:
            self.store.close()
            raise

    def close(self) -> None:
        """Release the database connections."""
        self.store.close()

    def __enter__(self) -> FenceGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def apply(
        self,
        scope: str,
        token: int,
        key: str,
        fn: Callable[[], Any],
        *,
        claim: str | None = None,
        traceparent: str | None = None,
    ) -> JSON:
        """Run `fn` once for `key` under `fence` in `scope`; see the class docstring. With
        tracing on, the decision is a span (`tenure.fence`) of the current trace, or of the
        sender's when its `traceparent` is given."""
        return self.apply_with_status(scope, token, key, fn, claim=claim, traceparent=traceparent)[
            0
        ]

    def apply_with_status(
        self,
        scope: str,
        token: int,
        key: str,
        fn: Callable[[], Any],
        *,
        claim: str | None = None,
        traceparent: str | None = None,
    ) -> tuple[JSON, bool]:
        """Like `apply`, and say whether the result was replayed."""
        command = _Command.checked(scope, token, key, claim)
        with tracing.fence_span(scope, token, traceparent) as span:
            flow = _Flow(self._flow(command, span))
            step = flow.next()
            while step is not None:
                done: Any = None
                try:
                    if isinstance(step, _Pause):
                        self.clock.sleep(step.seconds)
                    elif isinstance(step, _Call):
                        done = step.fn(*step.args)
                    else:
                        done = fn()
                except BaseException as exc:
                    step = flow.next(error=exc)
                else:
                    step = flow.next(done)
            return flow.result

    async def aapply(
        self,
        scope: str,
        token: int,
        key: str,
        fn: Callable[[], Awaitable[Any]],
        *,
        claim: str | None = None,
        traceparent: str | None = None,
    ) -> tuple[JSON, bool]:
        """`apply_with_status` for async code: `fn` is awaited, database calls run in threads."""
        command = _Command.checked(scope, token, key, claim)
        with tracing.fence_span(scope, token, traceparent) as span:
            flow = _Flow(self._flow(command, span))
            step = flow.next()
            while step is not None:
                done: Any = None
                try:
                    if isinstance(step, _Pause):
                        await asyncio.sleep(step.seconds)
                    elif isinstance(step, _Call):
                        done = await asyncio.to_thread(step.fn, *step.args)
                    else:
                        done = await fn()
                except BaseException as exc:
                    step = flow.next(error=exc)
                else:
                    step = flow.next(done)
            return flow.result

    def _flow(self, command: _Command, span: tracing.FenceSpan) -> _Steps:
        """One command, from its decision to its stored result: the logic `apply_with_status`
        and `aapply` share. It yields each step that waits (a pause, a database call, the
        command's function) for its caller to perform, in a thread or awaited, and is sent what
        came of it (an exception is thrown in); it returns the result and whether it was
        replayed, or raises the refusal."""
        pause = 0.005
        while (decision := (yield _Call(self._decide, (command,)))).action is Action.WAIT:
            yield _Pause(pause)
            pause = min(pause * 2, 0.1)
        if decision.action is not Action.RUN:
            return _settled(decision, command, span)
        try:
            result = yield _RUN
        except BaseException:
            yield _Call(self.store.fence_forget, (command.scope, command.key, command.token))
            raise
        span.outcome("applied")
        return (yield _Call(self._store, (command, result))), False

    def lookup(self, key: str, scope: str | None = None) -> Recorded:
        """Did the command with `key` happen (in `scope`; keys are per scope)? `Recorded.ran`
        and its result (see `Recorded`): the question a worker whose effect is in doubt asks
        before sending it again. Without `scope`, the newest record of the key in any scope."""
        checked = None if scope is None else check_name(scope, "fence scope")
        record = self.store.fence_lookup(check_name(key, "idempotency key"), checked)
        if record is None:
            return Recorded("never_ran")
        if record.status is not FenceStatus.DONE:
            return Recorded("running", token=record.token)
        return Recorded("done", record.result, record.token)

    def _decide(self, command: _Command) -> Decision:
        """One transaction: read the scope's highest fence and the key, decide, record."""
        scope, token, claim = command.scope, command.token, command.claim
        with self.store.fence_transaction() as tx:
            high = tx.highest(scope)
            highest, holder = high.token, high.holder
            record = tx.get(scope, command.key)
            if record is not None and record.status is FenceStatus.DONE:
                tx.raise_highest(scope, token, claim)
                return Decision(Action.REPLAY, record.result, highest)
            if record is not None and record.age_seconds < self.stale_after:
                return Decision(Action.WAIT)
            # Only a new command asks the ledger: a replay or a wait needs no bar.
            known = 0 if self.current_token is None else self.current_token(scope)
            if known > highest:
                tx.raise_highest(scope, known, None)
                highest, holder = known, None
            if token < highest:
                return Decision(Action.STALE, highest=highest)
            if token == highest and None not in (claim, holder) and claim != holder:
                return Decision(Action.CONFLICT, highest=highest)
            tx.begin(command.key, scope, token)
            tx.raise_highest(scope, token, claim)
            return Decision(Action.RUN, highest=max(highest, token))

    def _store(self, command: _Command, result: Any) -> JSON:
        scope, key, token = command.scope, command.key, command.token
        try:
            encoded = encode_json(result, "fenced result", self.max_result_bytes)
        except InvalidArgument:
            self.store.fence_forget(scope, key, token)
            raise
        self.store.fence_finish(scope, key, token, encoded.text)
        return json.loads(encoded.text)


@dataclass(frozen=True, slots=True)
class _Command:
    """One command a receiver judges: checked once where it enters."""

    scope: str
    token: int
    key: str
    claim: str | None

    @classmethod
    def checked(cls, scope: str, token: int, key: str, claim: str | None) -> _Command:
        check_name(scope, "fence scope")
        check_name(key, "idempotency key")
        check_int(token, "token", 0, 2**63 - 1)
        if claim is not None:
            check_name(claim, "claim")
        return cls(scope, token, key, claim)


@dataclass(frozen=True, slots=True)
class _Pause:
    """A step of `FenceGuard._flow`: wait this long (a command with the key is running)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class _Call:
    """A step of `FenceGuard._flow`: a database call (async code runs it in a thread)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]


class _RunCommand(enum.Enum):
    """A step of `FenceGuard._flow`: run (or await) the command's function."""

    RUN = "run"


_RUN = _RunCommand.RUN

_Step = _Pause | _Call | _RunCommand
_Steps = Generator[_Step, Any, tuple[JSON, bool]]


class _Flow:
    """Steps a `FenceGuard._flow` for its driver: `next` hands over the step to perform (None
    once the flow has returned, its return value in `result`) and takes what came of the last
    one, its value or the exception it raised."""

    def __init__(self, steps: _Steps) -> None:
        self._steps = steps
        self.result: tuple[JSON, bool] = (None, False)

    def next(self, sent: Any = None, *, error: BaseException | None = None) -> _Step | None:
        try:
            return self._steps.send(sent) if error is None else self._steps.throw(error)
        except StopIteration as returned:
            self.result = returned.value
            return None


# Why each refused command is refused: its exception, and what the message says of its fence.
_REFUSALS: dict[Action, tuple[type[StaleFence], str]] = {
    Action.STALE: (
        StaleFence,
        "is below the highest accepted ({highest}): a newer owner has acted",
    ),
    Action.CONFLICT: (
        FenceConflict,
        "was accepted from another claim: two holders of one token (a database that lost part "
        "of its history)",
    ),
}


def _settled(decision: Decision, command: _Command, span: tracing.FenceSpan) -> tuple[JSON, bool]:
    """A command that does not run: refused (stale or a second holder), or replayed."""
    refused = _REFUSALS.get(decision.action)
    if refused is None:
        span.outcome("replayed")
        return decision.result, True
    error, why = refused
    scope, token, highest = command.scope, command.token, decision.highest
    span.stale(token, highest)
    raise error(
        f"fence {token} for {scope!r} {why.format(highest=highest)}; this command is refused",
        highest=highest,
        scope=scope,
        token=token,
    )


class JobReader(Protocol):
    """What `ledger_tokens` needs of a `tenure.Ledger`: reading a job by id."""

    def get(self, job_id: str) -> Job: ...


def ledger_tokens(ledger: JobReader) -> Callable[[str], int]:
    """`current_token` for a receiver that can read tenure's database: the scope is the job id
    (what `tenure.fence.headers` sends), its token read from the ledger; a scope that is no
    job's (another sender's) has no token there (0)."""

    def current(scope: str) -> int:
        try:
            token: int = ledger.get(scope).token
        except JobNotFound:
            return 0
        return token

    return current
