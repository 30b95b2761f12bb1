"""The official MCP conformance suite (`@modelcontextprotocol/conformance`, every server
scenario) against `tenure mcp --transport streamable-http --no-auth`, with a `tenure worker`
running tests/mcp_conformance_app.py beside it. The suite's own baseline check decides: a
failure not in tests/mcp-conformance-baseline.yml fails the test, and so does an entry that
now passes. .ci/run installs the pinned suite (and the Node.js 22 it needs) and says where in
$TENURE_TEST_MCP_CONFORMANCE."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import cli_env, tenure_cli
from tests.support.processes import ROOT
from tests.support.service import free_port
from tests.support.waiting import poll

pytest.importorskip("mcp")
pytestmark = [pytest.mark.slow, pytest.mark.conformance]

APP = "tests.mcp_conformance_app:app"
BASELINE = ROOT / "tests" / "mcp-conformance-baseline.yml"
SUITE_ENV = "TENURE_TEST_MCP_CONFORMANCE"


def suite() -> tuple[Path, Path]:
    """The Node.js 22 binary and the suite's entry point installed under $SUITE_ENV."""
    prefix = os.environ.get(SUITE_ENV)
    if not prefix:
        pytest.skip(f"${SUITE_ENV} names no install of the conformance suite (.ci/run makes one)")
    node = Path(prefix) / "node_modules" / ".bin" / "node"
    entry = Path(prefix) / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist"
    assert node.exists() and (entry / "index.js").exists(), f"no suite under {prefix}"
    return node, entry / "index.js"


# The suite's fixture tools this app provides (the others are in the baseline, with why).
FIXTURES = {
    "test_simple_text", "test_error_handling", "test_tool_with_progress", "test_image_content",
    "test_audio_content", "test_embedded_resource", "test_multiple_content_types",
    "json_schema_2020_12_tool", "greet", "slow_compute", "failing_job", "protocol_error_job",
    "confirm_delete", "test_input_required_result_elicitation",
    "test_input_required_result_sampling", "test_input_required_result_capabilities",
    "test_input_required_result_list_roots", "test_input_required_result_request_state",
    "test_input_required_result_tampered_state", "test_input_required_result_multi_round",
    "test_tool_with_logging", "test_sampling", "test_elicitation",
    "test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums",
    "test_logging_tool", "test_streaming_elicitation", "test_missing_capability",
    "test_input_required_result_multiple_inputs", "multi_input", "test_tool_with_task",
}  # fmt: skip


def answers(url: str) -> bool:
    """Whether the server answers an `initialize` (a session-less ping is refused: clients of
    protocols before 2026-07-28 hold a session)."""
    headers = {"Accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}}
    hello["clientInfo"] = {"name": "probe", "version": "1"}
    try:
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        return httpx.post(url, json=initialize, headers=headers, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A worker and `tenure mcp --no-auth` on a free loopback port; the URL of /mcp."""
    port = free_port()
    env = cli_env(extra={"PYTHONPATH": str(ROOT)})
    base = ["-m", "tenure.cli", "--db", db_url]
    logs = [open(tmp_path / name, "ab") for name in ("worker.log", "mcp.log")]  # noqa: SIM115
    commands = [
        [*base, "worker", APP, "--poll", "0.05", "--concurrency", "8"],
        [*base, "mcp", APP, "--transport", "streamable-http", "--no-auth", "--port", str(port)],
    ]
    procs = [
        subprocess.Popen([sys.executable, *command], cwd=ROOT, env=env, stdout=log, stderr=log)
        for command, log in zip(commands, logs, strict=True)
    ]
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        poll(lambda: answers(url), 30, "tenure mcp to answer")
        yield url
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(15)
        for log in logs:
            log.close()
    assert b"mcp_without_auth" in (tmp_path / "mcp.log").read_bytes()


def test_the_app_provides_every_fixture_as_a_tool() -> None:
    """Checked before the suite runs: a fixture missing from the app is named here, not found
    as an "unknown tool" among the suite's failures."""
    from tests.mcp_conformance_app import app

    tools = {kind for kind, job_class in app.job_classes.items() if job_class.tool}
    assert FIXTURES - tools == set(), f"the conformance app lacks {sorted(FIXTURES - tools)}"


def test_every_scenario_passes_or_is_in_the_baseline(served: str, tmp_path: Path) -> None:
    node, entry = suite()
    run = subprocess.run(
        [str(node), str(entry), "server", "--url", served, "--suite", "all",
         "--expected-failures", str(BASELINE), "--output-dir", str(tmp_path / "results")],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Baseline check passed" in run.stdout
    print(run.stdout[-1500:])  # the suite's own summary, for the record (pytest -s)


def test_no_auth_is_refused_off_loopback_and_on_stdio() -> None:
    """Nothing is served: `--no-auth` on another address, or without streamable HTTP."""
    wide = tenure_cli(
        "mcp",
        APP,
        "--transport",
        "streamable-http",
        "--no-auth",
        "--host",
        "0.0.0.0",  # noqa: S104
    )
    assert wide.returncode == 2 and "loopback" in wide.stderr
    assert "Traceback" not in wide.stderr
    stdio = tenure_cli("mcp", APP, "--no-auth")
    assert stdio.returncode == 2 and "streamable-http" in stdio.stderr
