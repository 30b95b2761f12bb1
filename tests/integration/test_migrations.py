"""Schema migrations: numbered in lockstep across dialects, applied once under a lock."""

from __future__ import annotations

import re

import pytest

import tenure
from tenure.fence import FenceGuard
from tenure.storage.migrate import load_migrations
from tests.support.databases import table_names
from tests.support.processes import release_together, worker

DIALECTS = ["tenure.storage.sqlite", "tenure.storage.postgres"]


def test_dialects_define_the_same_migrations() -> None:
    """Both dialects have the same migration numbers and names."""
    sqlite, postgres = (load_migrations(d) for d in DIALECTS)
    assert [(m.version, m.name) for m in sqlite] == [(m.version, m.name) for m in postgres]
    assert [m.version for m in sqlite] == list(range(1, len(sqlite) + 1))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_migration_keeps_to_its_track(dialect: str) -> None:
    """The fence receiver's migrations touch only its tables and the ledger's never touch them:
    so a receiver can apply its track alone, and the other later, in any order."""
    for migration in load_migrations(dialect):
        code = re.sub(r"--[^\n]*", "", migration.sql)
        tables = set(re.findall(r"\btenure_\w+", code))
        if migration.track == "fences":
            assert tables and all(t.startswith("tenure_fence_") for t in tables), migration
        else:
            assert not any(t.startswith("tenure_fence_") for t in tables), migration
    assert {m.version for m in load_migrations(dialect, only="fences")} == {2, 11, 14}


def test_a_fence_guard_creates_only_the_fence_tables(db_url: str) -> None:
    """A receiver's database gets the fence tables alone; a ledger on it later adds its own,
    and both work."""
    with FenceGuard(db_url) as guard:
        assert guard.apply("job-1", 1, "k1", lambda: "sent") == "sent"
    assert table_names(db_url) == {
        "tenure_schema_version",
        "tenure_fence_scopes",
        "tenure_fence_results",
    }
    with tenure.connect(db_url, migrate=False) as ledger:
        assert ledger.migrate() == [
            1,
            3,
            4,
            5,
            6,
            7,
            8,
            9,
            10,
            12,
            13,
            15,
            16,
            17,
            18,
            19,
            20,
            21,
            22,
        ]
        ledger.submit("k", {})
    assert "tenure_jobs" in table_names(db_url)
    with FenceGuard(db_url) as guard:
        assert guard.apply("job-1", 1, "k1", lambda: "again") == "sent"


def test_migrate_is_idempotent(db_url: str) -> None:
    """migrate() applies every version once; later connects and migrate() apply nothing."""
    with tenure.connect(db_url, migrate=False) as ledger:
        assert ledger.migrate() == list(range(1, 23))
        assert ledger.migrate() == []
    with tenure.connect(db_url) as ledger:
        assert ledger.migrate() == []
        ledger.submit("k", {})


@pytest.mark.slow
def test_ten_workers_starting_at_once_migrate_once(db_url: str) -> None:
    """Ten processes released together: exactly one applies the migration, none fails."""
    procs = [worker("migrate", db_url) for _ in range(10)]
    applied = [report["applied"] for report in release_together(procs)]
    assert sorted(applied, key=len) == [[]] * 9 + [list(range(1, 23))]
    with tenure.connect(db_url) as ledger:
        ledger.submit("k", {})
        assert len(ledger.list()) == 1
