"""The storage boundary: a driver error becomes one of tenure's, classified the same way on
both backends. An outage is `StoreUnavailable`; a constraint violation or a statement the
database cannot run is a `StoreRejected`, never an outage and never `OwnershipUnknown`."""

from __future__ import annotations

import pytest

import tenure
from tenure.errors import StoreBug, StoreConflict, StoreRejected
from tenure.ledger import lease_port
from tests.support.databases import execute_sql


def test_a_constraint_violation_is_a_conflict_not_an_outage(
    ledger: tenure.Ledger, db_url: str
) -> None:
    """A unique index added by hand makes a second submit a `StoreConflict`; nothing is written."""
    ledger.submit("only-one", {})
    execute_sql(db_url, "CREATE UNIQUE INDEX tenure_test_one_per_kind ON tenure_jobs (kind)")
    with pytest.raises(StoreConflict) as caught:
        ledger.submit("only-one", {"second": True})
    assert not isinstance(caught.value, tenure.StoreUnavailable)
    assert len(ledger.list(kind="only-one")) == 1


def test_a_statement_the_database_cannot_run_is_a_bug_not_ownership_unknown(
    ledger: tenure.Ledger, db_url: str
) -> None:
    """With a table dropped by hand, a lease write raises `StoreBug`, not `OwnershipUnknown`."""
    ledger.submit("k", {})
    lease = ledger.claim("w", kinds=["k"], lease_seconds=30)
    assert lease is not None
    execute_sql(db_url, "DROP TABLE tenure_stages")
    with pytest.raises(StoreBug) as caught:
        lease_port(ledger).start_stage(lease, 0, "render", tenure.StageKind.STEP)
    assert isinstance(caught.value, StoreRejected)
    assert not isinstance(caught.value, tenure.StoreUnavailable)
    # The database answered, so ownership is known: the lease still holds.
    ledger.complete(lease, {"ok": True})
    assert ledger.get(lease.job_id).state is tenure.JobState.SUCCEEDED


def test_an_unreachable_sqlite_file_is_an_outage(tmp_path: object) -> None:
    """A file that is not a database reads as `StoreUnavailable` (unusable), as before."""
    from pathlib import Path

    path = Path(str(tmp_path)) / "not-a-db.db"
    path.write_bytes(b"this is not a SQLite database" * 100)
    with pytest.raises(tenure.StoreUnavailable, match="unusable"):
        tenure.connect(f"sqlite:///{path}")
