"""The pair faults of `tenure chaos`: a real primary/standby pair the harness starts, a
steady submitter whose acknowledged jobs are counted, and the claims every handler reports, so
that a token handed out twice would be seen outside the database (which forgets lost claims).

`failover` SIGKILLs the primary, promotes the standby and rebuilds a new standby from it;
`switchover` stops the primary cleanly first (no commit is lost that way, in either mode);
`restore` SIGKILLs the primary and starts the last base backup as it is in its place (crash
recovery from its `backup_label`, the backup's timeline: "restore last night's backup"), drops
the standby, and builds a new one from the restored primary. A base backup is taken before the
faults start and again after each fault. Every commit acknowledged after the restored backup
began may be undone by design: such submits are counted apart, never as a loss of the standby's.
"""

from __future__ import annotations

import shutil
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tenure
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.testing.pair import PairError, ReplicaPair

PAIR_FAULTS = ("failover", "switchover", "restore")


@dataclass(frozen=True)
class Backup:
    """A base backup of the primary, and when it began (commits after that may miss it)."""

    path: Path
    began: float


@dataclass
class Switch:
    """One failover, switchover or restore, with the times that matter."""

    kind: str
    started: float  # the wall clock (`Clock.wall`) at the kill (or at the clean stop)
    timeline: int = 0
    down: float = 0.0  # the old primary is gone (killed, or stopped): what comes after is new
    promoted: float | None = None  # the new primary serves (promoted, or restored)
    rebuilt: float | None = None
    restored: Backup | None = None  # the backup a restore started


