"""The lease keeper: renews every lease the worker holds, off the work path, and enforces the
local deadlines by the monotonic clock.

Two threads, so that a database that does not answer cannot delay a local decision:
- the renewer renews every due lease in one batched statement (`extend_many`), early: at each
  heartbeat interval, not at the last second. It may block on the database.
- the watcher never touches the database itself: a lease not confirmed before its conservative
  end is treated as lost (`ownership_unknown`), a stage past its timeout is stopped, and
  renewal stops at the class's max_lease_lifetime. The writes these lead to (failing the
  attempt) run on a small settle pool.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import OwnershipUnknown, StoreUnavailable
from tenure.labels import JobCounts, JobSpend
from tenure.logs import emit
from tenure.port import LeasePort
from tenure.runtime.run import JobRun
from tenure.runtime.supervisor import Supervisor
from tenure.types import CancelReason, WorkerCount

log = logging.getLogger("tenure.worker")

# Leases due within this share of their heartbeat are renewed in the same batch.
_BATCH_WINDOW = 0.25
# While the database is away, try again this often (bounded by a quarter heartbeat).
_RETRY_SECONDS = 1.0
_IDLE_SECONDS = 1.0
# Renewals are summed up in one INFO line this often (each one is logged at DEBUG).
_SUMMARY_SECONDS = 60.0
_JOB_SUMMARY = (
    WorkerCount.CLAIMED,
    WorkerCount.SUCCEEDED,
    WorkerCount.FAILED,
    WorkerCount.RETRIED,
    WorkerCount.RELEASED,
    WorkerCount.RESULTS_REJECTED,
)


class LeaseKeeper:
    """Renews leases (renewer thread) and enforces local deadlines (watcher thread)."""

    def __init__(
        self,
        port: LeasePort,
        *,
        supervisor: Supervisor,
        on_stage_timeout: Callable[[JobRun], None],
        on_lifetime: Callable[[JobRun], None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._port = port
        self._clock = clock
        self._supervisor = supervisor
        # Settle-pool tasks report their own crashes: a future would keep them silent.
        self._on_stage_timeout = supervisor.guard("settle", on_stage_timeout)
        self._on_lifetime = supervisor.guard("settle", on_lifetime)
        self._lost = supervisor.guard("settle", self._stop_lost)
        self._runs: dict[str, JobRun] = {}
        self._lock = threading.Lock()
        self._renew_wake = threading.Event()
        self._watch_wake = threading.Event()
        # When each thread will next look (monotonic), None while it is looking: a new run
        # wakes a thread only if it needs that thread sooner (a worker that claims thousands
        # of jobs a second must not wake both threads for each).
        self._renew_next: float | None = None
        self._watch_next: float | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._settle = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tenure-settle")
        self.counters: Counter[WorkerCount] = Counter()
        # The same counts of what happened to jobs, by (name, kind, sorted labels).
        self.by_job: Counter[tuple[str, str, tuple[tuple[str, str], ...]]] = Counter()
        self.spend: JobSpend = {}
        self._summary: Counter[str] = Counter()
        self._summary_since = self._clock.monotonic()
        self._jobs_logged: Counter[WorkerCount] = Counter()
        self._jobs_since = self._clock.monotonic()

    def start(self) -> None:
        """Start both threads (idempotent)."""
        if self._threads:
            return
        self._threads = [
            self._supervisor.spawn("lease-renewer", self._renew_loop),
            self._supervisor.spawn("lease-watcher", self._watch_loop),
        ]

    def stop(self) -> None:
        """Stop and join both threads, then the settle pool (idempotent)."""
        self._stop.set()
        self._renew_wake.set()
        self._watch_wake.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
        self._settle.shutdown(wait=True)

    def track(self, run: JobRun) -> None:
        """Keep this run's lease from now on."""
        renew_at = run.next_renewal
        watch_at = min(run.confirmed_until, run.stage_deadline or run.confirmed_until)
        with self._lock:
            self._runs[run.lease.job_id] = run
            if self._renew_next is None or renew_at < self._renew_next:
                self._renew_wake.set()
            if self._watch_next is None or watch_at < self._watch_next:
                self._watch_wake.set()

    def untrack(self, run: JobRun) -> None:
        """The handler is done: stop renewing."""
        with self._lock:
            if self._runs.get(run.lease.job_id) is run:
                del self._runs[run.lease.job_id]

    def cancelled(self, job_id: str, token: int) -> None:
        """An operator cancelled `job_id`, bumping its token to `token` (a NOTIFY, or a cancel
        in this process): stop its run now rather than at the next renewal. A run that holds
        `token` or a later one was claimed after that cancel and goes on."""
        with self._lock:
            run = self._runs.get(job_id)
        if run is not None and run.lease.token < token:
            self.count(WorkerCount.CANCELS_HEARD, run=run)
            run.renewing = False
            run.cancel(CancelReason.CANCELLED)

    def renew_now(self) -> None:
        """Renew at once (an effect wants a fresher confirmation)."""
        now = self._clock.monotonic()
        for run in self._snapshot():
            run.next_renewal = min(run.next_renewal, now)
        self._renew_wake.set()

    def deadlines_changed(self) -> None:
        """A stage started or ended: the watcher recomputes when to wake."""
        self._watch_wake.set()

    def count(self, name: WorkerCount, n: int = 1, *, run: JobRun | None = None) -> None:
        """Add to one of the worker's counters (and, for a run, to its kind's and labels')."""
        with self._lock:
            self.counters[name] += n
            if run is not None:
                self.by_job[(name, run.lease.kind, run.label_items)] += n

    def count_runs(self, name: WorkerCount, runs: list[JobRun]) -> None:
        """Add one per run to a counter, under one lock (a renewal batch of thousands)."""
        with self._lock:
            self.counters[name] += len(runs)
            for run in runs:
                self.by_job[(name, run.lease.kind, run.label_items)] += 1

    def totals(self) -> dict[str, int]:
        """A copy of the worker's counters, by name (`Worker.stats`)."""
        with self._lock:
            return {name.value: n for name, n in self.counters.items()}

    def job_counts(self) -> JobCounts:
        """A copy of the per-kind-and-labels counters."""
        with self._lock:
            return dict(self.by_job)

    def spent(self, run: JobRun, units: Mapping[str, float]) -> None:
        """Add what a run reported spending to its kind's and labels' totals."""
        with self._lock:
            for unit, amount in units.items():
                key = (run.lease.kind, unit, run.label_items)
                self.spend[key] = self.spend.get(key, 0.0) + amount

    def job_spend(self) -> JobSpend:
        """A copy of what the worker's jobs reported spending, by kind, unit and labels."""
        with self._lock:
            return dict(self.spend)

    def _snapshot(self) -> list[JobRun]:
        with self._lock:
            return [run for run in self._runs.values() if not run.finished]

    def _looking(self, renewer: bool) -> None:
        """Before a thread takes its snapshot: until it plans its next look, every track wakes
        it (the wake event is cleared here, so a track during the look is not lost)."""
        with self._lock:
            if renewer:
                self._renew_next = None
                self._renew_wake.clear()
            else:
                self._watch_next = None
                self._watch_wake.clear()

    def _wait(self, renewer: bool, moments: list[float]) -> None:
        until = self._clock.monotonic() + _IDLE_SECONDS if not moments else min(moments)
        with self._lock:
            if renewer:
                self._renew_next = until
            else:
                self._watch_next = until
        wake = self._renew_wake if renewer else self._watch_wake
        self._clock.wait(wake, max(0.0, until - self._clock.monotonic()))

    # -- renewer -----------------------------------------------------------------------------

    def _renew_loop(self) -> None:
        while not self._stop.is_set():
            self._looking(renewer=True)
            now = self._clock.monotonic()
            runs = [run for run in self._snapshot() if run.renewing]
            due = [
                run
                for run in runs
                if run.next_renewal - _BATCH_WINDOW * run.job_class.heartbeat <= now
            ]
            if due:
                self._renew(due)
                continue
            self._wait(True, [run.next_renewal for run in runs])

    def _renew(self, due: list[JobRun]) -> None:
        sent_at = self._clock.monotonic()
        self.count(WorkerCount.RENEWAL_BATCHES)
        try:
            result = self._port.extend_many([run.lease for run in due])
        except (OwnershipUnknown, StoreUnavailable):
            self.count_runs(WorkerCount.EXTENSION_FAILURES, due)  # each lease whose renewal failed
            self._summarise(failures=1)
            for run in due:
                run.next_renewal = sent_at + min(_RETRY_SECONDS, run.job_class.heartbeat / 4)
            return
        renewed = [r for r in due if r.lease.job_id in result.renewed]
        self.count_runs(WorkerCount.HEARTBEATS, renewed)
        self._summarise(renewed=len(result.renewed), lost=len(result.lost))
        for run in due:
            if run.lease.job_id in result.renewed:
                run.confirmed(sent_at, result.renewed[run.lease.job_id])
                self._watch_wake.set()
            else:
                self.count(WorkerCount.LEASES_LOST, run=run)
                run.trace.event("lease_lost", run.lease.token)
                run.renewing = False
                # Why it was lost (an operator's cancel, or another owner) takes a read: on
                # the settle pool, so that the renewer itself makes one statement per batch.
                self._settle.submit(self._lost, run)

    def _stop_lost(self, run: JobRun) -> None:
        run.cancel(self._port.lost_reason(run.lease.job_id))

    def _summarise(self, **counts: int) -> None:
        """Add to the renewal summary; log it at INFO once `_SUMMARY_SECONDS` have passed."""
        self._summary.update(counts)
        now = self._clock.monotonic()
        if now - self._summary_since < _SUMMARY_SECONDS:
            return
        emit(
            log,
            logging.INFO,
            "heartbeats",
            seconds=round(now - self._summary_since, 1),
            renewed=self._summary["renewed"],
            lost=self._summary["lost"],
            failures=self._summary["failures"],
            leases=len(self._snapshot()),
        )
        self._summary.clear()
        self._summary_since = now

    # -- watcher -----------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            self._looking(renewer=False)
            now = self._clock.monotonic()
            moments: list[float] = []
            for run in self._snapshot():
                moments += self._enforce(run, now)
            if now - self._jobs_since >= _SUMMARY_SECONDS:
                self._summarise_jobs(now)
            self._wait(False, moments)

    def _summarise_jobs(self, now: float) -> None:
        """What happened to jobs since the last summary, in one INFO line (each job's own lines
        are DEBUG); nothing when nothing happened."""
        with self._lock:
            current = Counter({name: self.counters[name] for name in _JOB_SUMMARY})
        changed = {name: current[name] - self._jobs_logged[name] for name in _JOB_SUMMARY}
        if any(changed.values()):
            seconds = round(now - self._jobs_since, 1)
            emit(
                log, logging.INFO, "jobs", seconds=seconds, running=len(self._snapshot()), **changed
            )
        self._jobs_logged, self._jobs_since = current, now

    def _enforce(self, run: JobRun, now: float) -> list[float]:
        """Act on the run's passed deadlines; return the ones still ahead."""
        job_class = run.job_class
        ahead: list[float] = []
        deadline = run.stage_deadline
        if deadline is not None:
            if now >= deadline:
                run.stage_deadline = None
                self.count(WorkerCount.STAGE_TIMEOUTS, run=run)
                run.cancel(CancelReason.STAGE_TIMEOUT)
                self._settle.submit(self._on_stage_timeout, run)
            else:
                ahead.append(deadline)
        if run.renewing and job_class.max_lease_lifetime is not None:
            end = run.started + job_class.max_lease_lifetime
            if now >= end:
                self.count(WorkerCount.MAX_LEASE_LIFETIME, run=run)
                run.renewing = False
                run.cancel(CancelReason.MAX_LEASE_LIFETIME)
                self._settle.submit(self._on_lifetime, run)
            else:
                ahead.append(end)
        if not run.cancelled.is_set():
            if now >= run.confirmed_until:
                # The lease may be gone by the database's clock: act as if it were, and keep
                # probing (the renewer) so the database's answer is recorded when it comes.
                self.count(WorkerCount.LEASES_UNCONFIRMED, run=run)
                self._port.report_unconfirmed(run.lease, run.lease_until)
                run.cancel(CancelReason.OWNERSHIP_UNKNOWN)
            else:
                ahead.append(run.confirmed_until)
        return ahead
