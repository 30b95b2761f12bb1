"""The MCP `tools/call` round trip of a no-op tool through `tenure mcp`, driven by the official
`mcp` client, with one `tenure worker` process (default settings) running the jobs.

    python bench/mcp_roundtrip.py [--postgres URL] [--rounds 100]

Printed per backend and transport, p50 / p95 in milliseconds: `tools/list` (the protocol's own
round trip, no job) and `tools/call` (submit, a worker claims and runs the job, its end reaches
the server, the result comes back). On SQLite the worker (another process) learns of a submit
at its idle poll and the server of an end at its fallback poll; on PostgreSQL both by NOTIFY.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `python bench/mcp_roundtrip.py` from the checkout

import tenure  # noqa: E402
from bench.wait_latency import fresh_schema, percentiles  # noqa: E402

APP = "bench.mcp_app:app"


def _env(url: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TENURE_DATABASE_URL": url}


def _tenure(*args: str) -> list[str]:
    return [sys.executable, "-m", "tenure.cli", *args]


async def _rounds(client: Client, rounds: int) -> tuple[list[float], list[float]]:
    listing, calls = [], []
    async with client:
        await client.call_tool("noop", {"n": -1})  # warm: connections, the worker's first claim
        for n in range(rounds):
            started = time.perf_counter()
            await client.list_tools()
            listing.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            answer = await client.call_tool("noop", {"n": n})
            calls.append((time.perf_counter() - started) * 1000)
            assert answer.structured_content == {"n": n}, answer
    return listing, calls


def measure(url: str, rounds: int, folder: Path) -> dict[str, tuple[list[float], list[float]]]:
    with tenure.connect(url) as ledger:
        key = ledger.operations.create_tenant("bench")
    log = open(folder / "processes.log", "ab")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        _tenure("worker", APP), env=_env(url), cwd=ROOT, stdout=log, stderr=log
    )
    port = 18090
    server = subprocess.Popen(
        _tenure("mcp", APP, "--transport", "streamable-http", "--port", str(port)),
        env=_env(url),
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.post(f"http://127.0.0.1:{port}/mcp", json={})
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        stdio = StdioServerParameters(
            command=sys.executable,
            args=["-m", "tenure.cli", "mcp", APP, "--log-level", "warning"],
            env=_env(url),
            cwd=str(ROOT),
        )
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
        over_http = Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http))
        return {
            "stdio": asyncio.run(_rounds(Client(stdio), rounds)),
            "streamable HTTP": asyncio.run(_rounds(over_http, rounds)),
        }
    finally:
        for proc in (server, worker):
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("TENURE_TEST_POSTGRES_URL"))
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    heads = ("backend, transport", "tools/list p50 / p95 ms", "tools/call p50 / p95 ms")
    print(f"{heads[0]:30} {heads[1]:>26} {heads[2]:>26}")
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        backends = [("SQLite", f"sqlite:///{folder}/mcp.db")]
        if args.postgres:
            backends.append(("PostgreSQL", fresh_schema(args.postgres, "tenure_bench_mcp")))
        for backend, url in backends:
            for transport, (listing, calls) in measure(url, args.rounds, folder).items():
                label = f"{backend}, {transport}"
                print(f"{label:30} {percentiles(listing):>26} {percentiles(calls):>26}")
    if not args.postgres:
        print("PostgreSQL skipped (pass --postgres URL)")


if __name__ == "__main__":
    main()
