"""Schedules as values: slots of a cron in a time zone (DST included) and of an interval, what
a scheduler that was away fires, the slot's key, and bad input refused."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from tenure.errors import InvalidArgument
from tenure.schedules import ON_TIME, Every, Schedule, slot_key

pytest.importorskip("croniter")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_a_daily_cron_keeps_its_wall_clock_time_across_dst() -> None:
    nightly = Schedule("30 3 * * *", timezone="Europe/Berlin")
    slots = list(nightly.slots(at("2026-03-27T12:00:00+00:00"), at("2026-03-31T00:00:00+00:00")))
    # 03:30 CET is 02:30 UTC; from 29 March (CEST) it is 01:30 UTC.
    assert [s.isoformat() for s in slots] == [
        "2026-03-28T02:30:00+00:00",
        "2026-03-29T01:30:00+00:00",
        "2026-03-30T01:30:00+00:00",
    ]


def test_a_slot_in_the_skipped_hour_fires_once_after_it() -> None:
    nightly = Schedule("30 2 * * *", timezone="Europe/Berlin")
    slots = list(nightly.slots(at("2026-03-28T12:00:00+00:00"), at("2026-03-30T12:00:00+00:00")))
    assert len(slots) == 2 and slots[0] == at("2026-03-29T03:00:00+02:00")


def test_an_interval_is_anchored_to_the_epoch_so_every_process_agrees() -> None:
    every = Schedule(Every(300))
    slots = list(every.slots(at("2026-12-04T10:01:00+00:00"), at("2026-12-04T10:16:00+00:00")))
    assert slots == [at(f"2026-12-04T10:{m}:00+00:00") for m in ("05", "10", "15")]
    assert every.next_after(at("2026-12-04T10:15:00+00:00")) == at("2026-12-04T10:20:00+00:00")


@pytest.mark.parametrize(
    ("policy", "fired", "missed"),
    [("skip", ["10:05"], 4), ("once", ["10:05"], 4), ("all", ["10:03", "10:04", "10:05"], 2)],
)
def test_missed_slots_follow_the_policy(policy: str, fired: list[str], missed: int) -> None:
    minutely = Schedule(Every(60), missed_slots=policy, max_catch_up=2)
    due = minutely.due(at("2026-12-04T10:00:00+00:00"), at("2026-12-04T10:05:30+00:00"))
    assert [s.strftime("%H:%M") for s in due.fire] == fired
    assert due.missed == missed and due.through == at("2026-12-04T10:05:00+00:00")


def test_once_runs_the_latest_missed_slot_when_none_is_on_time() -> None:
    hourly = Schedule(Every(3600), missed_slots="once")
    due = hourly.due(at("2026-12-04T06:00:00+00:00"), at("2026-12-04T09:30:00+00:00"))
    assert due.fire == (at("2026-12-04T09:00:00+00:00"),) and due.missed == 2
    skipped = Schedule(Every(3600)).due(at("2026-12-04T06:00:00+00:00"), due.fire[0] + ON_TIME * 2)
    assert skipped.fire == () and skipped.missed == 3


def test_a_first_pass_fires_only_what_is_on_time() -> None:
    minutely = Schedule(Every(60))
    now = at("2026-12-04T10:05:30+00:00")
    due = minutely.due(None, now)
    assert due.fire == (at("2026-12-04T10:05:00+00:00"),) and due.missed == 0
    again = minutely.due(due.through, now + timedelta(seconds=10))
    assert again.fire == () and again.through == due.through


def test_a_slots_key_is_its_time_in_utc() -> None:
    slot = at("2026-12-04T03:00:00+05:00")
    assert slot_key("report", slot) == "schedule:report:2026-12-03T22:00:00Z"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"when": "61 * * * *"}, "not a cron expression"),
        ({"when": "* * * *\x00 *"}, "not a cron expression"),
        ({"when": "0 3 * * *", "timezone": "Europe/Astana"}, "no time zone 'Europe/Astana'"),
        ({"when": "0 3 * * *", "timezone": ""}, "IANA name"),
        ({"when": 60}, "cron expression or tenure.Every"),
        ({"when": "0 3 * * *", "missed_slots": "later"}, "missed_slots"),
        ({"when": "0 3 * * *", "max_catch_up": 0}, "max_catch_up"),
        ({"when": "0 3 * * *", "max_catch_up": True}, "max_catch_up"),
    ],
)
def test_bad_schedules_are_refused(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Schedule(**arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("seconds", [0, -5, 0.5, math.nan, math.inf, True, "60"])
def test_bad_intervals_are_refused(seconds: object) -> None:
    with pytest.raises(InvalidArgument, match="Every"):
        Every(seconds)  # type: ignore[arg-type]


def test_a_long_gap_of_an_interval_is_counted_without_walking_it() -> None:
    now = at("2026-12-04T12:00:00+00:00")
    week_ago = now - timedelta(days=7)
    skipped = Schedule(Every(1)).due(week_ago, now)
    assert len(skipped.fire) == 6 and skipped.missed == 7 * 86_400 - 6  # 0-5 s late: on time
    caught_up = Schedule(Every(1), missed_slots="all", max_catch_up=10).due(week_ago, now)
    assert caught_up.fire[0] == now - timedelta(seconds=15) and len(caught_up.fire) == 16
    assert caught_up.missed == 7 * 86_400 - 16 and caught_up.through == now


def test_a_leap_day_cron_has_no_next_slot_in_most_years_and_one_that_never_fires_is_refused() -> (
    None
):
    leap = Schedule("0 0 29 2 *")
    assert leap.next_after(at("2028-03-01T00:00:00+00:00")) is None
    assert leap.next_after(at("2027-03-01T00:00:00+00:00")) == at("2028-02-29T00:00:00+00:00")
    with pytest.raises(InvalidArgument, match="never fires"):
        Schedule("0 0 30 2 *")
    with pytest.raises(InvalidArgument, match="at most a year"):
        Every(1e12)


def test_jitter_delays_each_slot_by_its_own_share_the_same_everywhere() -> None:
    spread = Schedule(Every(3600), jitter=600)
    slots = list(spread.slots(at("2026-12-04T00:00:00+00:00"), at("2026-12-05T00:00:00+00:00")))
    starts = [spread.start_of(slot) for slot in slots]
    delays = [(start - slot).total_seconds() for start, slot in zip(starts, slots, strict=True)]
    assert all(0 <= d < 600 for d in delays) and len(set(delays)) == len(delays)
    assert starts == [Schedule(Every(3600), jitter=600).start_of(slot) for slot in slots]
    assert Schedule(Every(3600)).start_of(slots[0]) == slots[0]
    for bad in (-1, 3601, math.nan, "5"):
        with pytest.raises(InvalidArgument, match="jitter"):
            Schedule(Every(3600), jitter=bad)  # type: ignore[arg-type]
