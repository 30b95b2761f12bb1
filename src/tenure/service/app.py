"""The ASGI application of `tenure serve`: FastAPI for routes, validation and /openapi.json."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp

from tenure._version import __version__
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.ledger import Ledger
from tenure.pages import dashboard_page
from tenure.service import api, errors, health, keys, lives, rollouts, schedules
from tenure.service.limits import RequestLimits
from tenure.service.metrics import DatabaseCollector
from tenure.service.settings import ServiceSettings
from tenure.service.waiting import LongPolls


def create_app(
    ledger: Ledger, settings: ServiceSettings | None = None, clock: Clock = SYSTEM_CLOCK
) -> ASGIApp:
    """The service over an open ledger (the caller closes it). Limits wrap everything; `clock`
    times the long polls' waits (the database's clock decides every lease)."""
    settings = settings or ServiceSettings()
    app = FastAPI(
        title="tenure",
        version=__version__,
        description="Leased, fenced, durable jobs. Every /v1 route needs "
        "`Authorization: Bearer <API key>`; a key sees only its tenant's jobs.",
    )
    app.state.ledger = ledger
    app.state.settings = settings
    app.state.clock = clock
    app.state.long_polls = LongPolls(settings.max_waits_per_tenant)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(ledger, by_tenant=settings.metrics_by_tenant))
    app.state.registry = registry
    errors.install(app)
    app.include_router(api.router)
    app.include_router(lives.router)
    app.include_router(rollouts.router)
    app.include_router(keys.router)
    app.include_router(schedules.router)
    app.include_router(health.router)
    page = dashboard_page()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    return RequestLimits(app, settings.max_body_bytes)
