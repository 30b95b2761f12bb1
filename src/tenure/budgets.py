"""Spend budgets of runs, as values: what a submit may carry (`{"usd": 5, "calls": 50}`: the
app's units), what a run has left (the least of its own and its ancestors' remainders), and
the error a run that went over ends with. Pure: the rows are the ledger's
(`tenure_budgets`: a budgeted job's ceiling and what it and its descendants spent)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tenure.errors import InvalidArgument, NonRetryable
from tenure.validation import check_number

MAX_UNITS = 16
# A job held for its run's budget is due this many seconds from now (about 317 years): never,
# until `raise_budget` makes it due; a queued job due past a century is one so held.
HELD_FOR_BUDGET = 1e10
HELD_PAST = 100 * 365 * 86_400.0
MAX_AMOUNT = 1e15
_UNIT = re.compile(r"[a-z][a-z0-9_]{0,39}")


class BudgetExhausted(NonRetryable):
    """The run's budget is spent: its jobs start no more and spawn no more, and a report
    that goes over it ends the reporting job (`failed`, code `budget_exhausted`)."""

    def __init__(self, message: str = "the run's budget is spent") -> None:
        super().__init__(message, code="budget_exhausted")


def check_amount(value: Any, what: str) -> float:
    """A finite amount from 0 to 1e15 (`InvalidArgument` otherwise)."""
    return check_number(value, what, 0, MAX_AMOUNT)


def check_units(value: Any, what: str = "budget") -> dict[str, float]:
    """A mapping of 1 to 16 units (lowercase names: `usd`, `calls`, `input_tokens`) to
    finite amounts >= 0; `InvalidArgument` names what is wrong."""
    if not isinstance(value, Mapping) or not value:
        raise InvalidArgument(f"a {what} maps units to amounts, e.g. {{'usd': 5}}, got {value!r}")
    if len(value) > MAX_UNITS:
        raise InvalidArgument(f"a {what} has at most {MAX_UNITS} units, got {len(value)}")
    units: dict[str, float] = {}
    for unit, amount in value.items():
        if not isinstance(unit, str) or not _UNIT.fullmatch(unit):
            raise InvalidArgument(
                f"a {what}'s unit is a lowercase name of 1 to 40 letters, digits and _ "
                f"(such as 'usd' or 'input_tokens'), got {str(unit)[:40]!r}"
            )
        units[unit] = check_amount(amount, f"the {what}'s {unit!r}")
    return units


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """One budgeted job of a run's chain (the job itself or an ancestor)."""

    job_id: str
    budget: Mapping[str, float]
    spent: Mapping[str, float]

    def raised(self, units: Mapping[str, float]) -> dict[str, float]:
        """Its ceilings with `units` added to those it names."""
        return {unit: ceiling + units.get(unit, 0.0) for unit, ceiling in self.budget.items()}

    def charged(self, units: Mapping[str, float]) -> dict[str, float]:
        """What it has spent once `units` are added."""
        spent = dict(self.spent)
        for unit, amount in units.items():
            spent[unit] = spent.get(unit, 0.0) + amount
        return spent


@dataclass(frozen=True, slots=True)
class Budget:
    """What a run may still spend, per unit: the least remainder of the job's own budget and
    its ancestors' (a unit no budget of the chain names is not limited)."""

    remaining: Mapping[str, float]
    # Some budget of the chain went over (spent more than its ceiling).
    over: bool = False
    # Each (job id, unit, ceiling) of the chain: a raise changes them (a held job compares).
    ceilings: tuple[tuple[str, str, float], ...] = field(default=(), repr=False, compare=False)

    @property
    def exhausted(self) -> bool:
        """Nothing left of some unit: the run's jobs start and spawn no more."""
        return self.over or any(left <= 0 for left in self.remaining.values())

    @classmethod
    def of(cls, rows: Iterable[BudgetRow]) -> Budget | None:
        """The chain's budget (None: no job of the chain has one)."""
        remaining: dict[str, float] = {}
        over, ceilings = False, []
        for row in rows:
            for unit, ceiling in row.budget.items():
                left = ceiling - row.spent.get(unit, 0.0)
                over = over or left < 0
                remaining[unit] = min(remaining.get(unit, math.inf), left)
                ceilings.append((row.job_id, unit, ceiling))
        return cls(remaining, over, tuple(sorted(ceilings))) if ceilings else None

    def clamp(self, requested: Mapping[str, float] | None) -> dict[str, float] | None:
        """A child's budget: what it asks for, at most this remainder (per unit); None when
        it asks for nothing (it spends within the chain's budgets all the same)."""
        if requested is None:
            return None
        clamped = dict(requested)
        for unit, left in self.remaining.items():
            if unit in clamped:
                clamped[unit] = max(0.0, min(clamped[unit], left))
        return clamped
