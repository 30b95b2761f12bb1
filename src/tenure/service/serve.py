"""`tenure serve`: the service on uvicorn, until SIGINT/SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading

import uvicorn

from tenure.ledger import connect
from tenure.service.app import create_app
from tenure.service.settings import ServiceSettings


def serve(
    url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    settings: ServiceSettings | None = None,
    log_level: str = "info",
    pool_size: int = 8,
) -> None:
    """Open (and migrate) the ledger at `url` and answer HTTP on host:port until stopped."""
    settings = settings or ServiceSettings()
    with connect(url, pool_size=pool_size) as ledger:
        config = uvicorn.Config(
            create_app(ledger, settings),
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=int(settings.max_wait_seconds) + 5,
        )
        server = uvicorn.Server(config)
        shown = f"[{host}]" if ":" in host else host
        print(
            f"tenure serve: dashboard http://{shown}:{port}/  API http://{shown}:{port}/v1  "
            f"OpenAPI /openapi.json  ready /readyz  metrics /metrics"
            + ("" if settings.admin_key_sha256 else "  (no admin key configured)"),
            file=sys.stderr,
            flush=True,
        )
        if threading.current_thread() is threading.main_thread():
            # uvicorn shuts down gracefully on SIGTERM, then raises the signal again for the
            # handler it found: that one only asks the server to stop, so a requested stop
            # exits 0, and a SIGTERM that comes before uvicorn listens for it still stops it.
            signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
        server.run()
