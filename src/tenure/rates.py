"""Fleet-wide rate limits, as values: `Rate(n, per=seconds)` on a job class, the key its jobs
share (`rate_key=`: the kind, a fixed name, or a function of the payload), and the arithmetic
of one key's row (GCRA: a theoretical arrival time `tat`, epoch seconds by the database's
clock). The claim reads and writes the rows in its serialised transaction (`storage.limits`),
so every worker of the database shares them. Pure: no clock, no database."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tenure.errors import InvalidArgument, TenureError
from tenure.validation import check_number

MAX_RATE_KEY = 200
MAX_RETRY_AFTER = 86_400.0
# A period from 1 ms to a day; at most a million claims in it.
MIN_PER, MAX_PER, MAX_COUNT = 0.001, 86_400.0, 1_000_000


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` claims per `per` seconds for one key, across every worker of the
    database. `burst` claims may follow one another at once (default 1: evenly spaced, one
    every `per / count` seconds). Over any span of t seconds a key gets at most
    floor(count * t / per + 1/2) + burst claims: in one period, `count + burst`."""

    count: int
    per: float = 1.0
    burst: int = 1

    def __post_init__(self) -> None:
        count, burst = self.count, self.burst
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise InvalidArgument(f"Rate takes a count from 1 to {MAX_COUNT}, got {count!r}")
        check_number(self.per, "Rate's per (seconds, up to a day)", MIN_PER, MAX_PER)
        if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= count:
            raise InvalidArgument(f"Rate's burst is from 1 to its count ({count}), got {burst!r}")

    @property
    def interval(self) -> float:
        """Seconds between two claims of a key, on average."""
        return self.per / self.count

    @property
    def tolerance(self) -> float:
        """How far ahead of the clock a key's `tat` may be and still allow a claim."""
        return (self.burst - 1) * self.interval


class RateLimited(TenureError, code="rate_limited"):
    """Raised by a handler that met the provider's limit (an HTTP 429): the job goes back to
    the queue without spending an attempt, due again in `retry_after` seconds, and the whole
    rate key of its class (if the class has `rate=`) gets no claim before then, on any worker."""

    def __init__(self, retry_after: float = 1.0, message: str = "") -> None:
        what = "RateLimited's retry_after (seconds, up to a day)"
        seconds = check_number(retry_after, what, 0, MAX_RETRY_AFTER)
        super().__init__(message or f"rate limited; retry after {seconds:g} s")
        self.retry_after = seconds


def check_rate_key(value: Any) -> str:
    """A rate key: a printable name of at most `MAX_RATE_KEY` characters."""
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_RATE_KEY
        or not value.isprintable()
        or not value.encode("utf-8", "surrogatepass").decode("utf-8", "ignore") == value
    ):
        raise InvalidArgument(
            f"a rate key is a printable name of 1 to {MAX_RATE_KEY} characters, "
            f"got {str(value)[:40]!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class RateRule:
    """A job class's limit and how its jobs are keyed: `key` (a fixed name) or `key_of` (a
    function of the payload)."""

    rate: Rate
    key: str | None = None
    key_of: Callable[[Any], Any] | None = None

    def key_for(self, payload: Any) -> str:
        """The key of a job with this payload (a key function that fails keys it by name
        `!invalid`, which shares one row: the class is still limited)."""
        if self.key_of is None:
            return self.key or ""
        try:
            return check_rate_key(self.key_of(payload))
        except Exception:  # the app's function: the claim must go on
            return "!invalid"


@dataclass
class RateClaim:
    """What a claim under rate limits is given (the rules of the kinds it claims, by kind) and
    tells back: `next_in`, seconds until a held key allows its next claim (None: none held)."""

    rules: Mapping[str, RateRule]
    next_in: float | None = field(default=None)

    def keyed_kinds(self) -> list[str]:
        """The kinds whose key is a function of the payload (their window rows carry it)."""
        return sorted(kind for kind, rule in self.rules.items() if rule.key_of is not None)


@dataclass
class KeyClock:
    """One key's GCRA row while a claim chooses: `tat` moves forward with each claim."""

    tat: float
    interval: float
    tolerance: float

    def take(self, now: float) -> bool:
        """Take a claim at `now` if the key allows one. A claim that comes less than half an
        interval late keeps the key's pace (the claimers' wake-up and round trip would
        otherwise be lost at every claim): two claims may then be half an interval apart.
        Over any span of t seconds: at most floor(t / interval + 1/2) + burst claims."""
        if self.tat - now > self.tolerance + 1e-9:
            return False
        self.tat = max(self.tat, now - self.interval / 2) + self.interval
        return True

    def next_at(self) -> float:
        """When the key next allows a claim."""
        return self.tat - self.tolerance


def rate_rule(kind: str, rate: Any, rate_key: Any) -> RateRule | None:
    """A job class's `rate=` and `rate_key=`, checked (`InvalidArgument` names what is wrong)."""
    if rate is None:
        if rate_key is not None:
            raise InvalidArgument("rate_key applies only with rate=tenure.Rate(...)")
        return None
    if not isinstance(rate, Rate):
        raise InvalidArgument(f"rate must be a tenure.Rate(count, per=seconds), got {rate!r}")
    if rate_key is None:
        return RateRule(rate, key=check_rate_key(kind))
    if isinstance(rate_key, str):
        return RateRule(rate, key=check_rate_key(rate_key))
    if callable(rate_key):
        return RateRule(rate, key_of=rate_key)
    raise InvalidArgument(
        f"rate_key is a name or a function of the payload that returns one, got {rate_key!r}"
    )
