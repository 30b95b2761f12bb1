"""The chaos run's second workload: parents that wait for a signal (sent by the harness at a
random moment, some twice, some again with a different payload), spawn one order as a child,
wait for it and sleep. What must hold: one child per parent, no signal applied twice, no
parent lost."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import tenure

PARENT = "chaos.parent"
# Child seeds start here, apart from the plain orders' seeds.
CHILD_SEEDS = 1_000_000


@dataclass
class PendingSignal:
    at: float
    job_id: str
    seed: int
    repeat: bool
    conflicting: bool


@dataclass
class ParentWorkload:
    """Submits the parents, sends their signals when due, and counts what must hold."""

    count: int
    spread: float
    rng: random.Random
    ids: list[str] = field(default_factory=list)
    pending: list[PendingSignal] = field(default_factory=list)
    sent: int = 0
    repeats_accepted: int = 0
    conflicts_refused: int = 0
    conflicts_accepted: int = 0

    def submit(self, ledger: tenure.Ledger, started: float) -> None:
        for i in range(self.count):
            seed = CHILD_SEEDS + i
            payload = {"seed": seed, "amount": 100 + i, "nap": round(self.rng.uniform(0.1, 1), 2)}
            job_id = ledger.submit(PARENT, payload, max_attempts=25)
            self.ids.append(job_id)
            self.pending.append(
                PendingSignal(
                    at=started + self.rng.uniform(0, self.spread),
                    job_id=job_id,
                    seed=seed,
                    repeat=self.rng.random() < 0.3,
                    conflicting=self.rng.random() < 0.1,
                )
            )
        self.pending.sort(key=lambda p: p.at)

    def send_due(self, ledger: tenure.Ledger, now: float) -> None:
        """Send every signal due by `now`; one the database cannot take now stays pending."""
        while self.pending and self.pending[0].at <= now:
            due = self.pending[0]
            try:
                self._send(ledger, due)
            except tenure.StoreUnavailable:
                return
            self.pending.pop(0)

    def _send(self, ledger: tenure.Ledger, due: PendingSignal) -> None:
        answer = {"approved": True, "seed": due.seed}
        if ledger.signal(due.job_id, "go", answer):
            self.sent += 1
        if due.repeat and ledger.signal(due.job_id, "go", answer):
            self.repeats_accepted += 1
        if due.conflicting:
            try:
                ledger.signal(due.job_id, "go", {"approved": False})
                self.conflicts_accepted += 1
            except tenure.SignalConflict:
                self.conflicts_refused += 1

    def unfinished(self, ledger: tenure.Ledger) -> int:
        counts = ledger.operations.counts(kind=PARENT)
        return sum(n for state, n in counts.items() if not state.terminal)

    def figures(self, ledger: tenure.Ledger) -> tuple[dict[str, Any], list[tuple[str, bool]]]:
        parents = [ledger.get(job_id) for job_id in self.ids]
        children = {job.id: ledger.children(job.id) for job in parents}
        per_slot = Counter(len(kids) for kids in children.values())
        received = Counter(
            job.id for job in parents for e in ledger.events(job.id) if e.type == "signal_received"
        )
        twice = sum(n > 1 for n in received.values()) + self.repeats_accepted
        twice += self.conflicts_accepted
        lost = sum(not job.terminal for job in parents)
        values = {
            "parents": len(parents),
            "parents_succeeded": sum(job.state is tenure.JobState.SUCCEEDED for job in parents),
            "parents_lost": lost,
            "children_per_parent": dict(per_slot),
            "signals_sent": self.sent,
            "signals_unsent": len(self.pending),
            "signal_conflicts_refused": self.conflicts_refused,
            "signals_applied_twice": twice,
            "parent_waits": sum(
                e.type == "job_waiting" for job in parents for e in ledger.events(job.id)
            ),
        }
        checks = [
            ("children submitted per parent slot = 1", set(per_slot) <= {1}),
            ("signals applied twice = 0", twice == 0),
            ("parents lost = 0", lost == 0),
        ]
        return values, checks

    def child_ids(self, ledger: tenure.Ledger) -> list[str]:
        return [child.id for job_id in self.ids for child in ledger.children(job_id)]
