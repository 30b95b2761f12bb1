"""What the end of a run writes: its result (through the committer), a failure, a release.

On PostgreSQL a returned result is handed to the committer and the handler thread goes back to
work: the committer's answer ends the run on the committer's thread (a count and the run's
slot), so a no-op job costs no second wake-up of its handler thread. On SQLite the handler
thread waits for its commit. An answer other than "published" (a lost lease, the database
away) is settled on a handler thread, where waiting is allowed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from tenure.app import App
from tenure.backoff import backoff_delay
from tenure.budgets import BudgetExhausted
from tenure.errors import (
    JobCancelled,
    LeaseLost,
    NonRetryable,
    OwnershipUnknown,
    ResumeRefused,
    StaleFence,
    StoreUnavailable,
    ToolOutcomeUnknown,
)
from tenure.port import LeasePort
from tenure.rates import RateLimited
from tenure.runtime.committer import Committer
from tenure.runtime.context import Suspended
from tenure.runtime.keeper import LeaseKeeper
from tenure.runtime.run import JobRun, RunEnd, Write
from tenure.runtime.threads import HandlerThreads
from tenure.types import CancelReason, EventType, JobState, WorkerCount

# Cancellations after which a returned result is still offered to the database to judge.
_DATABASE_DECIDES = frozenset({CancelReason.LEASE_LOST, CancelReason.OWNERSHIP_UNKNOWN})


class Outcomes:
    """Writes what became of each run of one started worker; `ended(run)` gives its slot back."""

    def __init__(
        self,
        app: App,
        port: LeasePort,
        keeper: LeaseKeeper,
        committer: Committer,
        threads: HandlerThreads,
        hurry: threading.Event,
        ended: Callable[[JobRun], None],
    ) -> None:
        self._app = app
        self._port = port
        self._keeper = keeper
        self._committer = committer
        self._threads = threads
        self._hurry = hurry
        self._ended = ended
        # SQLite's writes take turns on one lock: there the handler thread waits for its commit
        # as it always did. Handing over let a busy process's committer take its next turn so
        # soon that three processes on one file no longer shared the jobs evenly (the fairness
        # test's spread 0.16-0.27 against at most 0.12; 0 of 4 runs passed, 4 of 4 with this).
        self._hand_over = port.parallel_writes

    # -- a returned result -------------------------------------------------------------------

    def commit(self, run: JobRun, result: Any) -> bool:
        """Publish the result, only through the lease-guarded write. True when the committer
        took it: its answer ends the run (the caller must not); False when the run is over.

        A handler told to stop for a timeout, its lease lifetime or a shutdown publishes
        nothing: whoever stopped it fails or releases the attempt. After a lost or unconfirmed
        lease the result still goes to the database, which decides: another owner's lease makes
        it `result_rejected`, never a success.
        """
        reason = run.cancel_reason if run.cancelled.is_set() else None
        if reason is not None and reason not in _DATABASE_DECIDES:
            run.log(logging.WARNING, "result_discarded", reason=reason)
            return False
        run.try_finish()

        def answered(error: BaseException | None) -> None:
            self._answered(run, result, error)

        if self._hand_over and self._committer.hand_over(run.lease, result, answered):
            return True
        self._attempt(run, Write.COMPLETE, lambda r: self._committer.complete(r.lease, result))
        return False

    def _answered(self, run: JobRun, result: Any, error: BaseException | None) -> None:
        """The committer's answer, on its thread: a published result ends the run here."""
        if error is None:
            run.outcome = RunEnd.SUCCEEDED
            self._keeper.count(WorkerCount.SUCCEEDED, run=run)
            self._over(run)
            return
        self._threads.run(self._settle_answer, (run, result, error))

    def _settle_answer(self, item: tuple[JobRun, Any, BaseException]) -> None:
        """A result the database did not take at once: rejected, or to be written again."""
        run, result, first = item
        answers: list[BaseException | None] = [first]

        def write(r: JobRun) -> None:
            error = answers.pop() if answers else None
            if error is not None:
                raise error
            self._committer.complete(r.lease, result)

        try:
            self._attempt(run, Write.COMPLETE, write)
        except Exception as exc:  # what `complete` raises for this job alone (too large, …)
            self.handler_error(run, exc)
        finally:
            self._over(run)

    def _over(self, run: JobRun) -> None:
        run.log(
            logging.DEBUG,
            "job_ended",
            duration_ms=round((run.clock.monotonic() - run.started) * 1000, 1),
        )
        self._ended(run)

    # -- errors ------------------------------------------------------------------------------

    def handler_error(self, run: JobRun, exc: BaseException) -> None:
        """The handler, or the commit of its result, raised `exc`: write what it means."""
        if isinstance(exc, (JobCancelled, Suspended)):  # a suspended job waits, without lease
            if isinstance(exc, JobCancelled):
                run.log(logging.WARNING, "job_stopped", reason=exc.reason)
            if run.outcome is RunEnd.UNFINISHED:
                run.outcome = RunEnd.SUSPENDED if isinstance(exc, Suspended) else RunEnd.STOPPED
        elif (
            isinstance(exc, BudgetExhausted)
            and run.job_class.on_budget == "hold"
            and (
                run.lease.budgeted  # no budget to raise: held, it would wait for ever
            )
        ):
            run.log(logging.INFO, "budget_hold")
            self.finish(
                run, Write.RELEASE, lambda r: self._port.hold_for_budget(r.lease, r.budget_seen)
            )
        elif isinstance(exc, NonRetryable):
            self.fail(run, exc.error_document(self._app.keep_error_messages), retryable=False)
        elif isinstance(exc, ResumeRefused):
            run.log(logging.WARNING, "resume_refused", code=exc.code)
            self._port.record(run.lease, EventType.RESUME_REFUSED, code=exc.code)
            # Like a NonRetryable's: the message (it may name documents) in the job's error.
            kept = self._app.keep_error_messages and exc.message
            self.fail(
                run,
                {"code": exc.code, **({"message": exc.message} if kept else {})},
                retryable=False,
            )
        elif isinstance(exc, ToolOutcomeUnknown):
            run.tool_outcome_unknown(self._port, "tool_error")
            self.fail(run, {"code": "tool_outcome_unknown"}, retryable=True)
        elif isinstance(exc, StoreUnavailable):
            # OwnershipUnknown from a write, or the database failing a read while we hold the
            # lease: either way whether we still own the job is unknown.
            run.cancel(CancelReason.OWNERSHIP_UNKNOWN)
            self.fail(run, {"code": "ownership_unknown"}, retryable=True)
        elif isinstance(exc, LeaseLost):
            run.cancel(self._port.lost_reason(run.lease.job_id))
        elif isinstance(exc, StaleFence):
            self.refused(run, exc)
        elif isinstance(exc, RateLimited):
            self.rate_limited(run, exc.retry_after)
        else:
            run.log_frames(exc)
            self.fail(
                run, {"code": "handler_error", "error_type": type(exc).__name__}, retryable=True
            )

    def rate_limited(self, run: JobRun, retry_after: float) -> None:
        """The provider said 429: hold the class's rate key and give the job back for then."""
        rule = run.job_class.rate
        run.log(logging.INFO, "rate_limited", retry_after=retry_after)

        def write(r: JobRun) -> None:
            self._port.rate_limited(r.lease, rule, retry_after)

        self.finish(run, Write.RELEASE, write)

    def refused(self, run: JobRun, exc: StaleFence) -> None:
        """A receiver refused the run's effect. Where the receiver's highest token is at least
        this run's, it saw this token (from another claim) or a higher one that the database
        forgot: fail the attempt with the job's token floored there, so that its next claim is
        above what the receiver accepted. A run whose lease is lost meets LeaseLost here."""
        highest = exc.highest if exc.highest is not None else 0
        floor = highest if highest >= run.lease.token else None
        run.log(logging.WARNING, "effect_refused", code=exc.error_code, highest=highest)
        error = {"code": exc.error_code, **({"highest": highest} if floor else {})}
        self.fail(run, error, retryable=True, token_floor=floor)

    def fail(
        self,
        run: JobRun,
        error: dict[str, Any],
        *,
        retryable: bool,
        token_floor: int | None = None,
    ) -> None:
        """Fail the attempt (retried with backoff while the class allows more attempts)."""
        job_class = run.job_class
        retry_in = backoff_delay(run.lease.attempt, job_class.backoff, job_class.backoff_cap)
        # The class bounds the attempts of every job of its kind, however it was submitted.
        retryable = retryable and run.lease.attempt < job_class.max_attempts

        def write(r: JobRun) -> JobState:
            state = self._port.fail(
                r.lease, error, retryable=retryable, retry_in=retry_in, token_floor=token_floor
            )
            r.log_failure(error, retried=state is JobState.QUEUED)
            return state

        self.finish(run, Write.FAIL, write)

    def finish(self, run: JobRun, action: Write, write: Callable[[JobRun], Any]) -> None:
        """Write the run's outcome with `write`, unless another already was (or is being)."""
        if run.try_finish():
            self._attempt(run, action, write)

    def _attempt(self, run: JobRun, action: Write, write: Callable[[JobRun], Any]) -> None:
        """Write an outcome; retry while the database is away, for up to a lease length."""
        deadline = run.clock.monotonic() + run.job_class.lease
        while True:
            try:
                outcome = write(run)
            except LeaseLost:
                self._keeper.count(WorkerCount.RESULTS_REJECTED, run=run)
                run.outcome = RunEnd.RESULT_REJECTED
                run.trace.event("result_rejected", run.lease.token, action=action)
                run.cancel(self._port.lost_reason(run.lease.job_id))
                return
            except OwnershipUnknown:
                if run.clock.monotonic() > deadline or self._hurry.is_set():
                    run.log(logging.WARNING, "outcome_unwritten", action=action)
                    return
                run.clock.sleep(0.1)
                continue
            except StoreUnavailable:
                run.log(logging.WARNING, "outcome_unwritten", action=action)
                return
            run.outcome = action.end(outcome)
            self._keeper.count(WorkerCount(run.outcome), run=run)
            return

    # -- deadlines the lease keeper found ----------------------------------------------------

    def stage_timed_out(self, run: JobRun) -> None:
        """The running stage passed its timeout: an effect's outcome is unknown."""
        code = "tool_outcome_unknown" if run.stage_is_effect else "stage_timeout"
        run.log(logging.WARNING, "stage_timeout", stage=run.stage_name, code=code)
        if run.stage_is_effect:
            run.tool_outcome_unknown(self._port, "stage_timeout")
        self.fail(run, {"code": code, "stage": run.stage_name}, retryable=True)
        self._ended(run)

    def lifetime_reached(self, run: JobRun) -> None:
        """The run held its lease for the class's longest lease lifetime."""
        self.fail(run, {"code": "max_lease_lifetime"}, retryable=True)
        self._ended(run)
