"""What `tenure chaos` may inject where: a fault outside a backend's contract is reported as
not applicable instead of being counted as a failure of tenure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tenure.chaos.harness import Harness, Options


@pytest.fixture
def sqlite_harness() -> Iterator[Harness]:
    harness = Harness(Options(db=None, faults=("kill", "pause", "partition", "restart", "skew")))
    yield harness
    harness.receiver.close()
    harness.guard.close()


def test_faults_outside_sqlites_contract_are_not_applicable(sqlite_harness: Harness) -> None:
    """On SQLite: no partition (a file), no restart (it stays), and no clock skew: SQLite's
    clock is each process's reading of the machine's clock, so one skewed process would write
    leases ending hours away (design.md gives the skew guarantee to PostgreSQL)."""
    assert sqlite_harness._applicable("kill") is None
    assert sqlite_harness._applicable("pause") is None
    for kind in ("partition", "restart", "skew"):
        assert sqlite_harness._applicable(kind), kind
    assert "PostgreSQL" in str(sqlite_harness._applicable("skew"))
    assert sqlite_harness.shim is None
