"""The worker: claims jobs, runs their handlers, commits only what its lease allows.

Threads of a started worker, each a side task started by `Supervisor.spawn` (a side task that
dies stops the worker, loudly):

- `tenure-claim`: the claim loop; claims when slots are free and no result is on its way;
- `tenure-commit` (two): the committer (`committer.py`): results and next claims in one
  statement; a published result ends its run there (`outcomes.py`);
- `tenure-lease-renewer`, `tenure-lease-watcher`: the lease keeper (`keeper.py`): renewals, and
  local deadlines by the monotonic clock; `tenure-settle-N` writes what a deadline decides;
- `tenure-async`: the event loop of `async def` handlers (only when the app has one);
- `tenure-job-N`: handler threads (`threads.py`), kept between jobs; not joined at stop;
- `tenure-pg-listen`: PostgreSQL's LISTEN connection (`storage/postgres/listener.py`).

What a running worker holds (ledger, keeper, committer, loop, threads) is one `_Running`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType, TracebackType

from tenure import tracing
from tenure.app import App
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.errors import JobCancelled, StoreUnavailable, TenureError
from tenure.ledger import Ledger, lease_port, pinned_variants
from tenure.logs import emit
from tenure.port import LeasePort
from tenure.rates import RateClaim
from tenure.runtime.attempt import call_handler, open_context
from tenure.runtime.committer import ClaimSpec, Committer
from tenure.runtime.context import Suspended
from tenure.runtime.evidence import EvidenceRules
from tenure.runtime.failures import FailureRun
from tenure.runtime.keeper import LeaseKeeper
from tenure.runtime.latency import LatencyHistogram
from tenure.runtime.outcomes import Outcomes
from tenure.runtime.run import JobRun, Write
from tenure.runtime.scheduler import Scheduler
from tenure.runtime.sizing import worker_pool_size
from tenure.runtime.supervisor import Supervisor
from tenure.runtime.threads import HandlerThreads, join_thread
from tenure.types import CancelReason, Lease, WorkerCount

log = logging.getLogger("tenure.worker")

# While idle, the claim loop waits from this long up to poll_interval, doubling, with jitter
# (a wake-up from LISTEN/NOTIFY or an in-process submit ends the wait at once).
_FIRST_IDLE_WAIT = 0.02
# With only a few slots free, wait this long for more before claiming: one statement then
# claims several jobs. Only while busy; an idle worker claims at once.
_GATHER_WAIT = 0.005
# A claim looks for expired leases at most this often (ClaimRequest.rescue): the search reads
# every running row of the worker's kinds, which a claim of queued jobs need not pay for. A
# lease that expires is taken over within this long after it ends, by any worker. The workers
# of a fleet take turns (ClaimRequest.rescue_shared): on PostgreSQL, claimers of the same kinds
# search once a second between them, not once a second each, and read the queue from its head
# (where a held horizon leaves its dead versions) on the same turns.
RESCUE_INTERVAL = 1.0


@dataclass
class _Running:
    """What `start()` made and `stop()` takes down, in one place."""

    ledger: Ledger
    port: LeasePort
    keeper: LeaseKeeper
    committer: Committer
    outcomes: Outcomes
    loop: asyncio.AbstractEventLoop | None
    stop_listening: Callable[[], None] | None = None
    loop_thread: threading.Thread | None = None
    claim_thread: threading.Thread | None = None
    schedule_thread: threading.Thread | None = None


def new_worker_id() -> str:
    """Unique per process start, never reused: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Runs the app's job classes: `Worker(app, concurrency=8).run()` blocks until stopped.

    `with Worker(app) as worker:` runs it on background threads (for embedding and tests).
    SIGTERM or SIGINT (when `run()` is on the main thread) stop claiming, give running handlers
    `grace` seconds, then release the leases of those still running; a second stops at once.

    `clock` (default: the system's monotonic clock) times the runs' local deadlines: renewals,
    the conservative lease deadline, stage timeouts, `max_lease_lifetime`. A test can pass a
    `tenure.testing.clock.FakeClock` and move it; the database's clock still decides every
    lease, and the worker's own waits (`grace`, polling) stay on real time.
    """

    def __init__(
        self,
        app: App,
        *,
        concurrency: int = 4,
        url: str | None = None,
        worker_id: str | None = None,
        poll_interval: float = 1.0,
        grace: float = 30.0,
        kinds: list[str] | None = None,
        variants: Mapping[str, Sequence[str]] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not app.job_classes:
            raise TenureError("the app has no job classes: register handlers with @app.job")
        if concurrency < 1:
            raise TenureError(f"concurrency must be at least 1, got {concurrency}")
        unknown = set(kinds or []) - set(app.job_classes)
        if unknown:
            raise TenureError(f"no job class for kinds {sorted(unknown)}")
        self.app = app
        self.clock = clock
        self.concurrency = concurrency
        self.worker_id = worker_id or new_worker_id()
        self.poll_interval = poll_interval
        self.grace = grace
        self.kinds = kinds or sorted(app.job_classes)
        self.variants = dict(variants or {})  # of those kinds, only these (a code rollout)
        pinned_variants(self.variants)  # a typo fails here, at start, not at each claim
        self._url = url
        self._live: _Running | None = None
        self._runs: dict[str, JobRun] = {}
        self.claim_latency = LatencyHistogram()
        self._runs_lock = threading.Lock()
        self._rescued_at = -RESCUE_INTERVAL  # monotonic time of the last rescue claim
        self._reserved = 0  # slots promised to a claim in flight
        self._slot_freed = threading.Event()
        self._wake = threading.Event()
        self._kind_set = frozenset(self.kinds)
        self._kind_limits = {
            kind: limit
            for kind in self.kinds
            if (limit := app.job_classes[kind].concurrency_limit) is not None
        }
        self._rates = {
            kind: rule for kind in self.kinds if (rule := app.job_classes[kind].rate) is not None
        }
        self._rate_due: float | None = None  # seconds until a held rate key has room
        self._supervisor = Supervisor(self._crash)
        self._threads = HandlerThreads(concurrency, self._supervisor)
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._stop_requested = threading.Event()
        self._hurry = threading.Event()
        self._stop_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Worker:
        """Connect and start the side tasks (see the module docstring). Idempotent."""
        if self._live is not None:
            return self
        pool_size = worker_pool_size(
            self.concurrency, int(self.app.connect_options.get("pool_size", 4))
        )
        ledger = self.app.connect(self._url, pool_size=pool_size)
        port = lease_port(ledger)
        keeper = LeaseKeeper(
            port,
            supervisor=self._supervisor,
            on_stage_timeout=self._stage_timed_out,
            on_lifetime=self._lifetime_reached,
            clock=self.clock,
        )
        # With one lease length among its kinds, the committer's statements claim as well.
        claimer = self if len(self._lease_groups()) == 1 else None
        committer = Committer(port, self._supervisor, claimer, self.clock)
        loop = None
        if any(self.app.job_classes[k].is_async for k in self.kinds):
            loop = asyncio.new_event_loop()
        outcomes = Outcomes(
            self.app, port, keeper, committer, self._threads, self._hurry, self._ended
        )
        self._live = _Running(ledger, port, keeper, committer, outcomes, loop)
        keeper.start()
        committer.start()
        self._live.stop_listening = port.on_claimable(self._on_claimable, keeper.cancelled)
        if loop is not None:
            self._live.loop_thread = self._supervisor.spawn("async", loop.run_forever)
        self._live.claim_thread = self._supervisor.spawn("claim", self._claim_loop)
        scheduled = {k: s for k in self.kinds if (s := self.app.job_classes[k].schedule)}
        if scheduled:
            scheduler = Scheduler(
                ledger.operations.schedules, scheduled, self._stopping, self.worker_id
            )
            self._live.schedule_thread = self._supervisor.spawn("schedule", scheduler.run)
        emit(
            log,
            logging.INFO,
            "worker_started",
            worker=self.worker_id,
            database=port.where,
            concurrency=self.concurrency,
            kinds=",".join(self.kinds),
        )
        return self

    def run(self) -> None:
        """Run until `stop()` or a signal. A second signal skips the grace period.

        A database that cannot be reached or cannot write at the start (down, a standby until
        the failover ends) is waited for, with backoff, rather than a reason to exit.
        Raises `TenureError` (from the side task's error) when a side task died.
        """
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        if not self._start_when_available():
            return
        while not self._stop_requested.wait(0.2):
            pass
        self.stop()
        crashed = self._supervisor.crashed
        if crashed is not None:
            raise TenureError(
                f"the worker stopped because its side task {crashed[0]!r} died"
            ) from crashed[1]

    def _start_when_available(self) -> bool:
        """`start()`, tried again while the database is unavailable; False when stopped first."""
        failures = FailureRun("start", self.worker_id, self.clock)
        while not self._stop_requested.is_set():
            try:
                self.start()
            except StoreUnavailable as exc:
                self._stop_requested.wait(failures.failed(type(exc).__name__, str(exc)))
                continue
            failures.succeeded()
            return True
        return False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stop_requested.is_set():
            self._hurry.set()
        emit(
            log,
            logging.WARNING,
            "worker_signal",
            worker=self.worker_id,
            signal=signum,
            immediate=self._hurry.is_set(),
        )
        self._stop_requested.set()

    def stop(self, grace: float | None = None) -> None:
        """Stop claiming, wait up to `grace` seconds for running handlers, release the rest.

        Idempotent. The side tasks' threads are joined before the database connections close;
        handler threads are not (Python cannot stop a thread): a handler still running after
        its lease was released can publish nothing.
        """
        with self._stop_lock:
            live = self._live
            if self._stopped.is_set() or live is None:
                return
            self._stopping.set()
            self._stop_requested.set()
            self._slot_freed.set()
            self._wake.set()
            if live.stop_listening is not None:
                live.stop_listening()
            join_thread(live.claim_thread)
            join_thread(live.schedule_thread)
            deadline = self.clock.monotonic() + (self.grace if grace is None else grace)
            while self._active() and self.clock.monotonic() < deadline and not self._hurry.is_set():
                self.clock.wait(
                    self._slot_freed, min(0.05, max(0.0, deadline - self.clock.monotonic()))
                )
                self._slot_freed.clear()
            for run in self._active():
                run.cancel(CancelReason.SHUTDOWN)
                live.outcomes.finish(run, Write.RELEASE, lambda r: live.port.release(r.lease))
            live.committer.stop()
            self._threads.stop()
            live.keeper.stop()
            if live.loop is not None:
                live.loop.call_soon_threadsafe(live.loop.stop)
                join_thread(live.loop_thread)
                live.loop.close()
            emit(log, logging.INFO, "worker_stopped", worker=self.worker_id, **self.stats)
            live.ledger.close()
            self._stopped.set()

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def ledger(self) -> Ledger | None:
        """The worker's own ledger once started (closed once stopped)."""
        return None if self._live is None else self._live.ledger

    @property
    def crashed(self) -> BaseException | None:
        """The error of the side task whose death stopped the worker, if one did."""
        crashed = self._supervisor.crashed
        return None if crashed is None else crashed[1]

    @property
    def stats(self) -> dict[str, int]:
        """Counters: claimed, succeeded, failed, retried, rejected, steps in doubt, …, and the
        committer's statements (`commit_batches`)."""
        live = self._live
        if live is None:
            return {}
        return {**live.keeper.totals(), "commit_batches": live.committer.batches}

    @property
    def running(self) -> int:
        """How many jobs this worker runs now."""
        return len(self._active())

    @property
    def keeper(self) -> LeaseKeeper | None:
        """The lease keeper once started (its counters by kind and labels feed the metrics)."""
        return None if self._live is None else self._live.keeper

    def _state(self) -> _Running:
        if self._live is None:
            raise TenureError("the worker is not started: call start() or run()")
        return self._live

    def _port(self) -> LeasePort:
        return self._state().port

    def _active(self) -> list[JobRun]:
        with self._runs_lock:
            return list(self._runs.values())

    def _free_slots(self) -> int:
        """Slots for new claims. A run whose handler returned is only waiting for its result
        to be committed: it holds no handler slot, but at most `concurrency` such runs wait,
        so a slow database slows claiming down. Slots reserved by a claim in flight count."""
        with self._runs_lock:
            return self._free_slots_locked()

    def _free_slots_locked(self) -> int:
        handlers = sum(1 for run in self._runs.values() if not run.handler_returned)
        free = min(self.concurrency - handlers, 2 * self.concurrency - len(self._runs))
        return free - self._reserved

    def _reserve(self, wanted: int) -> int:
        """Reserve up to `wanted` free slots for a claim; return how many."""
        with self._runs_lock:
            granted = max(0, min(wanted, self._free_slots_locked()))
            self._reserved += granted
            return granted

    def _unreserve(self, count: int) -> None:
        with self._runs_lock:
            self._reserved -= count

    # -- the committer's claims (Claimer) ---------------------------------------------------

    def claims_with_results(self) -> bool:
        """Whether the committer's statements claim too. Under concurrency limits claims take
        the serialised path of the claim loop."""
        return not (self._stopping.is_set() or self._limited())

    def _limited(self) -> bool:
        """Whether claims take the serialised path (concurrency or rate limits)."""
        return bool(self._kind_limits or self._rates or self._port().has_tenant_limits())

    def reserve_claim(self) -> ClaimSpec | None:
        """Free slots for the committer's next statement to fill, if any."""
        if not self.claims_with_results():
            return None
        granted = self._reserve(self.concurrency)
        if not granted:
            return None
        lease_seconds, kinds = self._lease_groups()[0]
        return ClaimSpec(
            self.worker_id, kinds, lease_seconds, granted, self.variants, self._rescue_due()
        )

    def _rescue_due(self) -> bool:
        """Whether this claim should also look for expired leases (once per RESCUE_INTERVAL)."""
        with self._runs_lock:
            now = self.clock.monotonic()
            if now - self._rescued_at < RESCUE_INTERVAL:
                return False
            self._rescued_at = now
            return True

    def claimed(self, spec: ClaimSpec, leases: list[Lease], sent_at: float) -> None:
        """Start what the committer's statement claimed; free the rest of the reservation."""
        if leases:
            self.claim_latency.observe(self.clock.monotonic() - sent_at)
        for lease in leases:
            self._start(lease, sent_at)
        self._unreserve(spec.limit)
        if len(leases) < spec.limit:
            self._free_slot()

    def _crash(self, task: str, exc: BaseException) -> None:
        """A side task died (the supervisor logged it): stop the worker, at once."""
        del task, exc  # kept by the supervisor; `run()` raises it, `crashed` shows it
        self._hurry.set()
        self._stop_requested.set()
        # `run()` stops on its own thread; an embedded worker (`with Worker(app)`) needs one.
        threading.Thread(target=self.stop, name="tenure-stopper", daemon=True).start()

    # -- claiming ----------------------------------------------------------------------------

    def _on_claimable(self, kind: str) -> None:
        if not kind or kind in self._kind_set:
            self._wake.set()

    def _claim_loop(self) -> None:
        idle_wait = _FIRST_IDLE_WAIT
        groups = self._lease_groups()
        gather = max(1, self.concurrency // 2)
        committer = self._state().committer
        failures = FailureRun("claim", self.worker_id, self.clock)
        while not self._stopping.is_set():
            free = self._free_slots()
            if free <= 0:
                self._slot_freed.wait(self.poll_interval)
                self._slot_freed.clear()
                continue
            if committer.claims_soon:
                # Results are on their way: the committer's statements claim with them. Wake
                # once it has nothing left to send, not at every job's end.
                committer.wait_idle(self.poll_interval)
                continue
            if free < gather and idle_wait == _FIRST_IDLE_WAIT:
                free = self._gather(free, gather)
            self._wake.clear()
            try:
                claimed = self._claim(groups, free)
            except StoreUnavailable as exc:
                # A database that refuses (disk full, down): back off, one warning a run.
                self._stopping.wait(failures.failed(type(exc).__name__))
                continue
            failures.succeeded()
            if claimed:
                idle_wait = _FIRST_IDLE_WAIT
                if claimed >= free:
                    continue
            # Fewer jobs than free slots: the queue is empty for now. Wait for a wake-up
            # (or the next poll) rather than asking again at once.
            wait = idle_wait * random.uniform(0.5, 1.0)
            if self._rate_due is not None and self._rate_due < wait:
                self._wake.wait(max(0.001, self._rate_due))  # a held key has room then
                continue
            if self._wake.wait(wait):
                idle_wait = _FIRST_IDLE_WAIT
            else:
                idle_wait = min(idle_wait * 2, self.poll_interval)

    def _gather(self, free: int, enough: int) -> int:
        """Wait up to _GATHER_WAIT for `enough` free slots; return how many are free."""
        deadline = self.clock.monotonic() + _GATHER_WAIT
        while free < enough and not self._stopping.is_set():
            left = deadline - self.clock.monotonic()
            if left <= 0:
                break
            self._slot_freed.wait(left)
            self._slot_freed.clear()
            free = self._free_slots()
        return free

    def _lease_groups(self) -> list[tuple[float, list[str]]]:
        """Kinds grouped by lease length: one claim statement per group."""
        groups: dict[float, list[str]] = {}
        for kind in self.kinds:
            groups.setdefault(self.app.job_classes[kind].lease, []).append(kind)
        return sorted(groups.items())

    def _claim(self, groups: list[tuple[float, list[str]]], free: int) -> int:
        claimed = 0
        rescue = self._rescue_due()  # for every group: each has its own kinds' leases
        self._rate_due = None
        for lease_seconds, kinds in groups:
            granted = self._reserve(free - claimed)
            if not granted:
                break
            try:
                sent_at = self.clock.monotonic()
                rates = RateClaim(self._rates) if self._rates else None
                leases = self._port().claim_many(
                    self.worker_id,
                    limit=granted,
                    kinds=kinds,
                    lease_seconds=lease_seconds,
                    kind_limits=self._kind_limits,
                    variants=self.variants,
                    rescue=rescue,
                    rates=rates,
                    rescue_shared=True,
                )
                self.claim_latency.observe(self.clock.monotonic() - sent_at)
                if rates is not None and rates.next_in is not None:
                    due: float | None = self._rate_due
                    self._rate_due = rates.next_in if due is None else min(due, rates.next_in)
                for lease in leases:
                    self._start(lease, sent_at)
            finally:
                self._unreserve(granted)
            claimed += len(leases)
        return claimed

    def _start(self, lease: Lease, sent_at: float) -> None:
        rules = EvidenceRules(self.app.retrievers, self.app.narrowing)
        run = JobRun(lease, self.app.job_classes[lease.kind], sent_at, rules, self.clock)
        with self._runs_lock:
            self._runs[lease.job_id] = run
        keeper = self._state().keeper
        keeper.count(WorkerCount.CLAIMED, run=run)
        keeper.track(run)
        self._threads.run(self._execute, run)

    # -- running -----------------------------------------------------------------------------

    def _execute(self, run: JobRun) -> None:
        lease = run.lease
        # Per-job lines are DEBUG: at thousands of jobs a second, INFO lines would cost more
        # than the jobs (the keeper logs a `jobs` summary at INFO once a minute instead).
        run.log(
            logging.DEBUG,
            "job_started",
            kind=lease.kind,
            attempt=lease.attempt,
            worker=self.worker_id,
        )
        run.trace = tracing.start_attempt(lease, run.labels)
        live = self._state()
        handed_over = False
        try:
            with run.trace.active():
                ctx = open_context(run, live.port, live.keeper, self.app.checkpoint_migrations)
                result = call_handler(run, ctx, live.loop)
            run.handler_returned = True
            self._free_slot()
            handed_over = live.outcomes.commit(run, result)
        except (JobCancelled, Suspended, Exception) as exc:
            live.outcomes.handler_error(run, exc)
        finally:
            if not handed_over:  # else the committer's answer ends the run
                run.log(
                    logging.DEBUG,
                    "job_ended",
                    duration_ms=round((self.clock.monotonic() - run.started) * 1000, 1),
                )
                self._ended(run)

    def _free_slot(self) -> None:
        # Waiters clear the event before they count free slots, so a set event needs no
        # second set (which takes its lock): the common case once the committer claims.
        if not self._slot_freed.is_set():
            self._slot_freed.set()

    def _ended(self, run: JobRun) -> None:
        """The run is over, or settled while its handler may never return (Python cannot kill
        a thread; it can no longer publish anything): stop renewing, give its slot back."""
        self._state().keeper.untrack(run)
        run.trace.end(run.outcome, failed=run.outcome.is_error)
        with self._runs_lock:
            if self._runs.get(run.lease.job_id) is run:
                del self._runs[run.lease.job_id]
        self._free_slot()
        if self._limited():
            # Room under a limit is not announced by NOTIFY: look again at once.
            self._wake.set()

    # -- deadlines the lease keeper found -----------------------------------------------------

    def _stage_timed_out(self, run: JobRun) -> None:
        self._state().outcomes.stage_timed_out(run)

    def _lifetime_reached(self, run: JobRun) -> None:
        self._state().outcomes.lifetime_reached(run)