@dataclass
class PairFaults:
    """The pair, the submitter and the claims log of one chaos run. `clock` paces the
    submitter and stamps the switches, backups and acknowledged submits (its wall clock: they
    are compared with the claims' stamps and the database's tokens)."""

    synchronous: bool
    claims_log: Path
    kind: str
    submits_per_second: float = 20.0
    clock: Clock = SYSTEM_CLOCK
    pair: ReplicaPair = field(init=False)
    acknowledged: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    switches: list[Switch] = field(default_factory=list)
    backups: list[Backup] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)
    _busy: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _submitter: threading.Thread | None = None
    _acknowledged_at: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pair = ReplicaPair(synchronous=self.synchronous, clock=self.clock)
        self.pair.start()

    @property
    def url(self) -> str:
        return self.pair.url()

    def take_backup(self) -> None:
        """A base backup of the primary now: the one the next `restore` starts (the one before
        it is deleted, its record kept for the figures)."""
        began = self.clock.wall()
        path = self.pair.base_backup()
        if self.backups:
            shutil.rmtree(self.backups[-1].path, ignore_errors=True)
        self.backups.append(Backup(path, began))

    # -- the steady submitter -----------------------------------------------------------------

    def start_submitting(self, ledger: tenure.Ledger, seed: int) -> None:
        def run() -> None:
            n = 0
            step = 1.0 / self.submits_per_second
            due = self.clock.monotonic()
            # A fixed schedule, not a fixed pause: the pace holds whatever a submit costs.
            while not self.clock.wait(self._stop, max(0.0, due - self.clock.monotonic())):
                due += step
                n += 1
                try:
                    job_id = ledger.submit(
                        self.kind, {"seed": 10_000 * seed + n, "amount": 1}, max_attempts=25
                    )
                except tenure.TenureError as exc:
                    self.refused[type(exc).__name__] += 1
                    continue
                self._acknowledged_at[job_id] = self.clock.wall()
                self.acknowledged.append(job_id)

        self._submitter = threading.Thread(target=run, name="chaos-submitter", daemon=True)
        self._submitter.start()

    def stop_submitting(self) -> None:
        self._stop.set()
        if self._submitter is not None:
            self._submitter.join(30)

    # -- the faults ---------------------------------------------------------------------------

    def inject(self, kind: str) -> bool:
        """Start a failover, switchover or restore in the background; False if one is under
        way."""
        if not self._busy.acquire(blocking=False):
            return False
        threading.Thread(target=self._switch, args=(kind,), daemon=True).start()
        return True

    def wait_idle(self) -> None:
        with self._busy:
            pass

    def _switch(self, kind: str) -> None:
        try:
            switch = Switch(kind, self.clock.wall())
            self.switches.append(switch)
            if kind == "restore":
                self._restore(switch)
            else:
                if kind == "failover":
                    self.pair.kill_primary()
                else:
                    self.pair.stop_primary()
                switch.down = self.clock.wall()
                self.pair.promote()
                switch.promoted = self.clock.wall()
            switch.timeline = self.pair.timeline()
            self.pair.rebuild_standby()
            switch.rebuilt = self.clock.wall()
            if self.backups:
                self.take_backup()
        except PairError as exc:
            # The harness's trouble, not tenure's: said in the report, never hidden.
            self.broken.append(f"{kind}: {exc}")
        finally:
            self._busy.release()

    def _restore(self, switch: Switch) -> None:
        """The primary dies; the last base backup is started as it is on its port; the
        standby, which followed the lost history, is dropped (rebuilt by the caller)."""
        if not self.backups:
            self.take_backup()
        backup = self.backups[-1]
        old = self.pair.primary
        self.pair.kill_primary()
        self.pair.kill(self.pair.standby)
        switch.down = self.clock.wall()
        self.pair.restore(backup.path, into=old)
        switch.promoted = self.clock.wall()
        switch.restored = backup

    # -- figures ------------------------------------------------------------------------------

    def claims(self) -> list[tuple[str, int, str, float]]:
        """(job, token, attempt nonce, time) for every claim a handler reported."""
        if not self.claims_log.exists():
            return []
        rows = []
        for line in self.claims_log.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                rows.append((parts[0], int(parts[1]), parts[2], float(parts[3])))
        return rows

    def figures(self, found: set[str]) -> tuple[dict[str, Any], list[tuple[str, bool]]]:
        claims = self.claims()
        holders: dict[tuple[str, int], set[str]] = defaultdict(set)
        for job, token, nonce, _ in claims:
            holders[(job, token)].add(nonce)
        twice = sum(1 for nonces in holders.values() if len(nonces) > 1)
        highest = max((token for _, token, _, _ in claims), default=0)
        acknowledged = self._acknowledged_at
        lost = [at for job_id, at in acknowledged.items() if job_id not in found]
        # A restore loses every commit after its backup began: those submits are its own.
        windows = [
            (s.restored.began, s.down) for s in self.switches if s.restored is not None and s.down
        ]
        by_restore = [at for at in lost if any(lo <= at <= hi for lo, hi in windows)]
        to_claim, to_submit = [], []
        for switch in self.switches:
            # Every token is at least the database clock in microseconds at its claim: a token
            # above the moment the old primary was gone was handed out by the new one.
            floor = int(switch.down * 1_000_000)
            after = [at for _, token, _, at in claims if switch.down and token > floor]
            if after:
                to_claim.append(round(min(after) - switch.started, 2))
            submitted = [at for at in acknowledged.values() if switch.down and at >= switch.down]
            if submitted:
                to_submit.append(round(min(submitted) - switch.started, 2))
        values = {
            "replication": "synchronous" if self.synchronous else "asynchronous",
            "failovers": sum(s.kind == "failover" for s in self.switches),
            "switchovers": sum(s.kind == "switchover" for s in self.switches),
            "restores": sum(s.kind == "restore" for s in self.switches),
            "timelines": [s.timeline for s in self.switches],
            "claims_reported": len(claims),
            "tokens_handed_out_twice": twice,
            "highest_token": highest,
            "submits_per_second": self.submits_per_second,
            "submits_acknowledged_during_run": len(self.acknowledged),
            "submits_refused_during_switch": dict(self.refused),
            "acknowledged_submits_lost": len(lost) - len(by_restore),
            "acknowledged_submits_undone_by_restore": len(by_restore),
            "pair_faults_broken_off": self.broken,
            "seconds_to_first_claim_after_switch": to_claim,
            "seconds_to_first_submit_after_switch": to_submit,
        }
        checks = [
            ("tokens handed out twice = 0", twice == 0),
            ("tokens below 2^53", highest < 2**53),
            ("pair faults carried out (none broke off)", not self.broken),
        ]
        if self.synchronous:
            checks.append(
                (
                    "acknowledged submits lost = 0 (synchronous; a restore's own window apart)",
                    len(lost) == len(by_restore),
                )
            )
        return values, checks

    def close(self) -> None:
        self.stop_submitting()
        self.pair.close()


def report_claim(path: str, job_id: str, token: int, *, clock: Clock = SYSTEM_CLOCK) -> None:
    """A handler's claim, one line appended (O_APPEND keeps processes' lines whole), stamped
    with `clock`'s wall clock."""
    import uuid

    with open(path, "a", encoding="utf-8") as log:
        log.write(f"{job_id} {token} {uuid.uuid4().hex} {clock.wall():.3f}\n")
