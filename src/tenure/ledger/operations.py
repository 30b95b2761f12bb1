"""The operator's face of a ledger (`ledger.operations`): tenants and their keys, concurrency
limits, declared labels and versions, rollouts, purge, and the figures dashboards and metrics
read. The application's face is `tenure.Ledger`; the worker's is `tenure.port.LeasePort`."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from datetime import timedelta

from tenure import labels as label_rules
from tenure.budgets import Budget
from tenure.ledger.core import LedgerCore
from tenure.ledger.declarations import Declarations
from tenure.ledger.evidence import EvidenceRecords
from tenure.ledger.limits import Limits
from tenure.ledger.reading import Reading
from tenure.ledger.retention import DEFAULT_KEY_RETENTION, Retention
from tenure.ledger.rollouts import Rollouts, RolloutStatus
from tenure.ledger.schedules import Schedules
from tenure.ledger.tenants import Principal, Tenants
from tenure.ledger.waits import Waits
from tenure.types import (
    EventTotals,
    JobState,
    KeyRecord,
    OnTrip,
    OverdueStages,
    PurgeReport,
    QueueFigure,
    RetrievalTotals,
    Rollout,
    TenantRecord,
)


class Operations:
    """Tenants, keys, limits, rollouts, purge and figures of one ledger.

    Get it as `ledger.operations` (the CLI's `tenure tenant`, `tenure limit`, `tenure rollout`,
    `tenure purge`, the service's admin routes and `/metrics` use it).
    """

    def __init__(
        self,
        core: LedgerCore,
        *,
        tenants: Tenants,
        limits: Limits,
        declarations: Declarations,
        rollouts: Rollouts,
        waits: Waits,
        reading: Reading,
        evidence: EvidenceRecords,
        retention: Retention,
        schedules: Schedules,
    ) -> None:
        self._core = core
        self._tenants = tenants
        self._limits = limits
        self._declarations = declarations
        self._rollouts = rollouts
        self._waits = waits
        self._reading = reading
        self._evidence = evidence
        self._retention = retention
        self._schedules = schedules

    @property
    def schedules(self) -> Schedules:
        """Scheduled kinds: the workers fire their slots; list, pause, resume, trigger."""
        return self._schedules

    # The database

    @property
    def where(self) -> str:
        """Where the jobs live, for messages (a URL without its password, or a file)."""
        return self._core.store.where

    def write_refusal(self) -> str | None:
        """Why the database would refuse a write now (a read-only standby), or None."""
        return self._core.store.write_refusal()

    # Tenants and keys

    def create_tenant(self, name: str) -> str:
        """Create a tenant and return its first API key (shown once; stored as a digest)."""
        return self._tenants.create_tenant(name)

    def issue_key(self, tenant: str, principal: str | None = None) -> str:
        """Another API key for an existing tenant (rotation: issue, deploy, revoke the old).
        With `principal` (`user:42`, or `user:42/` for it and every principal under it) the
        key is bound to it: it submits as that principal or a narrower one and reads only their
        jobs. Without, it is a service key that may name any principal of its tenant."""
        return self._tenants.issue_key(tenant, principal)

    def keys(self, tenant: str | None = None) -> builtins.list[KeyRecord]:
        """The API keys of `tenant` (None: every tenant), revoked ones included, never their
        secrets."""
        return self._tenants.keys(tenant)

    def revoke_keys(self, tenant: str, key_id: str | None = None) -> int:
        """Revoke the tenant's live keys, or only `key_id`; return how many were revoked."""
        return self._tenants.revoke_keys(tenant, key_id)

    def tenants(self) -> builtins.list[TenantRecord]:
        """Every tenant with its live and revoked key counts."""
        return self._tenants.tenants()

    def authenticate(self, key: str) -> str | None:
        """The tenant of a live key, or None (unknown, malformed or revoked)."""
        return self._tenants.authenticate(key)

    def identify(self, key: str, admin_key_sha256: str | None = None) -> Principal | None:
        """Who a presented key stands for: the admin (its key matched against the digest
        `admin_key_sha256`), a tenant, or None."""
        return self._tenants.identify(key, admin_key_sha256)

    # Limits

    def set_tenant_limit(self, tenant: str, limit: int | None) -> None:
        """At most `limit` jobs of `tenant` run at once, across all workers (None: no limit)."""
        self._limits.set_tenant_limit(tenant, limit)

    def tenant_limits(self) -> dict[str, int]:
        """Every tenant's concurrency limit."""
        return self._limits.tenant_limits()

    # Declarations (a worker's app declares them at start)

    def declare_labels(self, kinds: Mapping[str, Mapping[str, str | None]]) -> None:
        """Store, per kind, the labels its job class declares (a value, or None for a key
        the submitter sets)."""
        self._declarations.declare_labels(kinds)

    def declare_versions(self, kinds: Mapping[str, int]) -> None:
        """Store, per kind, its job class's version (jobs submitted afterwards carry it)."""
        self._declarations.declare_versions(kinds)

    def declared_labels(self, *, fresh: bool = False) -> dict[str, label_rules.Declared]:
        """Every kind's declared labels (read again after a second, or now with `fresh`)."""
        return self._declarations.declared_labels(fresh=fresh)

    # Rollouts

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
        """Give new jobs of `kind` the `variant` (see `tenure rollout start`)."""
        return self._rollouts.start_rollout(
            kind,
            variant,
            tenants=tenants,
            percent=percent,
            max_failure_rate=max_failure_rate,
            max_cost_ratio=max_cost_ratio,
            min_jobs=min_jobs,
            on_trip=on_trip,
        )

    def stop_rollout(self, kind: str) -> None:
        """End the kind's rollout: new jobs are stable again (jobs keep their variant)."""
        self._rollouts.stop_rollout(kind)

    def rollouts(self) -> builtins.list[Rollout]:
        """Every rollout, running or ended."""
        return self._rollouts.rollouts()

    def rollout(self, kind: str) -> Rollout | None:
        """The kind's rollout, or None."""
        return self._rollouts.rollout(kind)

    def rollout_status(self, kind: str) -> RolloutStatus:
        """Candidate against stable since the rollout started (the breaker judged)."""
        return self._rollouts.rollout_status(kind)

    def rollout_statuses(self, tenant: str | None = None) -> builtins.list[RolloutStatus]:
        """Every rollout compared; with `tenant`, those that concern it."""
        return self._rollouts.rollout_statuses(tenant)

    def check_rollout(self, kind: str) -> bool:
        """Trip the kind's breaker if its thresholds are passed; True for the call that did."""
        return self._rollouts.check_rollout(kind)

    def release_held(self, kind: str) -> int:
        """Release every job of `kind` a tripped `hold` rollout holds; how many."""
        return self._waits.release_held(kind)

    def report_cost(
        self, job_id: str, attempt: int, tokens: int = 0, usd: float = 0.0, **units: float
    ) -> Budget | None:
        """Record what an attempt spent (a handler's `ctx.report_cost` does this), charged
        to the budgets of its run; what the run has left (None: no budget)."""
        return self._rollouts.report_cost(job_id, attempt, tokens, usd, units)

    def raise_budget(self, job_id: str, **units: float) -> list[str]:
        """Give the job's run `units` more (`usd=5`: added to each budget of the run, from
        its root down, that names the unit) and make the run's jobs held for the budget
        (`on_budget="hold"`) due now, in one transaction; their ids. A run with no budget:
        `InvalidArgument`."""
        return self._rollouts.raise_budget(job_id, units)

    def budget(self, job_id: str) -> Budget | None:
        """What the job's run may still spend, per unit (None: no budget in its chain)."""
        return self._rollouts.budget(job_id)

    # Retention

    def purge(
        self,
        older_than: timedelta | float,
        *,
        keep_keys: timedelta | float = DEFAULT_KEY_RETENTION,
        batch_size: int = 1000,
        on_batch: Callable[[PurgeReport], None] | None = None,
        dry_run: bool = False,
    ) -> PurgeReport:
        """Delete terminal jobs last changed more than `older_than` ago (see `tenure purge`)."""
        return self._retention.purge(
            older_than,
            keep_keys=keep_keys,
            batch_size=batch_size,
            on_batch=on_batch,
            dry_run=dry_run,
        )

    # Figures

    def counts(self, kind: str | None = None, tenant: str | None = None) -> dict[JobState, int]:
        """How many jobs are in each state (every state present, zeros included)."""
        return self._reading.counts(kind, tenant)

    def queue_figures(self, by_tenant: bool = False) -> builtins.list[QueueFigure]:
        """Jobs per kind (and tenant) and state, with lease and queue ages (database clock)."""
        return self._reading.queue_figures(by_tenant)

    def overdue_stages(self, by_tenant: bool = False) -> builtins.list[OverdueStages]:
        """Stages of running jobs started past their timeout, per kind (and tenant)."""
        return self._reading.overdue_stages(by_tenant)

    def event_totals(self, by_tenant: bool = False) -> builtins.list[EventTotals]:
        """Recovery events per kind (and tenant): expiries, reclaims, rejections, …"""
        return self._reading.event_totals(by_tenant)

    def retrieval_totals(self) -> builtins.list[RetrievalTotals]:
        """Per retriever: cache hits, misses, and refs dropped by a recheck (all time)."""
        return self._evidence.retrieval_totals()
