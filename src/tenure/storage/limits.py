"""Fair scheduling at claim time: which jobs a claim under concurrency limits may take.

Both stores run it inside one serialised transaction (PostgreSQL: an advisory lock, then
statements that see every claim committed before; SQLite: BEGIN IMMEDIATE): read the limits
and the running counts, ask for the next claimable jobs leaving out full tenants and kinds,
then pick in claim order (priority, then age) while each tenant and kind has room. A tenant
at its limit is skipped, not waited for: the others' jobs go ahead of its backlog.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

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

    def choose(self, window: Iterable[Row], limit: int) -> list[str]:
        """Ids to claim, in window order, each tenant and kind kept within its limit."""
        chosen: list[str] = []
        for row in window:
            if len(chosen) >= limit:
                break
            tenant, kind = row["tenant"], row["kind"]
            if self.tenants[tenant] >= self.tenant_limits.get(tenant, 1 << 62):
                continue
            if self.kinds[kind] >= self.kind_limits.get(kind, 1 << 62):
                continue
            self.tenants[tenant] += 1
            self.kinds[kind] += 1
            chosen.append(str(row["id"]))
        return chosen
