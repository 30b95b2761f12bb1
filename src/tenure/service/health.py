"""/healthz (the process), /readyz (the database and the queue) and /metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tenure.errors import StoreUnavailable
from tenure.ledger import Ledger
from tenure.service.auth import bearer, identify, ledger_of, settings_of
from tenure.service.errors import ApiError, documented
from tenure.service.models import Health, Readiness
from tenure.types import JobState

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process answers; says nothing about the database (that is /readyz)."""
    return Health(status="ok")


def _readiness(ledger: Ledger) -> Readiness:
    now = ledger.now()
    refusal = ledger.operations.write_refusal()
    if refusal is not None:
        return Readiness(status="unavailable", reason=f"database refuses writes: {refusal}")
    figures = ledger.operations.queue_figures()
    ages = [f.oldest_due_age for f in figures if f.oldest_due_age is not None]
    return Readiness(
        status="ready",
        database_time=now,
        queued=sum(f.jobs for f in figures if f.state is JobState.QUEUED),
        running=sum(f.jobs for f in figures if f.state is JobState.RUNNING),
        expired_leases=sum(f.expired_leases for f in figures),
        oldest_queued_age_seconds=max(ages, default=0.0),
    )


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(request: Request) -> Readiness | JSONResponse:
    """A database round trip and the queue's figures; 503 with the reason when unreachable."""
    try:
        ready = await run_in_threadpool(_readiness, ledger_of(request))
        if ready.status != "ready":
            return JSONResponse(ready.model_dump(mode="json"), status_code=503)
        return ready
    except StoreUnavailable as exc:
        body = Readiness(status="unavailable", reason=f"database unreachable: {exc}")
        return JSONResponse(body.model_dump(mode="json"), status_code=503)


@router.get(
    "/metrics",
    response_class=Response,
    responses=documented(401) | {200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Response:
    """Prometheus text; asks for the admin key only when `tenure serve --metrics-need-key`."""
    settings = settings_of(request)
    if settings.metrics_need_key:
        who = None
        if credentials is not None:
            who = await identify(ledger_of(request), settings, credentials.credentials)
        if who is None or not who.admin:
            raise ApiError(401, "unauthorized", "/metrics needs the admin key")
    body = await run_in_threadpool(generate_latest, request.app.state.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
