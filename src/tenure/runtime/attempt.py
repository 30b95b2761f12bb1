"""One attempt's start: the handler's context, fresh or resumed from recorded stages (with
the checkpoint migrated and the resume checks run), and the call of a sync or async handler."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from typing import Any

from tenure.budgets import BudgetExhausted
from tenure.errors import JobCancelled, NonRetryable
from tenure.port import LeasePort
from tenure.runtime import checkpoints
from tenure.runtime.context import JobContext
from tenure.runtime.keeper import LeaseKeeper
from tenure.runtime.run import JobRun
from tenure.types import EventType

Migrations = Mapping[str, Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]]]


def open_context(
    run: JobRun, port: LeasePort, keeper: LeaseKeeper, migrations: Migrations
) -> JobContext:
    """The handler's context: fresh, or resumed from the recorded stages.

    A job that recorded stages before has its checkpoint read, migrated to this code's version
    (kept beside the original), and its class's resume checks run: `CheckpointRefused` or
    `ResumeRefused` end the job `failed`.
    """
    lease, job_class = run.lease, run.job_class
    if lease.attempt > job_class.max_attempts:
        # The job's row allowed more attempts than its class (it was submitted without the
        # class: the CLI, HTTP, `ledger.submit`); the class's policy is the worker's.
        raise NonRetryable(
            f"attempt {lease.attempt} is past the class's max_attempts={job_class.max_attempts}: "
            "the lease of its last allowed attempt expired",
            code="lease_expired",
        )
    if lease.budgeted and (left := run.saw(port.budget(lease.job_id))) and left.exhausted:
        raise BudgetExhausted("the run's budget is spent: its jobs start no more")
    # The job's first claim ever (no token before it): no stage can have been recorded yet.
    stages = [] if lease.fresh else port.stages(lease.job_id)
    if not stages:
        return JobContext(run, port, keeper, [], checkpoints.new_envelope(lease, job_class))
    envelope = checkpoints.stored_envelope(lease, job_class, stages)
    envelope, migrated_from = checkpoints.bring_up_to_date(
        envelope, job_class, migrations.get(lease.kind, {})
    )
    if migrated_from is not None:
        port.save_step(lease, lease.step, envelope)
        port.record(
            lease,
            EventType.CHECKPOINT_MIGRATED,
            from_version=migrated_from,
            to_version=job_class.version,
        )
        run.log(logging.INFO, "checkpoint_migrated", from_version=migrated_from)
    ctx = JobContext(run, port, keeper, checkpoints.replay_results(stages, envelope), envelope)
    for check in job_class.resume_checks:
        check(ctx, ctx.checkpoint)
    return ctx


def call_handler(run: JobRun, ctx: JobContext, loop: asyncio.AbstractEventLoop | None) -> Any:
    """Call the handler on this thread, or an async one on the worker's event loop."""
    job_class = run.job_class
    payload = job_class.handler_payload(run.lease.payload)
    if not job_class.is_async:
        return job_class.stored_result(job_class.handler(ctx, payload))
    assert loop is not None  # started with the worker when a class is async
    future = asyncio.run_coroutine_threadsafe(run.trace.bind(job_class.handler(ctx, payload)), loop)
    run.async_future = future
    if run.cancelled.is_set():
        future.cancel()
    try:
        return job_class.stored_result(future.result())
    except concurrent.futures.CancelledError:
        raise JobCancelled(run.cancel_reason) from None
