"""Reading jobs, their events and stages, waiting for one to end, and the operator's
transitions (cancel, requeue)."""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
from typing import Protocol, TypeVar

from tenure.errors import InvalidArgument, InvalidTransition, JobNotFound, TerminalJob
from tenure.ledger.core import Part
from tenure.logs import emit
from tenure.principals import Binding
from tenure.storage.base import JobStore, LeaseStore, MetricsStore, PrincipalFilter, StageStore
from tenure.types import Event, EventTotals, Job, JobState, OverdueStages, QueueFigure, Stage
from tenure.validation import check_int, check_job_id, check_name

log = logging.getLogger("tenure")
T = TypeVar("T")

MAX_LIST_LIMIT = 1000


class ReadingStore(JobStore, LeaseStore, StageStore, MetricsStore, Protocol):
    """What `Reading` uses of the store: jobs, events, stages, cancels, requeues, figures."""


class Reading(Part[ReadingStore]):
    """Reads and operator transitions of the `Ledger`."""

    def cancel(self, job_id: str) -> None:
        """Cancel a queued, running or waiting job and its unfinished children; each token is
        bumped so no running worker can publish.

        Raises `TerminalJob` for a job already succeeded, failed or cancelled.
        """
        job_id = check_job_id(job_id)
        if self.store.cancel(job_id):
            emit(log, logging.INFO, "job_cancelled", job=job_id)
            return
        job = self.get(job_id)
        raise TerminalJob(f"job {job_id} is already {job.state.value}; nothing to cancel")

    def requeue(self, job_id: str) -> None:
        """Make a failed or cancelled job claimable again from its saved step (attempt reset),
        with its failed or cancelled children (and theirs): a parent that waits for them would
        otherwise fail again at once."""
        job_id = check_job_id(job_id)
        if self.store.requeue(job_id):
            emit(log, logging.INFO, "job_requeued", job=job_id)
            for child in self.store.children(job_id):
                if child.state in (JobState.FAILED, JobState.CANCELLED):
                    with contextlib.suppress(InvalidTransition):  # requeued meanwhile
                        self.requeue(child.id)
            return
        job = self.get(job_id)
        raise InvalidTransition(
            f"job {job_id} is {job.state.value}: only failed or cancelled jobs can be requeued"
        )

    def get(self, job_id: str) -> Job:
        """The job as stored now; `JobNotFound` for an unknown or malformed id."""
        job_id = check_job_id(job_id)
        job = self.store.get(job_id)
        if job is None:
            raise JobNotFound(f"no job has the id {job_id}")
        return job

    def events(self, job_id: str) -> list[Event]:
        """The job's flight recorder, oldest first."""
        job_id = check_job_id(job_id)
        return self.of_known_job(job_id, self.store.events(job_id))

    def stages(self, job_id: str) -> list[Stage]:
        """The job's recorded steps and effects, in handler order."""
        job_id = check_job_id(job_id)
        return self.of_known_job(job_id, self.store.stages(job_id))

    def of_known_job(self, job_id: str, found: builtins.list[T]) -> builtins.list[T]:
        """`found` (rows of the job); an empty answer for an unknown job is `JobNotFound`."""
        if not found and self.store.get(job_id) is None:
            raise JobNotFound(f"no job has the id {job_id}")
        return found

    def list(
        self,
        state: JobState | str | None = None,
        kind: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        after: str | None = None,
        principal: str | None = None,
    ) -> list[Job]:
        """Jobs newest first; pass the last id of a page as `after` for the next page."""
        if state is not None:
            try:
                state = JobState(state)
            except ValueError:
                choices = ", ".join(s.value for s in JobState)
                raise InvalidArgument(f"unknown state {state!r}: use one of {choices}") from None
        kind = None if kind is None else check_name(kind, "kind filter")
        tenant = None if tenant is None else check_name(tenant, "tenant filter")
        limit = check_int(limit, "limit", 1)
        if limit > MAX_LIST_LIMIT:
            raise InvalidArgument(f"limit must be at most {MAX_LIST_LIMIT}, got {limit}")
        if after is not None:
            after = self.get(after).id
        scope = None
        if principal is not None:
            binding = Binding.of(principal)
            scope = PrincipalFilter(binding.principal, binding.prefix)
        return self.store.list_jobs(state, kind, tenant, limit, after, scope)

    def counts(self, kind: str | None = None, tenant: str | None = None) -> dict[JobState, int]:
        """How many jobs are in each state (every state present, zeros included)."""
        kind = None if kind is None else check_name(kind, "kind filter")
        tenant = None if tenant is None else check_name(tenant, "tenant filter")
        found = self.store.count_by_state(kind, tenant)
        return {state: found.get(state, 0) for state in JobState}

    def wait(self, job_id: str, timeout: float = 30.0) -> Job:
        """`Ledger.wait`: woken by the ledger's watch of ended jobs, on its clock."""
        job_id = check_job_id(job_id)
        clock = self.core.clock
        deadline = clock.monotonic() + max(0.0, float(timeout))
        woke = threading.Event()
        unwatch = self.core.ended.watch(job_id, woke.set)
        try:
            job = self.get(job_id)
            while not job.terminal:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    return job
                if not clock.wait(woke, remaining):
                    return self.get(job_id)
                woke.clear()
                job = self.get(job_id)
            return job
        finally:
            unwatch()

    def queue_figures(self, by_tenant: bool = False) -> builtins.list[QueueFigure]:
        """Jobs per kind (and tenant) and state, with lease and queue ages, by the DB clock."""
        return self.store.queue_figures(by_tenant)

    def overdue_stages(self, by_tenant: bool = False) -> builtins.list[OverdueStages]:
        """Steps and effects of running jobs still started past their stage timeout, by kind
        (and tenant) and labels: the seed's TTL alert, from the database."""
        return self.store.overdue_stages(by_tenant)

    def event_totals(self, by_tenant: bool = False) -> builtins.list[EventTotals]:
        """Recovery events per kind (and tenant): expiries, reclaims, rejections, …"""
        return self.store.event_totals(by_tenant)
