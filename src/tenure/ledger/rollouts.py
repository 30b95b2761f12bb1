"""Rollouts: a kind's new jobs get a candidate variant (by tenant and a stable share of the
job id), are compared with the stable ones over the same kind and window, and a breaker in
the database sends later jobs back to stable once failures or cost pass a threshold.

The variant is chosen at submit and stored with the job, so a retry keeps it. Which rollout a
kind has is read from the database at most once a second per ledger (`ROLLOUT_CACHE`), and so
is the breaker's decision: a trip reaches another process's submits within that second.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import math
import statistics
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from tenure.budgets import Budget, check_amount, check_units
from tenure.errors import InvalidArgument, JobNotFound
from tenure.ledger.core import LedgerCore, Part
from tenure.logs import emit
from tenure.storage.base import RolloutStore
from tenure.types import JobState, OnTrip, Rollout, RolloutJob, RolloutState
from tenure.validation import check_int, check_job_id, check_name, check_number

log = logging.getLogger("tenure")
STABLE = "stable"
ROLLOUT_CACHE = 1.0


def share_of(job_id: str) -> float:
    """A job's place in [0, 100): the same for the same id, on every process and backend."""
    digest = hashlib.sha256(job_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * 100


@dataclass(frozen=True, slots=True)
class VariantFigures:
    """One side of a comparison: the jobs of one variant over the rollout's window."""

    variant: str
    jobs: int
    succeeded: int
    failed: int
    cancelled: int
    unfinished: int
    retries: int
    p50_ms: float | None
    p95_ms: float | None
    tokens: int
    usd: float
    in_doubt: int

    @property
    def ended(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    @property
    def failure_rate(self) -> float | None:
        return None if not self.ended else self.failed / self.ended

    @property
    def usd_per_job(self) -> float | None:
        return None if not self.ended else self.usd / self.ended


@dataclass(frozen=True, slots=True)
class RolloutStatus:
    """A rollout and its comparison: candidate and stable over the same kind and window."""

    rollout: Rollout
    candidate: VariantFigures
    stable: VariantFigures
    tripped_now: bool

    @property
    def cost_ratio(self) -> float | None:
        mine, theirs = self.candidate.usd_per_job, self.stable.usd_per_job
        return None if mine is None or not theirs else mine / theirs


class Rollouts(Part[RolloutStore]):
    """`start_rollout`, `stop_rollout`, `rollouts`, `rollout_status`, `check_rollout`, and the
    variant a new job gets."""

    def __init__(self, core: LedgerCore, store: RolloutStore) -> None:
        super().__init__(core, store)
        # This ledger's own cache of the rollouts (never shared with another ledger).
        self._rollout_cache: tuple[float, dict[str, Rollout]] | None = None
        self._rollout_refreshing = False
        self._rollout_lock = threading.Lock()  # guards only the two fields above: no I/O under it

    def start_rollout(
        self,
        kind: str,
        variant: str,
        *,
        tenants: builtins.list[str] | None = None,
        percent: float | None = None,
        max_failure_rate: float | None = None,
        max_cost_ratio: float | None = None,
        min_jobs: int = 20,
        on_trip: OnTrip | str = OnTrip.STABLE,
    ) -> Rollout:
        """Give new jobs of `kind` the `variant`: those of `tenants` (None: every tenant),
        `percent` of them (default 100 with tenants, else required). After `min_jobs`
        candidate jobs ended, a failure rate above `max_failure_rate` or a cost per job above
        `max_cost_ratio` times stable's trips it: new jobs get the stable variant."""
        kind = check_name(kind, "kind")
        variant = check_name(variant, "variant")
        if variant == STABLE:
            raise InvalidArgument(f"{STABLE!r} names the jobs without a variant: pick another")
        if tenants is not None:
            if isinstance(tenants, str) or not tenants:
                raise InvalidArgument("tenants must be a non-empty list of tenant names")
            tenants = sorted({check_name(t, "tenant") for t in tenants})
        if percent is None:
            if tenants is None:
                raise InvalidArgument("a rollout needs tenants, a percent, or both")
            percent = 100.0
        share = check_number(percent, "percent", 0.0, 100.0)
        failure = (
            None
            if max_failure_rate is None
            else check_number(max_failure_rate, "max_failure_rate", 0.0, 1.0)
        )
        cost = (
            None
            if max_cost_ratio is None
            else check_number(max_cost_ratio, "max_cost_ratio", 0.0, _MAX_COST_RATIO)
        )
        if on_trip not in list(OnTrip):
            raise InvalidArgument(f"on_trip must be one of {', '.join(OnTrip)}, got {on_trip!r}")
        rollout = Rollout(
            kind=kind,
            variant=variant,
            tenants=tenants,
            percent=share,
            max_failure_rate=failure,
            max_cost_ratio=cost,
            min_jobs=check_int(min_jobs, "min_jobs", 1),
            on_trip=OnTrip(on_trip),
            state=RolloutState.ACTIVE,
            started_at=self.core.now(),
        )
        if not self.store.start_rollout(rollout):
            raise InvalidArgument(f"kind {kind!r} already has a rollout: stop it first")
        self._rollout_cache = None
        emit(log, logging.INFO, "rollout_started", kind=kind, variant=variant, percent=share)
        return self.rollout(kind) or rollout

    def stop_rollout(self, kind: str) -> None:
        """End the kind's rollout: new jobs are stable again (jobs keep their variant)."""
        if not self.store.stop_rollout(check_name(kind, "kind")):
            raise InvalidArgument(f"kind {kind!r} has no rollout")
        self._rollout_cache = None
        emit(log, logging.INFO, "rollout_stopped", kind=kind)

    def rollouts(self) -> builtins.list[Rollout]:
        return self.store.rollouts()

    def rollout(self, kind: str) -> Rollout | None:
        return next((r for r in self.store.rollouts() if r.kind == kind), None)

    def rollout_status(self, kind: str) -> RolloutStatus:
        """The comparison of candidate and stable since the rollout started (the breaker is
        judged on the same figures, so a status may be what trips it)."""
        rollout = self.rollout(check_name(kind, "kind"))
        if rollout is None:
            raise InvalidArgument(f"kind {kind!r} has no rollout")
        candidate, stable = self._compare(rollout)
        tripped_now = self._judge(rollout, candidate, stable)
        # As it is now: this call or another may have tripped it.
        if rollout.state is RolloutState.ACTIVE:
            rollout = self.rollout(kind) or rollout
        return RolloutStatus(rollout, candidate, stable, tripped_now)

    def rollout_statuses(self, tenant: str | None = None) -> builtins.list[RolloutStatus]:
        """Every rollout compared (by kind), the breaker not judged; with `tenant`, those that
        reach its jobs, compared over its jobs only."""
        if tenant is not None:
            tenant = check_name(tenant, "tenant")
        return [
            RolloutStatus(r, *self._compare(r, tenant), tripped_now=False)
            for r in self.store.rollouts()
            if tenant is None or r.tenants is None or tenant in r.tenants
        ]

    def check_rollout(self, kind: str) -> bool:
        """Trip the kind's breaker if its thresholds are passed; True for the call that did."""
        rollout = self.rollout(check_name(kind, "kind"))
        return rollout is not None and self._check(rollout)

    def job_cost(self, job_id: str) -> tuple[int, float]:
        """Tokens and dollars the job's attempts reported (`ctx.report_cost`), summed."""
        job_id = check_job_id(job_id)
        cost = self.store.job_cost(job_id)
        if cost is None:
            raise JobNotFound(f"no job has the id {job_id}")
        return cost

    def report_cost(
        self,
        job_id: str,
        attempt: int,
        tokens: int = 0,
        usd: float = 0.0,
        units: Mapping[str, float] | None = None,
        *,
        budgeted: bool = True,
    ) -> Budget | None:
        """Record what an attempt spent (`ctx.report_cost` calls this) and charge it, with
        `units` (the app's: calls, input_tokens…), to the budgets of the job's run in the
        same transaction; what the run has left (None: no budget). `budgeted=False` (the
        lease's `budgeted`) says the run has none: the cost is recorded alone."""
        tokens = check_int(tokens, "tokens", 0)
        usd = check_amount(usd, "usd")
        spent = check_units(units, "cost") if units else {}
        for unit, amount in (("tokens", float(tokens)), ("usd", usd)):
            if amount:
                spent[unit] = spent.get(unit, 0.0) + amount
        rows = self.store.report_cost(job_id, attempt, tokens, usd, spent, budgeted=budgeted)
        return Budget.of(rows)

    def budget(self, job_id: str) -> Budget | None:
        """What the job's run may still spend (None: no job of its chain has a budget)."""
        return Budget.of(self.store.budget(check_job_id(job_id)))

    def raise_budget(self, job_id: str, units: Mapping[str, float]) -> list[str]:
        """Give the job's run more to spend and release what was held for it."""
        job_id = check_job_id(job_id)
        checked = check_units(units, "raise")
        if not all(checked.values()):
            raise InvalidArgument("a raise adds more than 0 to each unit it names")
        released = self.store.raise_budget(job_id, checked)
        if released is None:
            raise InvalidArgument(
                f"job {job_id}'s run has no budget of {', '.join(sorted(units))} to raise"
            )
        emit(log, logging.INFO, "budget_raised", job=job_id, released=len(released))
        return released

    def _check(self, rollout: Rollout) -> bool:
        if rollout.state is not RolloutState.ACTIVE:
            return False
        return self._judge(rollout, *self._compare(rollout))

    def _compare(
        self, rollout: Rollout, tenant: str | None = None
    ) -> tuple[VariantFigures, VariantFigures]:
        """Candidate and stable figures over the rollout's window (one read of its jobs)."""
        jobs = self.store.rollout_jobs(rollout.kind, tenant)
        candidate = _figures(rollout.variant, [j for j in jobs if j.variant == rollout.variant])
        return candidate, _figures(STABLE, [j for j in jobs if j.variant is None])

    def _judge(self, rollout: Rollout, candidate: VariantFigures, stable: VariantFigures) -> bool:
        """Trip the breaker if these figures pass its thresholds; True for the call that did."""
        if rollout.state is not RolloutState.ACTIVE or candidate.ended < rollout.min_jobs:
            return False
        reasons = []
        rate = candidate.failure_rate or 0.0
        if rollout.max_failure_rate is not None and rate > rollout.max_failure_rate:
            reasons.append("failure_rate")
        ratio = RolloutStatus(rollout, candidate, stable, False).cost_ratio
        if (
            rollout.max_cost_ratio is not None
            and ratio is not None
            and ratio > rollout.max_cost_ratio
        ):
            reasons.append("cost_ratio")
        if not reasons:
            return False
        trip = {
            "why": reasons,
            "jobs": candidate.ended,
            "failure_rate": round(rate, 4),
            "cost_ratio": None if ratio is None else round(ratio, 4),
        }
        if not self.store.trip_rollout(rollout.kind, json.dumps(trip, sort_keys=True)):
            return False  # another process tripped it first
        self._rollout_cache = None
        emit(
            log,
            logging.WARNING,
            "rollout_tripped",
            kind=rollout.kind,
            variant=rollout.variant,
            **trip,
        )
        return True

    def variant_for(self, kind: str, tenant: str, job_id: str) -> tuple[str | None, bool]:
        """The variant a new job gets (None: stable), and whether a tripped rollout holds it
        (`on_trip="hold"`: the jobs the candidate would have had wait for an operator)."""
        rollout = self._active_rollouts().get(kind)
        if rollout is None:
            return None, False
        if rollout.tenants is not None and tenant not in rollout.tenants:
            return None, False
        if share_of(job_id) >= rollout.percent:
            return None, False
        if rollout.state is RolloutState.ACTIVE:
            return rollout.variant, False
        return None, rollout.on_trip is OnTrip.HOLD

    def _active_rollouts(self) -> dict[str, Rollout]:
        """The rollouts by kind, read again at most once a second. One submitting thread
        reads (and judges the breakers) while the others go on with the previous reading."""
        with self._rollout_lock:
            cached = self._rollout_cache
            fresh = cached is not None and self.core.clock.monotonic() - cached[0] < ROLLOUT_CACHE
            if cached is not None and (fresh or self._rollout_refreshing):
                return cached[1]
            self._rollout_refreshing = True
        try:
            current = {r.kind: r for r in self.store.rollouts()}
            # A process that submits is one that decides (the trip is one conditional write).
            if any(self._check(r) for r in current.values()):
                current = {r.kind: r for r in self.store.rollouts()}
        finally:
            with self._rollout_lock:
                self._rollout_refreshing = False
        self._rollout_cache = (self.core.clock.monotonic(), current)
        return current


def _figures(variant: str, jobs: builtins.list[RolloutJob]) -> VariantFigures:
    durations = sorted(
        (j.updated_at - j.created_at).total_seconds() * 1000 for j in jobs if j.state.terminal
    )
    return VariantFigures(
        variant=variant,
        jobs=len(jobs),
        succeeded=sum(j.state is JobState.SUCCEEDED for j in jobs),
        failed=sum(j.state is JobState.FAILED for j in jobs),
        cancelled=sum(j.state is JobState.CANCELLED for j in jobs),
        unfinished=sum(not j.state.terminal for j in jobs),
        retries=sum(max(0, j.attempt - 1) for j in jobs),
        p50_ms=_one_decimal(statistics.median(durations) if durations else None),
        p95_ms=_one_decimal(p95(durations)),
        tokens=sum(j.tokens for j in jobs),
        usd=round(sum(j.usd for j in jobs), 6),
        in_doubt=sum(j.in_doubt for j in jobs),
    )


def p95(values: builtins.list[float]) -> float | None:
    """The nearest-rank 95th percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)], 3)


def _one_decimal(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


_MAX_COST_RATIO = 1e6
