"""A job's life as lanes (`tenure.timeline`), read from real SQLite and PostgreSQL events: the
leases driven by hand through the ledger's lease protocol, as a worker drives them."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

import tenure
from tenure.errors import LeaseLost
from tenure.ledger import lease_port
from tenure.runtree import read_tree
from tenure.service.lives import RunTreeOut, TimelineOut
from tenure.timeline import LaneEnd, SpanStatus, read_timeline
from tenure.types import EventType, Lease, StageKind
from tenure.wait_state import WaitFor
from tenure.waits import WaitRequest
from tests.support.waiting import poll, until_db_time_passes

CONTENT = "PAYLOAD-INVOICE-7731"  # content: must never appear in a timeline


def _claim(ledger: tenure.Ledger, owner: str, seconds: float) -> Lease:
    lease = ledger.claim(owner, kinds=["invoice"], lease_seconds=seconds)
    assert lease is not None
    return lease


def _after_claim(ledger: tenure.Ledger, lease: Lease) -> None:
    """Until the database's clock has moved past the claim: a renewal then is a later moment
    (SQLite's clock counts milliseconds)."""
    poll(lambda: ledger.now() > lease.claimed_at, 10, "the database clock to move")


def _reclaimed_story(ledger: tenure.Ledger) -> tuple[str, Lease, Lease, datetime]:
    """The seed's story by hand: w1 prices, starts the charge, renews once, goes silent; w2
    takes over, finds the charge in doubt, finishes; w1's late result is rejected."""
    job_id = ledger.submit("invoice", {"invoice": CONTENT}, max_attempts=3)
    first = _claim(ledger, "w1", 0.5)
    lease_port(ledger).start_stage(first, 0, "price", StageKind.STEP, in_doubt=False)
    lease_port(ledger).finish_stage(first, 0, {"cents": 12900, "note": CONTENT})
    lease_port(ledger).start_stage(
        first, 1, "charge", StageKind.EFFECT, effect_key=f"{job_id}:charge"
    )
    _after_claim(ledger, first)
    renewed_until = ledger.extend(first, 0.5)
    until_db_time_passes(ledger, renewed_until)
    second = _claim(ledger, "w2", 30)
    lease_port(ledger).record(
        second,
        EventType.STEP_IN_DOUBT,
        position=1,
        name="charge",
        kind="effect",
        started_token=first.token,
    )
    key = f"{job_id}:charge"
    lease_port(ledger).start_stage(
        second, 1, "charge", StageKind.EFFECT, effect_key=key, in_doubt=True
    )
    lease_port(ledger).finish_stage(second, 1, {"payment": CONTENT})
    ledger.complete(second, {"paid": CONTENT})
    with pytest.raises(LeaseLost):
        ledger.complete(first, {"paid": "twice"})
    return job_id, first, second, renewed_until


def test_a_reclaimed_job_draws_a_lane_per_claim(ledger: tenure.Ledger) -> None:
    job_id, first, second, renewed_until = _reclaimed_story(ledger)
    timeline = read_timeline(ledger, job_id)

    assert [(lane.token, lane.owner, lane.attempt) for lane in timeline.lanes] == [
        (first.token, "w1", 1),
        (second.token, "w2", 2),
    ]
    lost, kept = timeline.lanes
    # The first lease ended when its renewed lease ran out, by the database's clock; its one
    # renewal is the last heartbeat the database kept, and it was last heard from then.
    assert lost.ended_by is LaneEnd.EXPIRED
    assert lost.ended_at == renewed_until
    assert len(lost.renewals) == 1
    assert first.claimed_at < lost.renewals[0] < renewed_until
    assert lost.last_heard_at == lost.renewals[0]
    assert [(s.name, s.status) for s in lost.stages] == [
        ("price", SpanStatus.DONE),
        ("charge", SpanStatus.IN_DOUBT),
    ]
    assert [(e.name, e.fence, e.status) for e in lost.effects] == [
        ("charge", first.token, SpanStatus.IN_DOUBT)
    ]
    assert lost.effects[0].key == f"{job_id}:charge"
    assert [m.type for m in lost.marks] == [EventType.RESULT_REJECTED]
    assert kept.ended_at is not None and lost.marks[0].at >= kept.ended_at

    assert kept.ended_by is LaneEnd.SUCCEEDED
    assert kept.claimed_at >= renewed_until
    [charge] = kept.stages
    assert (charge.name, charge.status, charge.in_doubt_from) == (
        "charge",
        SpanStatus.DONE,
        first.token,
    )
    assert kept.effects[0].in_doubt and kept.effects[0].fence == second.token
    assert [m.type for m in kept.marks] == [EventType.STEP_IN_DOUBT]
    assert [m.type for m in timeline.marks] == [EventType.JOB_SUBMITTED]
    assert timeline.rules == []  # no failover here


def test_the_json_is_the_documented_shape_without_content(ledger: tenure.Ledger) -> None:
    job_id, first, _, _ = _reclaimed_story(ledger)
    drawn = read_timeline(ledger, job_id).to_dict()
    text = json.dumps(drawn)
    assert CONTENT not in text
    served = TimelineOut.model_validate(drawn).model_dump(mode="json", by_alias=True)
    assert set(served) == {"job", "now", "start", "end", "lanes", "waits", "rules", "marks"}
    lane = served["lanes"][0]
    assert {"token", "owner", "claimed_at", "ended_at", "ended_by", "renewals", "stages"} <= set(
        lane
    )
    assert {"effects", "marks"} <= set(lane)
    assert (lane["token"], lane["ended_by"]) == (first.token, "expired")
    assert served["start"] <= lane["claimed_at"] <= served["end"]


def test_events_say_which_timeline_wrote_them(ledger: tenure.Ledger, backend: str) -> None:
    """PostgreSQL stamps each event with its WAL timeline (a failover changes it); SQLite has
    none to stamp."""
    job_id = ledger.submit("invoice", {})
    _claim(ledger, "w1", 30)
    timelines = {event.timeline for event in ledger.events(job_id)}
    if backend == "postgres":
        [only] = timelines
        assert isinstance(only, int) and only >= 1
    else:
        assert timelines == {None}


def test_a_wait_is_a_gap_between_lanes_and_a_cancel_ends_the_lane(ledger: tenure.Ledger) -> None:
    job_id = ledger.submit("invoice", {})
    before = _claim(ledger, "w1", 30)
    request = WaitRequest(0, "signal:approval", WaitFor.SIGNAL, signals=("approval",))
    assert lease_port(ledger).wait_on(before, request).suspended
    ledger.signal(job_id, "approval", {"ok": True})
    after = _claim(ledger, "w2", 30)
    ledger.cancel(job_id)

    timeline = read_timeline(ledger, job_id)
    waiting, cancelled = timeline.lanes
    assert (waiting.token, waiting.ended_by) == (before.token, LaneEnd.WAITING)
    assert (cancelled.token, cancelled.ended_by) == (after.token, LaneEnd.CANCELLED)
    [wait] = timeline.waits
    assert (wait.waited_for, wait.name, wait.position) == ("signal", "approval", 0)
    assert waiting.ended_at == wait.started_at
    assert wait.ended_at == cancelled.claimed_at
    types = [m.type for m in timeline.marks]
    assert types == [EventType.JOB_SUBMITTED, EventType.SIGNAL_RECEIVED, EventType.JOB_CANCELLED]


def test_a_held_lease_is_running_with_its_last_heartbeat(ledger: tenure.Ledger) -> None:
    job_id = ledger.submit("invoice", {})
    lease = _claim(ledger, "w1", 30)
    _after_claim(ledger, lease)
    until = ledger.extend(lease, 30)
    [lane] = read_timeline(ledger, job_id).lanes
    assert (lane.ended_by, lane.ended_at, lane.lease_until) == (LaneEnd.RUNNING, None, until)
    assert len(lane.renewals) == 1 and lane.claimed_at < lane.renewals[0] < until


def _spawn(ledger: tenure.Ledger, parent: Lease, name: str, kind: str) -> str:
    child, new = lease_port(ledger).spawn(
        parent, name, kind, {"q": CONTENT}, principal="user:42/search"
    )
    assert new
    return child


def test_a_run_tree_of_three_levels_from_any_of_its_jobs(ledger: tenure.Ledger) -> None:
    root = ledger.submit("research", {}, principal="user:42")
    parent = ledger.claim("w", kinds=["research"], lease_seconds=30)
    assert parent is not None
    child = _spawn(ledger, parent, "first", "search")
    sibling = _spawn(ledger, parent, "second", "search")
    held = ledger.claim("w", kinds=["search"], lease_seconds=30)
    assert held is not None and held.job_id == child
    grandchild = _spawn(ledger, held, "deeper", "fetch")
    ledger.operations.report_cost(child, 1, 1200, 0.01)

    for asked in (root, grandchild):
        tree = read_tree(ledger, asked)
        assert (tree.root.job.id, tree.focus, tree.truncated) == (root, asked, False)
        shown = tree.to_dict()
        assert [c["id"] for c in shown["root"]["children"]] == [child, sibling]
        first = shown["root"]["children"][0]
        assert first["cost"] == {"tokens": 1200, "usd": 0.01}
        assert first["principal"] == "user:42/search"
        assert [g["id"] for g in first["children"]] == [grandchild]
        assert shown["root"]["children"][1]["cost"] is None
        assert CONTENT not in json.dumps(shown)
        RunTreeOut.model_validate(shown)

    cut = read_tree(ledger, root, max_depth=1)
    assert cut.truncated and [c.job.id for c in cut.root.children] == [child, sibling]
    assert all(c.children == [] for c in cut.root.children)


def _walk(node: dict[str, Any]) -> list[str]:
    return [node["id"], *(i for c in node["children"] for i in _walk(c))]


def test_a_tree_shows_only_what_the_caller_may_see(ledger: tenure.Ledger) -> None:
    root = ledger.submit("research", {}, tenant="acme")
    parent = ledger.claim("w", kinds=["research"], lease_seconds=30)
    assert parent is not None
    child = _spawn(ledger, parent, "first", "search")
    tree = read_tree(ledger, child, visible=lambda job: job.tenant == "acme")
    assert _walk(tree.to_dict()["root"]) == [root, child]
    hidden = read_tree(ledger, child, visible=lambda job: job.id == child)
    assert _walk(hidden.to_dict()["root"]) == [child]


def test_a_last_attempt_expiry_ends_where_the_renewed_lease_ran_out(ledger: tenure.Ledger) -> None:
    """Its `lease_expired` comes from the claim that fails the job: on SQLite it cannot say
    the lost lease's end, which the timeline then takes from the last heartbeat."""
    job_id = ledger.submit("invoice", {}, max_attempts=1)
    lease = _claim(ledger, "w1", 0.3)
    _after_claim(ledger, lease)
    renewed_until = ledger.extend(lease, 0.3)
    until_db_time_passes(ledger, renewed_until)
    assert ledger.claim("w2", kinds=["invoice"], lease_seconds=30) is None  # fails the job
    [lane] = read_timeline(ledger, job_id).lanes
    assert lane.ended_by is LaneEnd.EXPIRED and lane.ended_at is not None
    assert abs((lane.ended_at - renewed_until).total_seconds()) < 0.001
    assert lane.last_heard_at == lane.renewals[0] < lane.ended_at


def test_an_expired_lease_no_claim_took_is_expired_not_running(ledger: tenure.Ledger) -> None:
    job_id = ledger.submit("invoice", {})
    lease = _claim(ledger, "w1", 0.2)
    until_db_time_passes(ledger, lease.lease_until)
    [lane] = read_timeline(ledger, job_id).lanes
    assert (lane.ended_by, lane.ended_at) == (LaneEnd.EXPIRED, lease.lease_until)


def test_a_cancel_while_waiting_ends_no_lane_but_the_wait(ledger: tenure.Ledger) -> None:
    job_id = ledger.submit("invoice", {})
    lease = _claim(ledger, "w1", 30)
    request = WaitRequest(0, "signal:approval", WaitFor.SIGNAL, signals=("approval",))
    assert lease_port(ledger).wait_on(lease, request).suspended
    ledger.cancel(job_id)
    timeline = read_timeline(ledger, job_id)
    [lane] = timeline.lanes
    assert lane.ended_by is LaneEnd.WAITING
    [wait] = timeline.waits
    # The cancel closed the wait (SQLite's clock may put both in one millisecond).
    assert wait.ended_at is not None and wait.ended_at >= wait.started_at


def test_an_effect_whose_outcome_is_unknown_or_refused_says_so(ledger: tenure.Ledger) -> None:
    job_id = ledger.submit("invoice", {})
    lease = _claim(ledger, "w1", 30)
    for position, name in enumerate(("charge", "notify")):
        key = f"{job_id}:{name}"
        lease_port(ledger).start_stage(lease, position, name, StageKind.EFFECT, effect_key=key)
    lease_port(ledger).record(
        lease, EventType.TOOL_OUTCOME_UNKNOWN, effect="charge", cause="stage_timeout"
    )
    lease_port(ledger).record(
        lease, EventType.EFFECT_REFUSED, name="notify", position=1, code="stale_fence"
    )
    [lane] = read_timeline(ledger, job_id).lanes
    assert lane.ended_by is LaneEnd.RUNNING
    assert [(s.name, s.status) for s in lane.stages] == [
        ("charge", SpanStatus.IN_DOUBT),
        ("notify", SpanStatus.REFUSED),
    ]
