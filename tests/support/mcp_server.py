"""`tenure mcp` as a user starts it, for the tests that drive it with the official `mcp` SDK's
client: over stdio (the client spawns it) or streamable HTTP with a bearer key."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tenure import keys
from tests.support.cli import cli_env
from tests.support.processes import ROOT
from tests.support.service import free_port
from tests.support.waiting import poll

APP = "tests.support.apps:app"


class McpServer:
    """`tenure mcp` as a user starts it: stdio (the client spawns it) or streamable HTTP."""

    def __init__(self, db_url: str, folder: Path) -> None:
        self.db_url, self.folder = db_url, folder
        self.admin = keys.new_admin_key()
        self.env = cli_env(
            extra={"PYTHONPATH": str(ROOT), "TENURE_ADMIN_KEY_SHA256": self.admin.key_sha256}
        )
        self.http: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.options: tuple[str, ...] = ()

    def stdio(self, *extensions: Any, **options: Any) -> Client:
        """A client that starts the server; `options` are the SDK `Client`'s."""
        params = StdioServerParameters(
            command=sys.executable,
            args=[*self._command()[1:], "--log-level", "warning"],
            env=self.env,
            cwd=str(ROOT),
        )
        return Client(params, extensions=list(extensions) or None, **options)

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "tenure.cli", "--db", self.db_url, "mcp", APP]

    def start_http(self, port: int | None = None, *options: str) -> None:
        """`tenure mcp --transport streamable-http` on `port` (a free one by default), with
        more of its command-line `options`."""
        self.options = options
        self.port = port or free_port()
        log = open(self.folder / "mcp-http.log", "ab")  # noqa: SIM115 - the process keeps it
        self.http = subprocess.Popen(
            [
                *self._command(),
                "--transport",
                "streamable-http",
                "--port",
                str(self.port),
                *options,
            ],
            stdout=log,
            stderr=log,
            env=self.env,
            cwd=ROOT,
        )
        poll(self._answers, 30, "tenure mcp to listen")

    def _answers(self) -> bool:
        try:
            return httpx.post(f"{self.url}", json={}).status_code == 401
        except httpx.TransportError:
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def over_http(self, key: str, *extensions: Any, **options: Any) -> Client:
        """A client with `key`; `options` are the SDK `Client`'s (callbacks, say)."""
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=300)
        )
        transport = streamable_http_client(self.url, http_client=http)
        return Client(transport, extensions=list(extensions) or None, **options)

    def kill_and_restart_http(self) -> None:
        """SIGKILL the HTTP server (its sessions are lost) and start another on the same port."""
        assert self.http is not None
        self.http.send_signal(signal.SIGKILL)
        self.http.wait(15)
        self.start_http(self.port, *self.options)

    def stop(self) -> None:
        if self.http is not None and self.http.poll() is None:
            self.http.send_signal(signal.SIGTERM)
            self.http.wait(15)


@asynccontextmanager
async def connected(client: Client) -> AsyncIterator[Client]:
    async with client:
        yield client


def meta(values: dict[str, Any]) -> types.RequestParamsMeta:
    """A call's `_meta` (an open map the SDK types as a TypedDict with extra items)."""
    return cast(types.RequestParamsMeta, values)
