"""Rate values and one key's arithmetic (GCRA), without a database."""

from __future__ import annotations

import math
from typing import Any

import pytest

import tenure
from tenure.rates import KeyClock, RateRule


@pytest.mark.parametrize(
    "args",
    [
        (0,),
        (-1,),
        (1.5,),
        (True,),
        (10**7,),
        (10, math.nan),
        (10, 0),
        (10, -1),
        (10, math.inf),
        (10, 10**6),
        (10, "1"),
        (10, 1.0, 0),
        (10, 1.0, 11),
    ],
)
def test_a_rate_out_of_bounds_is_refused(args: tuple[Any, ...]) -> None:
    with pytest.raises(tenure.InvalidArgument, match="Rate"):
        tenure.Rate(*args)


@pytest.mark.parametrize("seconds", [-1, math.nan, math.inf, "30", 10**6, None])
def test_a_bad_retry_after_is_refused(seconds: Any) -> None:
    with pytest.raises(tenure.InvalidArgument, match="retry_after"):
        tenure.RateLimited(retry_after=seconds)


def test_a_rate_spaces_its_claims_and_allows_its_burst() -> None:
    rate = tenure.Rate(10, per=1.0, burst=3)
    clock = KeyClock(tat=100.0, interval=rate.interval, tolerance=rate.tolerance)
    taken = [clock.take(100.0) for _ in range(5)]
    assert taken == [True, True, True, False, False]
    assert clock.next_at() == pytest.approx(100.1)
    assert clock.take(100.1) and not clock.take(100.1)


def test_over_any_span_a_key_gets_at_most_rate_times_span_plus_burst() -> None:
    rate = tenure.Rate(5, per=1.0, burst=2)
    clock = KeyClock(tat=0.0, interval=rate.interval, tolerance=rate.tolerance)
    times = [t / 100 for t in range(1000) for _ in range(3) if clock.take(t / 100)]
    for i, start in enumerate(times):
        within = [t for t in times[i:] if t - start <= 1.0]
        assert len(within) <= 5 * 1.0 + 2
    assert len(times) == pytest.approx(5 * 10 + 2, abs=1)


def test_a_failing_key_function_keys_the_job_by_a_shared_name() -> None:
    rule = RateRule(tenure.Rate(1), key_of=lambda payload: payload["account"])
    assert rule.key_for({"account": "a"}) == "a"
    assert rule.key_for({}) == "!invalid"
    assert RateRule(tenure.Rate(1), key_of=lambda payload: 5).key_for({}) == "!invalid"
