"""The HTTP service (`tenure serve`): needs the `service` extra (FastAPI, uvicorn,
prometheus_client)."""

from __future__ import annotations

from tenure.extras import needs

needs("service", "fastapi", "uvicorn", "prometheus_client", what="tenure serve")

from tenure.service.app import create_app
from tenure.service.settings import ServiceSettings

__all__ = ["ServiceSettings", "create_app"]
