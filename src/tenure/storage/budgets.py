"""What the ledger needs of a store for costs and spend budgets (`tenure.budgets`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tenure.budgets import BudgetRow


class BudgetStore(Protocol):
    """Costs reported by attempts, and the budgets of runs they are charged to."""

    def report_cost(
        self,
        job_id: str,
        attempt: int,
        tokens: int,
        usd: float,
        units: Mapping[str, float] | None = None,
        *,
        budgeted: bool = True,
    ) -> list[BudgetRow]:
        """Record what an attempt of the job spent, and charge `units` to every budgeted job
        of its chain (the job and its ancestors) in the same transaction; those rows
        (`budgeted=False`, the job's `Lease.budgeted`: its run has none, the chain is unread)."""
        ...

    def budget(self, job_id: str) -> list[BudgetRow]:
        """The budgeted rows of the job's chain (the job and its ancestors)."""
        ...

    def raise_budget(self, job_id: str, units: Mapping[str, float]) -> list[str] | None:
        """Raise the run's ceilings by `units` and make its jobs held for the budget due now;
        their ids (None: no budget in the run)."""
        ...
