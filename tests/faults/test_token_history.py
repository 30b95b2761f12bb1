"""Invariants 16 and 17 where the database loses part of its history: a base backup started as
it is, a second promotion on a member that never saw the first's timeline, a restore with
`recovery.signal` from an empty archive, a logical dump loaded into a new cluster, a SQLite file
copied back. Each runs real servers (initdb, pg_basebackup, pg_ctl, pg_dump, pg_restore) and
tracks every token handed out and every command a receiver accepted outside the databases that
forget them (the receiver's own database is never restored): no claim or cancel gets a token at
or below one handed out before for its job, and the receiver accepts no token from two claims.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections import defaultdict
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.fence import FenceGuard
from tenure.testing.pair import Node, ReplicaPair
from tests.support.pairs import started_pair
from tests.support.waiting import poll

LEASE = 60.0
# A token a JSON number carries exactly in every language (design.md, invariant 16).
JSON_EXACT = 2**53
CLEAN: dict[str, Any] = {
    "tokens not above an earlier one of the job": [],
    "tokens the receiver accepted from two claims": {},
    "late commands the receiver accepted": [],
    "tokens at or above 2^53": [],
}


@dataclass
class History:
    """Every token handed out for each job and every command the receiver ran, kept outside
    every database that may lose them (as `tenure chaos` keeps its claims log)."""

    guard: FenceGuard
    handed: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    not_above: list[tuple[str, int, int]] = field(default_factory=list)
    accepted: dict[tuple[str, int], set[str]] = field(default_factory=lambda: defaultdict(set))
    late_accepted: list[tuple[str, int]] = field(default_factory=list)
    sent: int = 0

    def claim(self, ledger: tenure.Ledger, owner: str, kind: str) -> tenure.Lease:
        """`owner` claims the job of `kind` (once the server answers writes), and sends it a
        command, as a worker's first effect would."""

        def attempt() -> tenure.Lease | None:
            try:
                return ledger.claim(owner, kinds=[kind], lease_seconds=LEASE)
            except tenure.StoreUnavailable:
                return None

        lease = poll(attempt, 60, f"{owner}'s claim of a {kind} job")
        self._handed(owner, lease.job_id, lease.token)
        self.send(lease)
        return lease

    def cancel(self, ledger: tenure.Ledger, job_id: str) -> None:
        """An operator cancels the job: the cancel's token counts as handed out too."""
        ledger.cancel(job_id)
        self._handed("cancel", job_id, ledger.get(job_id).token)

    def send(self, lease: tenure.Lease) -> bool:
        """The holder of `lease` sends the receiver a new command: True if it ran."""
        self.sent += 1

        def run() -> int:
            self.accepted[(lease.job_id, lease.token)].add(lease.claim)
            return lease.token

        try:
            self.guard.apply(lease.job_id, lease.token, f"cmd-{self.sent}", run, claim=lease.claim)
        except tenure.StaleFence:
            return False
        return True

    def late(self, lease: tenure.Lease) -> None:
        """A holder whose job has been claimed since (on the restored server) still sends: the
        receiver must refuse it."""
        if self.send(lease):
            self.late_accepted.append((lease.job_id, lease.token))

    def verdict(self) -> dict[str, Any]:
        twice = {
            f"{job}:{token}": len(c) for (job, token), c in self.accepted.items() if len(c) > 1
        }
        return {
            "tokens not above an earlier one of the job": self.not_above,
            "tokens the receiver accepted from two claims": twice,
            "late commands the receiver accepted": self.late_accepted,
            "tokens at or above 2^53": [
                t for tokens in self.handed.values() for t in tokens if t >= JSON_EXACT
            ],
        }

    def _handed(self, who: str, job_id: str, token: int) -> None:
        earlier = self.handed[job_id]
        if earlier and token <= max(earlier):
            self.not_above.append((who, token, max(earlier)))
        earlier.append(token)


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    """The receiver: a `FenceGuard` on a SQLite file of its own, never restored."""
    guard = FenceGuard(f"sqlite:///{tmp_path / 'receiver.db'}")
    yield History(guard)
    guard.close()


@pytest.fixture
def lone() -> Iterator[ReplicaPair]:
    with started_pair(standbys=0) as started:
        yield started


@pytest.fixture
def pair() -> Iterator[ReplicaPair]:
    with started_pair(standbys=1) as started:
        yield started


@pytest.fixture
def trio() -> Iterator[ReplicaPair]:
    with started_pair(standbys=2) as started:
        yield started


def connect(
    servers: ReplicaPair, node: Node | None = None, dbname: str = "postgres"
) -> tenure.Ledger:
    """A ledger on one server of the cluster (the primary by default)."""
    return tenure.connect(servers.node_url(node or servers.primary, dbname), timeout=2.0)


@pytest.mark.failover
@pytest.mark.postgres
@pytest.mark.slow
def test_a_base_backup_started_as_it_is_hands_out_no_token_again(
    lone: ReplicaPair, history: History
) -> None:
    """A base backup taken early is started as it is (crash recovery from its backup_label,
    the old timeline) while a holder from after the backup still lives: the restored server's
    claims and cancels are above every token handed out after the backup, and the receiver
    refuses the old holder's next command (its renewal there is a lost lease)."""
    with connect(lone) as ledger:
        job = ledger.submit("j", {})
        other = ledger.submit("o", {})
        ledger.release(history.claim(ledger, "W1", "j"))
        backup = lone.base_backup()
        ledger.release(history.claim(ledger, "W2", "j"))
        w3 = history.claim(ledger, "W3", "j")
        history.claim(ledger, "W4", "o")
    lone.kill_primary()
    restored = lone.restore(backup)
    assert lone.timeline() == 1, "started as it is, the backup stays on its timeline"
    with connect(lone, restored) as ledger:
        ledger.release(history.claim(ledger, "W5", "j"))
        history.claim(ledger, "W6", "j")
        history.late(w3)
        history.cancel(ledger, other)
        assert ledger.get(job).owner_id == "W6"
        with pytest.raises(tenure.LeaseLost):
            ledger.extend(w3)  # the old holder's renewal reaches the restored server
    assert history.verdict() == CLEAN


