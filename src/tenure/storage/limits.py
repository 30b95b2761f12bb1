"""Fair scheduling at claim time: which jobs a claim under concurrency limits may take.

Both stores run it inside one serialised transaction (PostgreSQL: an advisory lock, then
statements that see every claim committed before; SQLite: BEGIN IMMEDIATE): read the limits
and the running counts, ask for the next claimable jobs leaving out full tenants and kinds,
then pick in claim order (priority, then age) while each tenant and kind has room. A tenant
at its limit is skipped, not waited for: the others' jobs go ahead of its backlog.
Rate limits (`tenure.rates`) are checked last, in the same transaction: each key's row is read,
moved forward by the claims it allows, and written back before the claim (`RateBook`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenure.rates import KeyClock, RateClaim, RateRule
from tenure.storage.rows import Row

# Claimable jobs read per claimed slot: room for skipping a few that do not fit.
WINDOW_PER_SLOT = 8


@dataclass
class LimitPlan:
    """Limits, what runs now, and the room left."""

    tenant_limits: Mapping[str, int]
    kind_limits: Mapping[str, int]
    tenants: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(
        cls,
        tenant_limits: Mapping[str, int],
        kind_limits: Mapping[str, int],
        running: Iterable[Row],
    ) -> LimitPlan:
        """From rows of (tenant, kind, running)."""
        plan = cls(tenant_limits, kind_limits)
        for row in running:
            plan.tenants[row["tenant"]] += int(row["running"])
            plan.kinds[row["kind"]] += int(row["running"])
        return plan

    @property
    def full_tenants(self) -> list[str]:
        return sorted(t for t, n in self.tenant_limits.items() if self.tenants[t] >= n)

    @property
    def full_kinds(self) -> list[str]:
        return sorted(k for k, n in self.kind_limits.items() if self.kinds[k] >= n)

    def choose(
        self,
        window: Iterable[Row],
        limit: int,
        admit: Callable[[Row], bool] | None = None,
    ) -> list[str]:
        """Ids to claim, in window order, each tenant and kind kept within its limit and,
        last, each rate key's (`admit` takes the claim from the row's key, if it has room)."""
        chosen: list[str] = []
        for row in window:
            if len(chosen) >= limit:
                break
            tenant, kind = row["tenant"], row["kind"]
            if self.tenants[tenant] >= self.tenant_limits.get(tenant, 1 << 62):
                continue
            if self.kinds[kind] >= self.kind_limits.get(kind, 1 << 62):
                continue
            if admit is not None and not admit(row):
                continue
            self.tenants[tenant] += 1
            self.kinds[kind] += 1
            chosen.append(str(row["id"]))
        return chosen


class RateBook:
    """The rate keys' rows a limited claim reads and moves forward, inside its serialised
    transaction: `now` is the database's clock (epoch seconds); `read(keys)` gives the stored
    rows (key, tat) of those keys."""

    def __init__(
        self, claim: RateClaim, now: float, read: Callable[[list[str]], Iterable[Row]]
    ) -> None:
        self.claim, self.now, self._read = claim, now, read
        self._clocks: dict[str, KeyClock] = {}
        self._last: dict[str, str | None] = {}  # the tenant each key served last
        self._moved: set[str] = set()
        self._refused: list[float] = []

    def _load(self, wanted: Mapping[str, RateRule]) -> None:
        missing = sorted(key for key in wanted if key not in self._clocks)
        stored = {}
        for row in self._read(missing) if missing else ():
            stored[str(row["key"])] = float(row["tat"])
            self._last[str(row["key"])] = row["last_tenant"]
        for key, rule in wanted.items():
            clock = self._clocks.get(key)
            if clock is None:
                self._clocks[key] = KeyClock(
                    stored.get(key, self.now), rule.rate.interval, rule.rate.tolerance
                )
            else:  # a key two classes reach with different rates keeps the stricter
                clock.interval = max(clock.interval, rule.rate.interval)
                clock.tolerance = min(clock.tolerance, rule.rate.tolerance)

    def full_kinds(self, kinds: Iterable[str]) -> list[str]:
        """The kinds of a fixed key that allows no claim now (left out of the window)."""
        fixed = {
            kind: rule
            for kind in kinds
            if (rule := self.claim.rules.get(kind)) is not None and rule.key_of is None
        }
        self._load({rule.key_for(None): rule for rule in fixed.values()})
        full = []
        for kind, rule in fixed.items():
            clock = self._clocks[rule.key_for(None)]
            if clock.tat - self.now > clock.tolerance + 1e-9:
                full.append(kind)
                self._refused.append(clock.next_at())
        return full

    def keys(self, window: Iterable[Row], payload: Callable[[Any], Any]) -> dict[str, str]:
        """Each limited row's key, by job id (its rows loaded)."""
        keyed: dict[str, str] = {}
        wanted: dict[str, RateRule] = {}
        for row in window:
            rule = self.claim.rules.get(row["kind"])
            if rule is not None:
                key = rule.key_for(payload(row["payload"]) if rule.key_of else None)
                keyed[str(row["id"])] = key
                if key not in wanted or rule.rate.interval > wanted[key].rate.interval:
                    wanted[key] = rule
        self._load(wanted)
        return keyed

    def in_turns(self, window: Sequence[Row], keys: Mapping[str, str]) -> list[Row]:
        """The window with each key's rows put in turns of its tenants (within a priority),
        the round starting after the tenant the key served last, in the places the key's rows
        had: a tenant's older backlog does not keep the others from the key's room."""
        rows_of: dict[str, list[Row]] = {}
        for row in window:
            if (key := keys.get(str(row["id"]))) is not None:
                rows_of.setdefault(key, []).append(row)
        turns = {key: iter(_turns(rows, self._last.get(key))) for key, rows in rows_of.items()}
        return [
            next(turns[key]) if (key := keys.get(str(row["id"]))) is not None else row
            for row in window
        ]

    def take(self, key: str | None, tenant: str) -> bool:
        """A claim of a job of this key (None: unlimited), if the key has room now."""
        if key is None:
            return True
        clock = self._clocks[key]
        if clock.take(self.now):
            self._moved.add(key)
            self._last[key] = tenant
            return True
        self._refused.append(clock.next_at())
        return False

    def written(self) -> dict[str, tuple[float, str | None]]:
        """The moved keys' new `tat`s and the tenants they served last, to store."""
        return {key: (self._clocks[key].tat, self._last.get(key)) for key in sorted(self._moved)}

    def finish(self) -> None:
        """Tell the claimer when the earliest refused key allows a claim again."""
        self.claim.next_in = max(0.0, min(self._refused) - self.now) if self._refused else None


def _turns(rows: Sequence[Row], last: str | None) -> list[Row]:
    """Rows of one key in turns of their tenants (by name, starting after `last`), each
    priority level (the window's order) before the next."""
    levels: dict[int, dict[str, deque[Row]]] = {}
    for row in rows:
        level = levels.setdefault(int(row["priority"]), {})
        level.setdefault(str(row["tenant"]), deque()).append(row)
    ordered: list[Row] = []
    for level in levels.values():
        names = sorted(level)
        start = bisect_right(names, last) if last is not None else 0
        names = names[start:] + names[:start]
        while any(level.values()):
            for name in names:
                if level[name]:
                    ordered.append(level[name].popleft())
    return ordered
