"""Fair scheduling: per-tenant concurrency limits, and whether any exist (claims ask often)."""

from __future__ import annotations

from tenure.errors import StoreUnavailable
from tenure.ledger.core import LedgerCore, Part
from tenure.storage.base import TenantStore
from tenure.validation import check_int, check_name

# How often a ledger looks whether tenant limits exist (seconds).
LIMITS_REFRESH = 2.0


class Limits(Part[TenantStore]):
    """`set_tenant_limit`, `tenant_limits`, `has_tenant_limits`."""

    def __init__(self, core: LedgerCore, store: TenantStore) -> None:
        super().__init__(core, store)
        self._limits_seen_at: float | None = None
        self._has_limits = False

    def set_tenant_limit(self, tenant: str, limit: int | None) -> None:
        """At most `limit` jobs of `tenant` run at once, across all workers (None: no limit).

        Claims respect it from the next claim in this process; other processes notice within
        a few seconds (they look for tenant limits every `LIMITS_REFRESH` seconds).
        """
        tenant = check_name(tenant, "tenant")
        if limit is not None:
            limit = check_int(limit, "tenant limit", 1)
        self.store.set_tenant_limit(tenant, limit)
        self._limits_seen_at = None

    def tenant_limits(self) -> dict[str, int]:
        """Every tenant's concurrency limit."""
        return self.store.tenant_limits()

    def has_tenant_limits(self) -> bool:
        """Whether any tenant has a limit (looked up at most every `LIMITS_REFRESH` s).

        Never raises: while the database cannot be reached the last answer stands (the
        claims themselves fail meanwhile), and it is looked up again on the next call.
        """
        now = self.core.clock.monotonic()
        if self._limits_seen_at is None or now - self._limits_seen_at > LIMITS_REFRESH:
            try:
                self._has_limits = bool(self.store.tenant_limits())
            except StoreUnavailable:
                return self._has_limits
            self._limits_seen_at = now
        return self._has_limits
