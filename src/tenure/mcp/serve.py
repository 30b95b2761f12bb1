"""`tenure mcp`: the server over stdio, or over streamable HTTP at /mcp where a bearer key maps
to a tenant exactly as in `tenure serve` (a tenant key, or the admin key by its digest)."""

from __future__ import annotations

import ipaddress
import logging
from typing import Any, Literal

import anyio
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.stdio import stdio_server
from pydantic import AnyHttpUrl

from tenure.app import App
from tenure.errors import TenureError
from tenure.ledger import Ledger
from tenure.logs import emit
from tenure.mcp.server import ADMIN_SCOPE, PRINCIPAL_CLAIM, TenureMcp

log = logging.getLogger("tenure")
Transport = Literal["stdio", "streamable-http"]


class TenantKeys:
    """The SDK's token verifier over tenure's API keys: the token's client id is the tenant."""

    def __init__(self, ledger: Ledger, admin_key_sha256: str | None) -> None:
        self.ledger, self.admin_key_sha256 = ledger, admin_key_sha256

    async def verify_token(self, token: str) -> AccessToken | None:
        found = await anyio.to_thread.run_sync(
            self.ledger.operations.identify, token, self.admin_key_sha256
        )
        if found is None:
            return None
        if found.tenant is None:
            return AccessToken(token=token, client_id="admin", scopes=[ADMIN_SCOPE])
        claims = None if found.binding is None else {PRINCIPAL_CLAIM: found.binding.value}
        return AccessToken(token=token, client_id=found.tenant, scopes=[], claims=claims)


def http_app(
    app: App,
    ledger: Ledger,
    *,
    host: str = "127.0.0.1",
    port: int = 8090,
    admin_key_sha256: str | None = None,
    no_auth_tenant: str | None = None,
    stateless: bool = False,
) -> Any:
    """The Starlette app of streamable HTTP at /mcp. A request of the 2026 protocol stands
    alone, so a restart or another replica loses nothing (a task is its job). A client of an
    earlier protocol holds a session (`Mcp-Session-Id`) on this process, so that a call's job
    can ask it a question on the call's stream (elicitation, sampling, roots) and log to it;
    the jobs themselves are in the database, so a restart loses only the session (the client
    starts another and finds its job again by its key). `stateless` keeps no session for
    them either: any replica answers, and a question waits for `tenure_signal`. With
    `no_auth_tenant` (a loopback host only), no key is asked and every call acts for that
    tenant."""
    if no_auth_tenant is not None:
        check_loopback(host)
        server = TenureMcp(app, ledger, tenant=no_auth_tenant).server
        return server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=stateless, host=host
        )
    server = TenureMcp(app, ledger, tenant=None).server
    return server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=stateless,
        host=host,
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(f"http://{host}:{port}"),
            resource_server_url=None,
            validate_token_resource=False,
        ),
        token_verifier=TenantKeys(ledger, admin_key_sha256),
    )


def run_mcp(
    app: App,
    ledger: Ledger,
    *,
    transport: Transport,
    tenant: str = "default",
    host: str = "127.0.0.1",
    port: int = 8090,
    admin_key_sha256: str | None = None,
    log_level: str = "info",
    no_auth: bool = False,
    stateless: bool = False,
) -> None:
    """Serve until stdin closes (stdio) or SIGINT/SIGTERM (HTTP). `no_auth` (streamable HTTP
    on a loopback host only): no bearer key, every call acts for `tenant`."""
    known = transport != "stdio" and not no_auth
    if not known and tenant not in {t.name for t in ledger.operations.tenants()} | {"default"}:
        raise TenureError(f"there is no tenant {tenant!r}: see `tenure tenant list`")
    if transport == "stdio":
        anyio.run(_stdio, TenureMcp(app, ledger, tenant=tenant))
        return
    import uvicorn

    asgi = http_app(
        app,
        ledger,
        host=host,
        port=port,
        admin_key_sha256=admin_key_sha256,
        no_auth_tenant=tenant if no_auth else None,
        stateless=stateless,
    )
    if no_auth:
        emit(log, logging.WARNING, "mcp_without_auth", host=host, tenant=tenant)
    emit(log, logging.INFO, "mcp_listening", url=f"http://{host}:{port}/mcp")
    uvicorn.run(asgi, host=host, port=port, log_level=log_level, access_log=False)


async def _stdio(mcp: TenureMcp) -> None:
    async with stdio_server() as (read, write):
        await mcp.server.run(read, write, mcp.server.create_initialization_options())


def check_loopback(host: str) -> None:
    """`--no-auth` serves anyone who reaches the port: only a loopback address may be bound."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise TenureError(
            f"--no-auth serves without a key: bind it to a loopback address (127.0.0.1, ::1 "
            f"or localhost), not {host!r}"
        )
