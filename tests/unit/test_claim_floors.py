"""Where a claimer's next plain claim starts: after a short claim, a floor for every priority;
after a full one, the position of the last job it took in the queue's order."""

from __future__ import annotations

from tenure.storage.base import ClaimRequest
from tenure.storage.postgres.claims import HEAD, ClaimFloors, Floor, claim_statement


def request(
    limit: int = 4, *, rescue: bool = False, owner: str = "w", shared: bool = False
) -> ClaimRequest:
    return ClaimRequest(
        owner_id=owner,
        kinds=["task"],
        lease_seconds=30.0,
        limit=limit,
        rescue=rescue,
        rescue_shared=shared,
    )


def test_a_short_claim_leaves_a_floor_for_every_priority() -> None:
    floors = ClaimFloors()
    floors.claimed(request(), 2, [(5, 10), (0, 3)])
    assert floors.floor(request()) == Floor(11)
    assert claim_statement(floors.floor(request())) == "exchange"


def test_a_full_claim_leaves_the_position_of_its_last_job() -> None:
    floors = ClaimFloors()
    floors.claimed(request(), 4, [(5, 40), (0, 3), (0, 7), (5, 2)])
    assert floors.floor(request()) == Floor(8, 0)
    assert claim_statement(floors.floor(request())) == "exchange_from_position"


def test_floors_of_every_priority_only_rise_and_a_position_replaces_them() -> None:
    floors = ClaimFloors()
    floors.claimed(request(), 1, [(0, 20)])
    floors.claimed(request(), 1, [(0, 9)])  # a claim that ran beside the first
    assert floors.floor(request()) == Floor(21)
    floors.claimed(request(), 4, [(0, 5), (0, 6), (0, 7), (0, 8)])
    assert floors.floor(request()) == Floor(9, 0)
    floors.claimed(request(), 2, [(0, 30)])
    assert floors.floor(request()) == Floor(31)


def test_a_claim_without_queued_jobs_keeps_the_floor_and_rescues_start_at_the_head() -> None:
    floors = ClaimFloors()
    floors.claimed(request(), 4, [(0, 5), (0, 6), (0, 7), (0, 8)])
    floors.claimed(request(), 4, [])  # four expired leases or waits, nothing from the queue
    assert floors.floor(request()) == Floor(9, 0)
    assert floors.floor(request(rescue=True)) == HEAD
    assert floors.floor(request(owner="v")) == HEAD
    assert claim_statement(HEAD) == "exchange_from_head"


def test_a_shared_rescue_passes_its_floor() -> None:
    """The statement reads from the head only if the shared rescue takes its turn."""
    floors = ClaimFloors()
    floors.claimed(request(), 1, [(0, 20)])
    assert floors.floor(request(rescue=True, shared=True)) == Floor(21)
    assert floors.floor(request(rescue=True)) == HEAD


def test_a_job_back_in_the_queue_sends_every_claimer_to_the_head() -> None:
    floors = ClaimFloors()
    floors.claimed(request(), 4, [(0, 5), (0, 6), (0, 7), (0, 8)])
    floors.claimed(request(owner="v"), 1, [(0, 9)])
    assert floors.requeued(False) is False
    assert floors.floor(request()) == Floor(9, 0)
    assert floors.requeued(True) is True
    assert floors.floor(request()) == HEAD
    assert floors.floor(request(owner="v")) == HEAD
