"""GET /v1/me and GET /v1/keys: who a key is, and the keys an operator may see (never a
secret). A bound key sees only itself; a tenant's service key, its tenant's keys; the admin key,
every tenant's (or one's, by `tenant`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query, Request

from tenure.service.auth import Caller, ledger_of
from tenure.service.errors import ApiError, documented
from tenure.service.models import KeyList, KeyOut, MeOut
from tenure.validation import MAX_NAME_LENGTH

router = APIRouter(prefix="/v1", tags=["keys"])


@router.get("/me", response_model=MeOut, responses=documented(401, 503))
def me(caller: Caller) -> MeOut:
    """The presented key: its tenant (null: the admin key), its id, the principal it is bound
    to (null: a service key that may name any principal of its tenant)."""
    bound = caller.binding
    return MeOut(
        tenant=caller.tenant,
        admin=caller.admin,
        key_id=caller.key_id,
        principal=None if bound is None else bound.value,
    )


@router.get("/keys", response_model=KeyList, responses=documented(401, 403, 404, 422, 503))
def list_keys(
    request: Request,
    caller: Caller,
    tenant: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME_LENGTH)] = None,
) -> KeyList:
    """API keys with their bindings, revoked ones included."""
    if tenant is not None and not caller.may_see(tenant):
        raise ApiError(403, "forbidden", "a tenant key lists its own tenant's keys only")
    found = ledger_of(request).operations.keys(caller.tenant or tenant)
    if caller.binding is not None:
        found = [k for k in found if k.key_id == caller.key_id]
    return KeyList(keys=[KeyOut(**asdict(k)) for k in found])
