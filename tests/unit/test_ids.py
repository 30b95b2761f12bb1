"""Job ids sort by the time they were made (UUID version 7), with 74 random bits."""

from __future__ import annotations

import uuid

from tenure.clock import SYSTEM_CLOCK
from tenure.ids import new_claim_id, new_job_id
from tenure.testing.clock import FakeClock


def test_a_job_id_is_a_version_7_uuid_of_its_clock_s_millisecond() -> None:
    clock = FakeClock(wall_start=1_800_000_000.0)
    clock.advance(0.0125)
    made = uuid.UUID(new_job_id(clock))
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert made.int >> 80 == 1_800_000_000_012
    before = int(SYSTEM_CLOCK.wall() * 1000)
    now = uuid.UUID(new_job_id()).int >> 80
    assert before <= now <= int(SYSTEM_CLOCK.wall() * 1000)


def test_ids_made_later_sort_later_and_never_repeat() -> None:
    clock = FakeClock()
    ids = []
    for _ in range(50):
        ids.append(new_job_id(clock))
        clock.advance(0.001)
    assert ids == sorted(ids)
    same_millisecond = {new_job_id(clock) for _ in range(100_000)}
    assert len(same_millisecond) == 100_000


def test_a_claim_id_is_128_random_bits_in_hex() -> None:
    claims = {new_claim_id() for _ in range(10_000)}
    assert len(claims) == 10_000
    assert all(len(claim) == 32 and int(claim, 16) >= 0 for claim in claims)
    assert all(claim == claim.lower() for claim in claims)
