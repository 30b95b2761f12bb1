"""Who is asking: a tenant key sees its tenant's jobs, the admin key sees every tenant's."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tenure.ledger import Ledger, Principal
from tenure.service.errors import ApiError
from tenure.service.settings import ServiceSettings

bearer = HTTPBearer(auto_error=False, description="a tenant key, or the admin key")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def ledger_of(request: Request) -> Ledger:
    ledger: Ledger = request.app.state.ledger
    return ledger


def settings_of(request: Request) -> ServiceSettings:
    settings: ServiceSettings = request.app.state.settings
    return settings


async def identify(ledger: Ledger, settings: ServiceSettings, key: str) -> Principal | None:
    """The principal a presented key stands for, or None."""
    return await run_in_threadpool(ledger.operations.identify, key, settings.admin_key_sha256)


async def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The caller of a /v1 route; 401 without a live key."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <API key>", _CHALLENGE)
    found = await identify(ledger_of(request), settings_of(request), credentials.credentials)
    if found is None:
        raise ApiError(401, "unauthorized", "the API key is unknown or revoked", _CHALLENGE)
    return found


Caller = Annotated[Principal, Depends(principal)]
