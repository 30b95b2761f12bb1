"""One running job as the worker's threads share it: lease, local deadlines, cancellation."""

from __future__ import annotations

import contextlib
import logging
import sysconfig
import threading
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime
from enum import StrEnum
from types import TracebackType
from typing import Any

from tenure.app import JobClass
from tenure.budgets import Budget
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import StoreUnavailable
from tenure.logs import emit
from tenure.port import LeasePort
from tenure.runtime.evidence import NO_RULES, EvidenceRules
from tenure.tracing import NO_TRACE, AttemptTrace
from tenure.types import CancelReason, EventType, JobState, Lease

log = logging.getLogger("tenure.worker")


class RunEnd(StrEnum):
    """What became of a run: its span's `tenure.outcome` and the worker's counter."""

    UNFINISHED = "unfinished"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # its last attempt
    RETRIED = "retried"  # failed, with attempts left
    RELEASED = "released"  # given back at a shutdown
    SUSPENDED = "suspended"  # waits, without a lease
    STOPPED = "stopped"  # told to stop (a cancel, a lost lease, a timeout)
    RESULT_REJECTED = "result_rejected"  # another owner's lease: the database refused it

    @property
    def is_error(self) -> bool:
        return self in _ERROR_ENDS


_ERROR_ENDS = frozenset({RunEnd.FAILED, RunEnd.RETRIED, RunEnd.RESULT_REJECTED, RunEnd.STOPPED})


class Write(StrEnum):
    """The lease-guarded write that ends a run."""

    COMPLETE = "complete"
    FAIL = "fail"
    RELEASE = "release"

    def end(self, answer: object) -> RunEnd:
        """The run's end once this write succeeded with `answer` (a fail's: the job's state)."""
        if self is Write.COMPLETE:
            return RunEnd.SUCCEEDED
        if self is Write.RELEASE:
            return RunEnd.RELEASED
        return RunEnd.FAILED if answer is JobState.FAILED else RunEnd.RETRIED


