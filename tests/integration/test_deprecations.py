"""The names the Ledger and the values answered before the faces and the one token name still
answer until 0.3: each warns once per use, at the caller's line, and gives what its new name
gives."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import tenure
from tenure.fence import Recorded
from tenure.ledger import lease_port
from tenure.ledger.face import _TO_OPERATIONS, _TO_PORT


def _old(thing: object, name: str) -> tuple[object, warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(thing, name)
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert caught[0].category is DeprecationWarning
    assert Path(caught[0].filename) == Path(__file__)  # the caller's line, not the shim's
    return value, caught[0]


def test_every_moved_ledger_name_warns_and_answers_from_its_new_place(tmp_path: Path) -> None:
    with tenure.connect(f"sqlite:///{tmp_path / 'jobs.db'}") as ledger:
        port = lease_port(ledger)
        for name in sorted(_TO_OPERATIONS):
            value, warning = _old(ledger, name)
            assert value == getattr(ledger.operations, name)
            assert f"ledger.operations.{name}" in str(warning.message)
        for name in sorted(_TO_PORT):
            value, warning = _old(ledger, name)
            assert value == getattr(port, name)
            assert "lease_port(ledger)" in str(warning.message)
        for name in ("store", "ended"):
            value, warning = _old(ledger, name)
            assert value is getattr(ledger, f"_{name}")
            assert "private" in str(warning.message)
        with pytest.raises(AttributeError, match="no_such_name"):
            ledger.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_the_old_token_names_warn_and_give_the_token(tmp_path: Path) -> None:
    with tenure.connect(f"sqlite:///{tmp_path / 'jobs.db'}") as ledger:
        job_id = ledger.submit("k", {})
        lease = ledger.claim("w", kinds=["k"], lease_seconds=30)
        assert lease is not None
        job = ledger.get(job_id)
        assert _old(job, "fencing_token")[0] == job.token == lease.token
    effect = tenure.Effect("charge", "key", 7, False, "job-1")
    assert _old(effect, "fence")[0] == 7
    refused = tenure.StaleFence("old", token=5, highest=9)
    assert _old(refused, "fence")[0] == 5
    assert _old(Recorded("done", None, 3), "fence")[0] == 3
    with pytest.warns(DeprecationWarning, match=r"StaleFence\(token=\)"):
        assert tenure.StaleFence("old", fence=4).token == 4
