"""A child's id is derived from its tenant and key, so a spawn that an asynchronous failover lost
is spawned again under the same id: its effect keeps its key and fence scope, and a receiver
that ran it answers the second holder from its record instead of running it twice (the model's
`child_ids` configuration; `bug_child_ids` is what a fresh id did)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tenure
from tenure.fence import FenceGuard
from tenure.ledger import lease_port
from tenure.ledger.submission import child_id
from tenure.runtime.context import effect_key
from tests.support.pairs import claim_when_promoted, started_pair


def test_a_childs_id_is_the_same_for_its_tenant_and_key(ledger: tenure.Ledger) -> None:
    parent_id = ledger.submit("p", {}, tenant="acme")
    parent = ledger.claim("w", kinds=["p"], lease_seconds=30)
    assert parent is not None and parent.job_id == parent_id
    child, new = lease_port(ledger).spawn(parent, "charge", "c", {"n": 1})
    again, repeated = lease_port(ledger).spawn(parent, "charge", "c", {"n": 1})
    other, _ = lease_port(ledger).spawn(parent, "notify", "c", {"n": 1})
    assert (new, repeated, again) == (True, False, child)
    assert child == child_id("acme", f"tenure-child:{parent_id}:charge") != other
    assert child_id("globex", f"tenure-child:{parent_id}:charge") != child
    assert ledger.get(child).parent_id == parent_id


@pytest.mark.failover
@pytest.mark.postgres
@pytest.mark.slow
def test_a_spawn_lost_in_a_failover_does_not_run_its_effect_twice(tmp_path: Path) -> None:
    """The parent's claim replicates; its child's insert and the child's effect happen on the
    old primary only; after the promotion the parent's next attempt spawns the child again and
    the child's effect reaches the receiver under the same key: answered from its record."""
    runs: list[int] = []
    receiver = FenceGuard(f"sqlite:///{tmp_path / 'receiver.db'}")
    with started_pair(synchronous=False) as pair, tenure.connect(pair.url(), timeout=2.0) as ledger:
        ledger.submit("p", {})
        first = ledger.claim("W1", kinds=["p"], lease_seconds=0.5)
        assert first is not None
        pair.wait_replayed()
        pair.cut_replication()
        child, new = lease_port(ledger).spawn(first, "charge", "c", {})
        assert new
        held = ledger.claim("W2", kinds=["c"], lease_seconds=60)
        assert held is not None and held.job_id == child
        key = effect_key(child, "charge")
        receiver.apply(child, held.token, key, lambda: runs.append(held.token) or "paid")

        pair.kill_primary()
        pair.promote()

        second = claim_when_promoted(ledger, "W3", "p")
        with pytest.raises(tenure.JobNotFound):
            ledger.get(child)  # the failover lost the child's insert
        respawned, new = lease_port(ledger).spawn(second, "charge", "c", {})
        assert (respawned, new) == (child, True)
        rerun = ledger.claim("W4", kinds=["c"], lease_seconds=60)
        assert rerun is not None and rerun.job_id == child and rerun.token > held.token
        answer = receiver.apply(
            child, rerun.token, effect_key(rerun.job_id, "charge"), lambda: runs.append(0)
        )
    receiver.close()
    assert (answer, runs) == ("paid", [held.token])