@pytest.mark.failover
@pytest.mark.postgres
@pytest.mark.slow
def test_a_second_promotion_without_the_first_ones_history_hands_out_no_token_again(
    trio: ReplicaPair, history: History
) -> None:
    """P, S1, S2: S2 is cut off, P dies, S1 is promoted (timeline 2) and claims, S1 dies, and
    S2, which never saw timeline 2, is promoted (and picks timeline 2 again): its claims are
    above S1's, and the receiver refuses S1's holder."""
    _, s1, s2 = trio.nodes
    with connect(trio) as ledger:
        ledger.submit("j", {})
        ledger.release(history.claim(ledger, "W1", "j"))
        trio.wait_replayed(node=s1)
        trio.wait_replayed(node=s2)
    trio.cut_replication(s2)
    trio.kill_primary()
    trio.promote(s1)
    assert trio.timeline() == 2
    with connect(trio, s1) as ledger:
        ledger.release(history.claim(ledger, "W2", "j"))
        w3 = history.claim(ledger, "W3", "j")
    trio.kill(s1)
    trio.promote(s2)
    assert trio.timeline() == 2, "S2 never saw timeline 2's history file and picks it again"
    with connect(trio, s2) as ledger:
        ledger.release(history.claim(ledger, "W4", "j"))
        history.claim(ledger, "W5", "j")
        history.late(w3)
    assert history.verdict() == CLEAN


@pytest.mark.failover
@pytest.mark.postgres
@pytest.mark.slow
def test_a_restore_from_an_empty_archive_hands_out_no_token_again(
    pair: ReplicaPair, history: History
) -> None:
    """A base backup taken on timeline 1 is restored with recovery.signal and an empty WAL
    archive after the standby was promoted to timeline 2 and claimed: the restore picks
    timeline 2 again, and its claims are above the promoted standby's."""
    with connect(pair) as ledger:
        ledger.submit("j", {})
        ledger.release(history.claim(ledger, "W1", "j"))
        backup = pair.base_backup()
        pair.wait_replayed()
    pair.kill_primary()
    promoted = pair.promote()
    with connect(pair, promoted) as ledger:
        ledger.release(history.claim(ledger, "W2", "j"))
        w3 = history.claim(ledger, "W3", "j")
    pair.kill(promoted)
    restored = pair.restore(backup, recovery=True)
    assert pair.timeline() == 2, "without the history file the restore picks timeline 2 again"
    with connect(pair, restored) as ledger:
        ledger.release(history.claim(ledger, "W4", "j"))
        history.claim(ledger, "W5", "j")
        history.late(w3)
    assert history.verdict() == CLEAN


@pytest.mark.failover
@pytest.mark.postgres
@pytest.mark.slow
def test_a_logical_dump_loaded_into_a_new_cluster_hands_out_no_token_again(
    lone: ReplicaPair, history: History
) -> None:
    """pg_dump of the database, more claims on the source, then pg_restore into a new cluster
    (timeline 1, counting from the dump's values): its claims and cancels are above every token
    the source handed out after the dump."""
    lone.sql(lone.primary, "CREATE DATABASE jobs")
    with connect(lone, dbname="jobs") as ledger:
        ledger.submit("j", {})
        other = ledger.submit("o", {})
        ledger.release(history.claim(ledger, "W1", "j"))
        dump = lone.dump("jobs")
        ledger.release(history.claim(ledger, "W2", "j"))
        w3 = history.claim(ledger, "W3", "j")
        history.claim(ledger, "W4", "o")
    with started_pair(standbys=0, tools=("pg_dump", "pg_restore")) as new:
        new.load(dump)
        with connect(new, dbname="jobs") as ledger:
            ledger.release(history.claim(ledger, "W5", "j"))
            history.claim(ledger, "W6", "j")
            history.late(w3)
            history.cancel(ledger, other)
    assert history.verdict() == CLEAN


def test_a_sqlite_file_copied_back_hands_out_no_token_again(
    tmp_path: Path, history: History
) -> None:
    """A copy of the SQLite file is taken, more claims follow, and the copy is put back: the
    claims and cancels on it are above every token handed out after the copy."""
    path = tmp_path / "tenure.db"
    copy = tmp_path / "copy.db"
    with tenure.connect(f"sqlite:///{path}") as ledger:
        ledger.submit("j", {})
        other = ledger.submit("o", {})
        ledger.release(history.claim(ledger, "W1", "j"))
        with closing(sqlite3.connect(path)) as source, closing(sqlite3.connect(copy)) as target:
            source.backup(target)
        ledger.release(history.claim(ledger, "W2", "j"))
        w3 = history.claim(ledger, "W3", "j")
        history.claim(ledger, "W4", "o")
    for leftover in tmp_path.glob("tenure.db*"):
        leftover.unlink()
    shutil.copyfile(copy, path)
    with tenure.connect(f"sqlite:///{path}") as ledger:
        ledger.release(history.claim(ledger, "W5", "j"))
        history.claim(ledger, "W6", "j")
        history.late(w3)
        history.cancel(ledger, other)
    assert history.verdict() == CLEAN
