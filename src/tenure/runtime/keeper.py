"""The lease keeper: one thread renews every lease the worker holds, off the work path.

Each tick renews every due lease in one batched statement (`extend_many`), early: at each
heartbeat interval, not at the last second. It also enforces the local deadlines: a lease that
could not be confirmed before its conservative end is treated as lost, a stage past its timeout
is stopped, and renewal stops at the class's max_lease_lifetime.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from tenure.errors import OwnershipUnknown, StoreUnavailable
from tenure.ledger import Ledger
from tenure.logs import emit
from tenure.runtime.run import JobRun

log = logging.getLogger("tenure.worker")

# Leases due within this share of their heartbeat are renewed in the same batch.
_BATCH_WINDOW = 0.25
# While the database is away, try again this often (bounded by a quarter heartbeat).
_RETRY_SECONDS = 1.0


class LeaseKeeper:
    """Renews leases and enforces local deadlines on its own thread."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        on_stage_timeout: Callable[[JobRun], None],
        on_lifetime: Callable[[JobRun], None],
        on_crash: Callable[[BaseException], None],
    ) -> None:
        self._ledger = ledger
        self._on_stage_timeout = on_stage_timeout
        self._on_lifetime = on_lifetime
        self._on_crash = on_crash
        self._runs: dict[str, JobRun] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.counters: Counter[str] = Counter()

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="tenure-lease-keeper", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread (idempotent)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def track(self, run: JobRun) -> None:
        """Keep this run's lease from now on."""
        with self._lock:
            self._runs[run.lease.job_id] = run
        self._wake.set()

    def untrack(self, run: JobRun) -> None:
        """The handler is done: stop renewing."""
        with self._lock:
            if self._runs.get(run.lease.job_id) is run:
                del self._runs[run.lease.job_id]

    def renew_now(self) -> None:
        """Renew at once (an effect wants a fresher confirmation)."""
        with self._lock:
            for run in self._runs.values():
                run.next_renewal = min(run.next_renewal, time.monotonic())
        self._wake.set()

    def count(self, name: str, n: int = 1) -> None:
        """Add to one of the worker's counters."""
        with self._lock:
            self.counters[name] += n

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.clear()
                self._tick()
                self._wake.wait(self._sleep_time())
        except BaseException as exc:  # a keeper that dies must stop the worker loudly
            emit(log, logging.CRITICAL, "lease_keeper_crashed", error_type=type(exc).__name__)
            self._on_crash(exc)

    def _snapshot(self) -> list[JobRun]:
        with self._lock:
            return [run for run in self._runs.values() if not run.finished]

    def _sleep_time(self) -> float:
        moments = []
        for run in self._snapshot():
            if run.renewing:
                moments += [run.next_renewal, run.confirmed_until]
            if run.stage_deadline is not None and not run.cancelled.is_set():
                moments.append(run.stage_deadline)
            if run.job_class.max_lease_lifetime is not None and run.renewing:
                moments.append(run.started + run.job_class.max_lease_lifetime)
        if not moments:
            return 1.0
        return max(0.0, min(moments) - time.monotonic())

    def _tick(self) -> None:
        now = time.monotonic()
        due: list[JobRun] = []
        for run in self._snapshot():
            self._enforce_deadlines(run, now)
            window = _BATCH_WINDOW * run.job_class.heartbeat
            if run.renewing and run.next_renewal - window <= now:
                due.append(run)
        if due:
            self._renew(due)

    def _enforce_deadlines(self, run: JobRun, now: float) -> None:
        job_class = run.job_class
        if run.stage_deadline is not None and now >= run.stage_deadline and not run.finished:
            run.stage_deadline = None
            self.count("stage_timeouts")
            run.cancel("stage_timeout")
            self._on_stage_timeout(run)
        if (
            run.renewing
            and job_class.max_lease_lifetime is not None
            and now - run.started >= job_class.max_lease_lifetime
        ):
            self.count("max_lease_lifetime")
            run.cancel("max_lease_lifetime")
            self._on_lifetime(run)
        if run.renewing and now >= run.confirmed_until:
            # The lease may be gone by now by the database's clock: act as if it were.
            self.count("leases_lost")
            run.cancel("ownership_unknown")

    def _renew(self, due: list[JobRun]) -> None:
        sent_at = time.monotonic()
        self.count("renewal_batches")
        try:
            result = self._ledger.extend_many([run.lease for run in due])
        except (OwnershipUnknown, StoreUnavailable):
            self.count("extension_failures")
            for run in due:
                if run.unconfirmed_since is None:
                    run.unconfirmed_since = sent_at
                run.next_renewal = sent_at + min(_RETRY_SECONDS, run.job_class.heartbeat / 4)
            return
        self.count("heartbeats", len(result.renewed))
        for run in due:
            if run.lease.job_id in result.renewed:
                run.confirmed(sent_at, result.renewed[run.lease.job_id])
            else:
                self.count("leases_lost")
                run.cancel("lease_lost")
