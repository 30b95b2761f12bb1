"""Tenants and their API keys (what `tenure serve` authenticates with)."""

from __future__ import annotations

import builtins
import logging
from dataclasses import dataclass
from typing import Any

from tenure import keys
from tenure.errors import TenantExists, TenantNotFound
from tenure.evidence import check_principal
from tenure.ledger.core import Part
from tenure.logs import emit
from tenure.principals import Binding
from tenure.storage.base import ApiKeyRecord, TenantStore
from tenure.types import Job, KeyRecord, TenantRecord
from tenure.validation import check_name

log = logging.getLogger("tenure")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who presented a key: a tenant, or with `tenant` None the admin key (every tenant);
    `binding`, the principal a tenant key is bound to (None: a service key)."""

    tenant: str | None
    binding: Binding | None = None
    key_id: str | None = None

    @property
    def admin(self) -> bool:
        return self.tenant is None

    @property
    def submits_as(self) -> str:
        """The tenant of the jobs this principal submits when it names none."""
        return self.tenant or "default"

    def may_see(self, tenant: str) -> bool:
        return self.tenant is None or self.tenant == tenant

    def may_read(self, job: Job) -> bool:
        """A job of the caller's tenant, and of its bound principal (or a narrower one)."""
        return self.may_see(job.tenant) and (
            self.binding is None or self.binding.allows(job.principal)
        )

    def acting_for(self, requested: Any) -> str | None:
        """The principal a submit of this caller acts for: the one it names, checked against
        the key's binding (PrincipalNotAllowed), or the binding's when it names none."""
        named = None if requested is None else check_principal(requested)
        if self.binding is None:
            return named
        return self.binding.acting_for(named)


class Tenants(Part[TenantStore]):
    """Tenant and API key operations of the `Ledger`."""

    def create_tenant(self, name: str) -> str:
        """Create a tenant and return its first API key (shown once; stored as a digest)."""
        name = check_name(name, "tenant")
        issued = keys.new_key()
        if not self.store.create_tenant(name, issued.key_id, issued.key_sha256):
            raise TenantExists(
                f"tenant {name!r} exists: issue another key with `tenure tenant key {name}` "
                "(Ledger.issue_key)"
            )
        emit(log, logging.INFO, "tenant_created", tenant=name, key_id=issued.key_id)
        return issued.key

    def issue_key(self, tenant: str, principal: str | None = None) -> str:
        """Another API key for an existing tenant (for rotation: issue, deploy, revoke the old).
        With `principal` the key is bound to it (`user:42`, or `user:42/` for it and every
        principal under it): it submits as that principal or a narrower one and reads only
        their jobs. Without, it is a service key that may name any principal of its tenant."""
        tenant = check_name(tenant, "tenant")
        bound = None if principal is None else Binding.of(principal).value
        issued = keys.new_key()
        if not self.store.add_api_key(tenant, issued.key_id, issued.key_sha256, bound):
            raise TenantNotFound(f"no tenant is named {tenant!r}")
        emit(
            log,
            logging.INFO,
            "api_key_issued",
            tenant=tenant,
            key_id=issued.key_id,
            bound=bound is not None,
        )
        return issued.key

    def keys(self, tenant: str | None = None) -> builtins.list[KeyRecord]:
        """The API keys of `tenant` (None: every tenant), revoked ones included, without their
        secrets: id, tenant, bound principal, issue time."""
        if tenant is not None:
            tenant = check_name(tenant, "tenant")
            if all(t.name != tenant for t in self.store.tenants()):
                raise TenantNotFound(f"no tenant is named {tenant!r}")
        return [
            KeyRecord(r.key_id, r.tenant, r.principal, r.created_at, r.revoked)
            for r in self.store.api_keys(tenant)
        ]

    def revoke_keys(self, tenant: str, key_id: str | None = None) -> int:
        """Revoke the tenant's live keys, or only `key_id`; return how many were revoked."""
        tenant = check_name(tenant, "tenant")
        if key_id is not None:
            key_id = check_name(key_id, "key id")
        revoked = self.store.revoke_api_keys(tenant, key_id)
        if not revoked and all(t.name != tenant for t in self.store.tenants()):
            raise TenantNotFound(f"no tenant is named {tenant!r}")
        emit(log, logging.INFO, "api_keys_revoked", tenant=tenant, count=revoked)
        return revoked

    def tenants(self) -> builtins.list[TenantRecord]:
        """Every tenant with its live and revoked key counts."""
        return self.store.tenants()

    def authenticate(self, key: str) -> str | None:
        """The tenant of a live key, or None (unknown, malformed or revoked)."""
        record = self._live_key(key)
        return None if record is None else record.tenant

    def identify(self, key: str, admin_key_sha256: str | None = None) -> Principal | None:
        """Who a presented key stands for: the admin key (matched against its digest, which
        only the service's configuration holds) or a tenant's live key, with the principal it
        is bound to; None otherwise."""
        if admin_key_sha256 is not None and keys.matches(key, admin_key_sha256):
            return Principal(tenant=None)
        record = self._live_key(key)
        if record is None:
            return None
        binding = None if record.principal is None else Binding(record.principal)
        return Principal(tenant=record.tenant, binding=binding, key_id=record.key_id)

    def _live_key(self, key: str) -> ApiKeyRecord | None:
        key_id = keys.key_id_of(key)
        if key_id is None:
            return None
        record = self.store.api_key(key_id)
        if record is None or not keys.matches(key, record.key_sha256) or record.revoked:
            return None
        return record
