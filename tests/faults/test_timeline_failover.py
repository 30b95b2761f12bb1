"""A job's timeline across a real failover (`pg_basebackup -R`, SIGKILL, `pg_ctl promote`): the
WAL timeline each event records changes, and the timeline draws the failover as a rule; a claim
the promoted standby never saw is drawn from what its holder wrote afterwards."""

from __future__ import annotations

import pytest

import tenure
from tenure.timeline import LaneEnd, read_timeline
from tenure.types import EventType
from tests.support.pairs import claim_when_promoted, started_pair
from tests.support.waiting import until_db_time_passes

pytestmark = [pytest.mark.failover, pytest.mark.postgres, pytest.mark.slow]


def test_a_failover_is_a_rule_and_a_lost_claim_a_lane_of_its_own() -> None:
    """W1's claim replicates; W2's dies with the old primary; W3 claims on the promoted
    standby; W2's late renewal and result are rejected there."""
    with started_pair(synchronous=False) as pair, tenure.connect(pair.url(), timeout=2.0) as ledger:
        job = ledger.submit("k", {})
        w1 = ledger.claim("W1", kinds=["k"], lease_seconds=0.3)
        assert w1 is not None
        pair.wait_replayed()
        pair.cut_replication()
        until_db_time_passes(ledger, w1.lease_until)
        w2 = ledger.claim("W2", kinds=["k"], lease_seconds=60)
        assert w2 is not None and w2.job_id == job
        before = pair.timeline()

        pair.kill_primary()
        pair.promote()

        w3 = claim_when_promoted(ledger, "W3", "k")
        with pytest.raises(tenure.LeaseLost):
            ledger.complete(w2, {"by": "W2"})
        ledger.complete(w3, {"by": "W3"})

        timeline = read_timeline(ledger, job)
        after = pair.timeline()

    assert after == before + 1
    [rule] = timeline.rules
    assert (rule.from_timeline, rule.to_timeline) == (before, after)
    lanes = {lane.owner: lane for lane in timeline.lanes}
    assert [lane.owner for lane in timeline.lanes] == ["W1", "W2", "W3"]  # token order
    assert lanes["W1"].ended_by is LaneEnd.EXPIRED and lanes["W1"].timeline == before
    assert lanes["W3"].ended_by is LaneEnd.SUCCEEDED and lanes["W3"].timeline == after
    lost = lanes["W2"]
    assert (lost.token, lost.claim_seen, lost.ended_by) == (w2.token, False, LaneEnd.FAILOVER)
    assert EventType.RESULT_REJECTED in [m.type for m in lost.marks]
    assert rule.at <= lanes["W3"].claimed_at
    drawn = timeline.to_dict()
    assert drawn["rules"] == [
        {
            "kind": "failover",
            "at": rule.at.isoformat(),
            "from_timeline": before,
            "to_timeline": after,
        }
    ]
