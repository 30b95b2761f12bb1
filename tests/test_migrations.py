"""Schema migrations: numbered in lockstep across dialects, applied once under a lock."""

from __future__ import annotations

import pytest

import tenure
from tenure.storage.migrate import load_migrations
from tests.support.processes import release_together, worker

DIALECTS = ["tenure.storage.sqlite", "tenure.storage.postgres"]


def test_dialects_define_the_same_migrations() -> None:
    """Both dialects have the same migration numbers and names."""
    sqlite, postgres = (load_migrations(d) for d in DIALECTS)
    assert [(m.version, m.name) for m in sqlite] == [(m.version, m.name) for m in postgres]
    assert [m.version for m in sqlite] == list(range(1, len(sqlite) + 1))


def test_migrate_is_idempotent(db_url: str) -> None:
    """migrate() applies every version once; later connects and migrate() apply nothing."""
    with tenure.connect(db_url, migrate=False) as ledger:
        assert ledger.migrate() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
        assert ledger.migrate() == []
    with tenure.connect(db_url) as ledger:
        assert ledger.migrate() == []
        ledger.submit("k", {})


@pytest.mark.slow
def test_ten_workers_starting_at_once_migrate_once(db_url: str) -> None:
    """Ten processes released together: exactly one applies the migration, none fails."""
    procs = [worker("migrate", db_url) for _ in range(10)]
    applied = [report["applied"] for report in release_together(procs)]
    assert sorted(applied, key=len) == [[]] * 9 + [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
    with tenure.connect(db_url) as ledger:
        ledger.submit("k", {})
        assert len(ledger.list()) == 1
