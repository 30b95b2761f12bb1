"""The official MCP Inspector's CLI (`@modelcontextprotocol/inspector --cli`) against `tenure
mcp` over stdio: `--strict` reports every tool-schema portability problem (a `type` array, a
schema a single-type dialect cannot take) and exits 6 on an error; tenure's own tools, the
conformance fixtures and tools written from Python types must draw no warning at all. .ci/run
installs the pinned Inspector (and the Node.js 22 it runs on) and says where in
$TENURE_TEST_MCP_INSPECTOR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import cli_env
from tests.support.processes import ROOT

pytest.importorskip("mcp")
pytestmark = [pytest.mark.slow, pytest.mark.conformance]

INSPECTOR_ENV = "TENURE_TEST_MCP_INSPECTOR"


def inspector(
    db_url: str, app: str, *arguments: str, home: Path
) -> subprocess.CompletedProcess[str]:
    """The Inspector's CLI run against `tenure mcp APP` (stdio, which it starts)."""
    prefix = os.environ.get(INSPECTOR_ENV)
    if not prefix:
        pytest.skip(f"${INSPECTOR_ENV} names no install of the MCP Inspector (.ci/run makes one)")
    node = Path(prefix) / "node_modules" / ".bin" / "node"
    cli = Path(prefix) / "node_modules" / ".bin" / "mcp-inspector"
    assert node.exists() and cli.exists(), f"no Inspector under {prefix}"
    env = cli_env(extra={"PYTHONPATH": str(ROOT), "HOME": str(home)})
    server = [sys.executable, "-m", "tenure.cli", "--db", db_url, "mcp", app]
    return subprocess.run(
        [str(node), str(cli), "--cli", *server, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env=env,
    )


def warnings_in(stderr: str) -> list[str]:
    """What the Inspector or the server said on stderr beyond tenure's info log lines (the
    server logs the database it uses at start)."""

    def info(line: str) -> bool:
        try:
            return bool(json.loads(line).get("level") == "info")
        except (ValueError, AttributeError):
            return False

    return [line for line in stderr.splitlines() if line.strip() and not info(line)]


@pytest.mark.parametrize(
    "app",
    ["tests.mcp_conformance_app:app", "tests.support.apps:app", "tests.support.typed_tools:app"],
)
def test_strict_mode_finds_no_schema_problem(db_url: str, app: str, tmp_path: Path) -> None:
    listed = inspector(db_url, app, "--strict", "--method", "tools/list", home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert warnings_in(listed.stderr) == [], listed.stderr
    names = {tool["name"] for tool in json.loads(listed.stdout)["tools"]}
    assert {"tenure_status", "tenure_result", "tenure_signal", "tenure_cancel"} <= names


def test_a_call_through_the_inspector_is_a_tool_error_for_an_unknown_job(
    db_url: str, tmp_path: Path
) -> None:
    called = inspector(
        db_url,
        "tests.support.typed_tools:app",
        "--method", "tools/call", "--tool-name", "tenure_status",
        "--tool-arg", "id=00000000-0000-0000-0000-000000000000",
        home=tmp_path,
    )  # fmt: skip
    assert called.returncode == 5, called.stdout + called.stderr  # the Inspector's tool_is_error
    answer, _ = json.JSONDecoder().raw_decode(called.stdout)
    assert answer["isError"] is True
    assert "no job has the id" in answer["content"][0]["text"]