class JobRun:
    """The state of one claimed job that the runner, the lease keeper and the worker share.

    Local deadlines use the worker's `clock` (monotonic); `confirmed_until` is a conservative
    local bound on the lease: the clock's time at which the last confirming request was *sent*,
    plus the lease length (the database's lease started no earlier than that).
    """

    def __init__(
        self,
        lease: Lease,
        job_class: JobClass,
        sent_at: float,
        rules: EvidenceRules = NO_RULES,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.lease = lease
        self.clock = clock
        self.job_class = job_class
        self.rules = rules  # the app's retrievers and narrowing function
        # Its class's fixed labels and its submit's: what its metrics and spans are broken
        # down by (`label_items`, sorted, is the counters' key).
        self.labels = job_class.labels_of(lease.labels)
        self.label_items = tuple(sorted(self.labels.items()))
        self.trace: AttemptTrace = NO_TRACE
        self.outcome = RunEnd.UNFINISHED
        self.started = sent_at
        self.confirmed_until = sent_at + lease.lease_seconds
        self.lease_until: datetime = lease.lease_until
        self.next_renewal = sent_at + job_class.heartbeat
        self.renewing = True
        self.stage_deadline: float | None = (
            None if job_class.stage_timeout is None else sent_at + job_class.stage_timeout
        )
        self.stage_name: str | None = None
        self.stage_is_effect = False
        self.cancelled = threading.Event()
        self.cancel_reason: CancelReason | None = None
        self.async_future: Future[Any] | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._finished = False
        # The handler returned a result that is now being committed.
        self.handler_returned = False
        # The run's last look at its budget (its start's, `ctx.budget`, `ctx.report_cost`):
        # a hold for the budget releases the job if a raise came after it.
        self.budget_seen: Budget | None = None
        self._lock = threading.Lock()
        # Made by the first wait for a margin (most runs never wait): see _confirmations().
        self._confirmed: threading.Condition | None = None

    def saw(self, budget: Budget | None) -> Budget | None:
        """Keep a look at the run's budget (None: no budget, nothing kept); return it."""
        if budget is not None:
            self.budget_seen = budget
        return budget

    def log(self, level: int, event: str, **fields: Any) -> None:
        """Log an event about this run, with its job id and token."""
        emit(log, level, event, job=self.lease.job_id, token=self.lease.token, **fields)

    def log_failure(self, error: dict[str, Any], *, retried: bool) -> None:
        """A failed attempt, at WARNING: its code, the error's type, which attempt of how many,
        and whether it will be retried (never the message: it may quote content)."""
        self.log(
            logging.WARNING,
            "attempt_failed",
            code=error.get("code"),
            error_type=error.get("error_type"),
            attempt=self.lease.attempt,
            max_attempts=self.lease.max_attempts,
            retried=retried,
        )

    def log_frames(self, exc: BaseException) -> None:
        """Where a handler's exception came from: at WARNING the innermost frame of the user's
        own code (module, function, line), at DEBUG every frame. Code locations only, never the
        exception's message or locals."""
        self.log(
            logging.WARNING,
            "handler_raised",
            error_type=type(exc).__name__,
            at=raised_at(exc),
            attempt=self.lease.attempt,
        )
        frames = traceback.extract_tb(exc.__traceback__)
        where = " < ".join(f"{f.filename}:{f.lineno}:{f.name}" for f in reversed(frames))
        self.log(logging.DEBUG, "handler_traceback", error_type=type(exc).__name__, frames=where)

    # -- outcome ---------------------------------------------------------------------------

    def try_finish(self) -> bool:
        """Claim the one right to write this run's outcome (complete, fail or release)."""
        with self._lock:
            if self._finished:
                return False
            self._finished = True
            return True

    def suspended(self) -> None:
        """The job now waits without a lease: nothing more is written or renewed for it."""
        with self._lock:
            self._finished = True
            self.renewing = False

    @property
    def finished(self) -> bool:
        """True once someone wrote (or gave up writing) the run's outcome."""
        return self._finished

    def tool_outcome_unknown(self, port: LeasePort, cause: str) -> None:
        """Invariant 7: a tool whose outcome is unknown is its own event, with the job, token,
        last confirmed lease end, the effect and a request id (retry only with the same key)."""
        detail = {
            "cause": cause,
            "effect": self.stage_name,
            "request_id": uuid.uuid4().hex[:12],
            "last_confirmed_lease_until": self.lease_until.isoformat(),
        }
        self.log(logging.WARNING, "tool_outcome_unknown", **detail)
        # Logged above already; if the database is away, the retry's error code says it too.
        with contextlib.suppress(StoreUnavailable):
            port.record(self.lease, EventType.TOOL_OUTCOME_UNKNOWN, **detail)

    # -- cancellation ------------------------------------------------------------------------

    def cancel(self, reason: CancelReason) -> None:
        """Set `cancelled` once, run on_cancel callbacks, cancel an async task; stop renewing
        (except to probe a lease that could not be confirmed)."""
        with self._lock:
            if self.cancelled.is_set():
                return
            self.cancel_reason = reason
            # An unconfirmed lease is still probed, so the database's answer (kept, or
            # heartbeat_lost) is recorded once it can be reached again.
            if reason is not CancelReason.OWNERSHIP_UNKNOWN:
                self.renewing = False
            self.cancelled.set()
            callbacks, self._callbacks = self._callbacks, []
            if self._confirmed is not None:
                self._confirmed.notify_all()
        self.log(logging.WARNING, "job_cancelled_locally", reason=reason)
        self.trace.event(str(reason), self.lease.token)
        for callback in callbacks:
            _call_quietly(callback, self)
        if self.async_future is not None:
            self.async_future.cancel()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run `callback` when the run is cancelled (at once if it already is)."""
        with self._lock:
            if not self.cancelled.is_set():
                self._callbacks.append(callback)
                return
        _call_quietly(callback, self)

    # -- lease confirmation ------------------------------------------------------------------

    def confirmed(self, sent_at: float, lease_until: datetime) -> None:
        """The database renewed the lease with a request sent at monotonic `sent_at`."""
        with self._lock:
            self.confirmed_until = max(self.confirmed_until, sent_at + self.lease.lease_seconds)
            self.lease_until = lease_until
            self.next_renewal = sent_at + self.job_class.heartbeat
            if self._confirmed is not None:
                self._confirmed.notify_all()

    def margin_left(self) -> float:
        """Seconds of lease this worker can still count on, by its own monotonic clock."""
        return self.confirmed_until - self.clock.monotonic()

    def wait_for_margin(self, margin: float, timeout: float) -> bool:
        """Wait until at least `margin` seconds of lease are confirmed, or `timeout` passes."""
        deadline = self.clock.monotonic() + timeout
        with self._lock:
            while self.confirmed_until - self.clock.monotonic() < margin:
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0 or self.cancelled.is_set():
                    return False
                self._confirmations().wait(remaining)
            return True

    def _confirmations(self) -> threading.Condition:
        """The condition a confirmation notifies (call with the lock held)."""
        if self._confirmed is None:
            self._confirmed = threading.Condition(self._lock)
        return self._confirmed

    def start_segment(self, name: str | None, is_effect: bool = False) -> None:
        """A stage (or the handler's own work between stages) starts: its timeout restarts."""
        timeout = self.job_class.stage_timeout
        self.stage_name = name
        self.stage_is_effect = is_effect
        if not self.cancelled.is_set():
            self.stage_deadline = None if timeout is None else self.clock.monotonic() + timeout


def _call_quietly(callback: Callable[[], None], run: JobRun) -> None:
    try:
        callback()
    except Exception as exc:  # a failing cancel hook must not stop the others
        run.log(logging.WARNING, "on_cancel_failed", error_type=type(exc).__name__)


_LIBRARY_PATHS = tuple(
    {sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
)


def raised_at(exc: BaseException) -> str:
    """`module:function:line` of the innermost frame outside tenure, the standard library and
    installed packages (the user's handler code); the innermost frame if there is none."""
    frames: list[TracebackType] = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next

    def module(frame: TracebackType) -> str:
        return str(frame.tb_frame.f_globals.get("__name__", "?"))

    def users(frame: TracebackType) -> bool:
        name = module(frame)
        return not (
            name == "tenure"
            or name.startswith("tenure.")
            or frame.tb_frame.f_code.co_filename.startswith(_LIBRARY_PATHS)
        )

    chosen = ([f for f in frames if users(f)] or frames)[-1:]
    return (
        "?"
        if not chosen
        else (f"{module(chosen[0])}:{chosen[0].tb_frame.f_code.co_name}:{chosen[0].tb_lineno}")
    )
