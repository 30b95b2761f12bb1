"""`tenure mcp` never waits in silence: a call whose job no worker has claimed for 10 s says so
(a progress message to a caller that asked for progress, a `job_unclaimed` log line naming the
kind, a task's status message); an app with no tool job class is refused (exit 2); with
`--app-dir` a relative SQLite URL is the app folder's, and the server logs the database it
uses. Real processes: `tenure mcp` over streamable HTTP, the official client, `tenure worker`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

import tenure
from tests.support.cli import cli_env, tenure_cli
from tests.support.mcp_server import McpServer, connected
from tests.support.service import free_port
from tests.support.waiting import poll
from tests.support.workers import Workers

pytestmark = pytest.mark.slow


def logged(path: Path, event: str) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines() if path.exists() else []
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    return [entry for entry in entries if entry.get("event") == event]


def test_a_call_no_worker_takes_up_says_so_then_ends_when_one_comes(
    ledger: tenure.Ledger, db_url: str, workers: Workers, mcp_server: McpServer, tmp_path: Path
) -> None:
    key = ledger.operations.create_tenant("acme")
    mcp_server.start_http()
    seen: dict[str, Any] = {"progress": []}

    async def scenario() -> None:
        told = anyio.Event()

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            seen["progress"].append(message)
            if message and "no worker has claimed" in message:
                told.set()

        async def then_a_worker() -> None:
            await told.wait()
            await anyio.to_thread.run_sync(workers.start, db_url, "W")

        async with connected(mcp_server.over_http(key)) as mcp, anyio.create_task_group() as group:
            group.start_soon(then_a_worker)
            with anyio.fail_after(120):
                seen["call"] = await mcp.call_tool("ask_handbook", {}, progress_callback=progress)

    asyncio.run(scenario())
    assert not seen["call"].is_error, seen["call"]
    assert json.loads(seen["call"].content[0].text) == ["lib://holidays"]
    told = [m for m in seen["progress"] if m and "no worker has claimed" in m]
    assert len(told) == 1 and "'ask_handbook'" in told[0], seen["progress"]
    unclaimed = logged(tmp_path / "mcp-http.log", "job_unclaimed")
    assert [entry["kind"] for entry in unclaimed] == ["ask_handbook"]
    assert "payload" not in unclaimed[0]


def test_a_task_no_worker_takes_up_says_so_in_its_status(
    ledger: tenure.Ledger, mcp_server: McpServer, tmp_path: Path
) -> None:
    from tenure.mcp.client import DurableTasks, get_task

    key = ledger.operations.create_tenant("acme")
    mcp_server.start_http()

    async def scenario() -> list[str]:
        messages: list[str] = []
        async with connected(mcp_server.over_http(key, DurableTasks())) as mcp:
            job_id = ledger.submit("ask_handbook", {}, tenant="acme")
            first = await get_task(mcp.session, job_id)
            messages.append(str(first.status_message))

            async def said() -> bool:
                task = await get_task(mcp.session, job_id)
                messages.append(str(task.status_message))
                return "no worker has claimed" in messages[-1]

            with anyio.fail_after(60):
                while not await said():
                    await anyio.sleep(0.5)
        return messages

    messages = asyncio.run(scenario())
    assert messages[0] == "queued"
    assert "'ask_handbook'" in messages[-1] and "tenure worker" in messages[-1]
    assert len(logged(tmp_path / "mcp-http.log", "job_unclaimed")) == 1


def test_an_app_without_tools_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notools.py").write_text(
        "import tenure\napp = tenure.App()\n\n@app.job('report')\ndef report(ctx, p):\n"
        "    return 1\n"
    )
    refused = tenure_cli("mcp", "notools:app", "--app-dir", str(tmp_path))
    assert refused.returncode == 2, refused.stderr
    assert "tool=True" in refused.stderr and "Traceback" not in refused.stderr


def test_app_dir_anchors_a_relative_sqlite_url_and_the_database_is_logged(
    tmp_path: Path,
) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "client"
    project.mkdir()
    elsewhere.mkdir()
    (project / "jobs.py").write_text(
        textwrap.dedent(
            """
            import tenure
            app = tenure.App("sqlite:///tenure.db")

            @app.job("echo", tool=True, description="Echo.", input_schema={"type": "object"})
            def echo(ctx, payload):
                return payload
            """
        )
    )
    port = free_port()
    log = tmp_path / "mcp.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *[sys.executable, "-m", "tenure.cli", "mcp", "jobs:app", "--app-dir", str(project)],
                *["--transport", "streamable-http", "--no-auth", "--port", str(port)],
            ],
            stdout=out,
            stderr=out,
            cwd=elsewhere,
            env=cli_env(),
        )
    try:
        poll(lambda: logged(log, "mcp_listening"), 30, "tenure mcp to listen")
        database = logged(log, "mcp_database")[0]["database"]
        assert database == f"SQLite at {project / 'tenure.db'}"
        assert (project / "tenure.db").exists() and not (elsewhere / "tenure.db").exists()
    finally:
        proc.terminate()
        proc.wait(15)
