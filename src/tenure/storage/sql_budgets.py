"""The budgets aggregate written once for both SQL dialects (named queries `budget`,
`report_cost*`, `raise_budget*`): a charge locks the budgeted rows of the job's chain in id
order, adds the units to each, and records the attempt's cost, in one transaction; a raise
adds to their ceilings and releases the jobs held for them. A job whose run has no budget
(`Lease.budgeted` false) records its cost in one statement, its chain unread."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from tenure.budgets import HELD_PAST, Budget, BudgetRow
from tenure.storage.rows import Row
from tenure.storage.seam import SqlSeam, Tx
from tenure.types import EventType


class SqlBudgets(SqlSeam):
    """Budgets over the dialect seam of `SqlStore`."""

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """One transaction, serialised against other writers where the dialect needs it."""

    @abstractmethod
    def _array(self, values: Sequence[str] | None) -> Any:
        """A list of strings as the dialect binds it."""

    def _budget_row(self, row: Row) -> BudgetRow:
        return BudgetRow(
            job_id=str(row["job_id"]),
            budget=self.decode.json(row["budget"]),
            spent=self.decode.json(row["spent"]),
        )

    def _locked_chain(self, tx: Tx, job_id: str) -> list[BudgetRow]:
        """The chain's budgeted rows, locked in id order (PostgreSQL; SQLite's transaction
        is serialised already)."""
        return [self._budget_row(row) for row in tx.rows("report_cost__chain", {"job_id": job_id})]

    def budget(self, job_id: str) -> list[BudgetRow]:
        """The budgeted rows of the job's chain (the job and its ancestors)."""
        return [self._budget_row(row) for row in self._read_rows("budget", {"job_id": job_id})]

    def release_if_raised(self, job_id: str, seen: Sequence[tuple[str, str, float]]) -> bool:
        """After the job was held for its run's budget: if a raise committed between the
        worker's look (its chain's ceilings were `seen`) and its hold, and the run has room,
        the jobs held from this one down are due now (True). The chain's rows are locked as
        a raise locks them (FOR UPDATE, in id order): a raise in flight is waited for, and one
        that comes after finds the job held and releases it."""
        with self._transaction() as tx:
            left = Budget.of(self._locked_chain(tx, job_id))
            if left is None or left.ceilings == tuple(seen) or left.exhausted:
                return False
            tx.rows("raise_budget__release", {"root": job_id, "past": HELD_PAST})
            return True

    def raise_budget(self, job_id: str, units: Mapping[str, float]) -> list[str] | None:
        """Add `units` to the ceilings of the run's budgets that name them (the run: the
        job's root and everything below it), make the run's jobs held for the budget due now,
        and record `budget_raised` on the job, in one transaction: the released ids (None: no
        budget of the run names one of the units, nothing written)."""
        with self._transaction() as tx:
            found = tx.rows("raise_budget__root", {"job_id": job_id})
            root = str(found[0]["id"]) if found else None
            rows = tx.rows("raise_budget__rows", {"root": root}) if root else ()
            budgets = [self._budget_row(row) for row in rows]
            if not any(unit in row.budget for row in budgets for unit in units):
                return None
            raised = {row.job_id: row.raised(units) for row in budgets}
            tx.rows(
                "raise_budget",
                {"budgets": json.dumps(raised), "job_ids": self._array(list(raised))},
            )
            released = [
                str(row["id"])
                for row in tx.rows("raise_budget__release", {"root": root, "past": HELD_PAST})
            ]
            detail = {"raised": dict(sorted(units.items())), "released": len(released)}
            event = {"job_id": job_id, "type": EventType.BUDGET_RAISED, "token": None}
            tx.rows("record_event", {**event, "owner_id": None, "detail": json.dumps(detail)})
            return released

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
        """Record what an attempt spent and charge `units` to every budgeted job of its
        chain, in one transaction; the chain's rows as charged (`budgeted=False`: the run has
        no budget, the cost is recorded alone)."""
        params = {
            "job_id": job_id,
            "attempt": attempt,
            "tokens": tokens,
            "usd": usd,
            "units": json.dumps(dict(units), sort_keys=True) if units else None,
        }
        if not budgeted:
            self._write_rows("report_cost", params)
            return []
        with self._transaction() as tx:
            chain = self._locked_chain(tx, job_id)
            tx.rows("report_cost", params)
            if not chain or not units:
                return chain
            spent = {row.job_id: row.charged(units) for row in chain}
            tx.rows(
                "report_cost__charge",
                {"spent": json.dumps(spent), "job_ids": self._array(list(spent))},
            )
            return [BudgetRow(row.job_id, row.budget, spent[row.job_id]) for row in chain]
