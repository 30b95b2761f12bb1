"""`tenure.integrations.fastmcp` as a FastMCP user runs it: the server of
tests/support/fastmcp_app.py started with `fastmcp run` over streamable HTTP, its jobs run by
`tenure worker` processes (one SIGKILLed inside its effect), a fenced bank on loopback, and
FastMCP's own `Client` calling, retrying with the same key, and cancelling."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastmcp")

import httpx2  # FastMCP's HTTP client
from fastmcp import Client, Context, FastMCP
from fastmcp.client.client import CallToolResult
from fastmcp.tools import tool

import tenure
from tenure import JobState
from tenure.demo.bank import BankServer
from tenure.errors import InvalidJobClass
from tenure.integrations.fastmcp import KEY_META, durable
from tenure.testing.process import spawn_worker
from tests.support.cli import cli_env
from tests.support.fixtures import applied, kill_in_effect_then_start_another
from tests.support.processes import ROOT
from tests.support.service import free_port
from tests.support.waiting import poll
from tests.support.workers import Workers

pytestmark = pytest.mark.slow
SERVER = "tests/support/fastmcp_app.py:mcp"
APP = "tests.support.fastmcp_app:app"


class FastMcpServer:
    """`fastmcp run tests/support/fastmcp_app.py:mcp` over streamable HTTP on a free port, on
    the test's database; it can be killed and started again on the same port."""

    def __init__(self, db_url: str, folder: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.env = cli_env(db_url, {"PYTHONPATH": str(ROOT), "FASTMCP_CHECK_FOR_UPDATES": "off"})
        self.log = folder / "fastmcp.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "fastmcp.cli", "run", SERVER, "--transport", "http"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*command, "--host", "127.0.0.1", "--port", str(self.port), "--no-banner"],
                stdout=log,
                stderr=log,
                env=self.env,
                cwd=ROOT,
            )
        poll(self._listens, 30, f"fastmcp run to listen ({self.log})")

    def _listens(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-2000:]
        try:
            httpx.get(self.url, timeout=1)
        except httpx.TransportError:
            return False
        return True

    def stop(self, how: signal.Signals = signal.SIGTERM) -> int | None:
        """Stop it with `how`, SIGKILL if it has not stopped 15 s later; its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.proc.send_signal(how)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[FastMcpServer]:
    running = FastMcpServer(db_url, tmp_path)
    running.start()
    yield running
    running.stop()


@pytest.fixture
def fastmcp_workers(workers: Workers, monkeypatch: pytest.MonkeyPatch) -> Workers:
    """The `workers` fixture's processes running the FastMCP server's app instead of
    tests.support.apps's (the same logs, markers and SIGKILL helpers)."""

    def spawn(target: str, *args: Any, **options: Any) -> subprocess.Popen[bytes]:
        return spawn_worker(APP, *args, **options)

    monkeypatch.setattr("tests.support.workers.spawn_worker", spawn)
    return workers


def key(value: Any) -> dict[str, Any]:
    return {KEY_META: value}


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result
    return str(result.content[0].text)  # type: ignore[union-attr]


def test_a_call_is_a_job_run_by_a_worker_and_bad_arguments_make_no_job(
    ledger: tenure.Ledger,
    db_url: str,
    fastmcp_workers: Workers,
    bank: BankServer,
    server: FastMcpServer,
) -> None:
    """The tool lists FastMCP's schema without the job's context; arguments of the wrong type,
    out of range, holding a NUL or nested too deep, and a malformed key are tool errors and
    make no job; a keyed call answers the job's result (the job of the tool's kind, its
    payload the typed arguments with their defaults), again for the same key; a call without
    a key is a new job; a failed job is a tool error saying why."""
    fastmcp_workers.start(db_url, "W", env={"TENURE_TEST_RECEIVER": bank.url})
    nested: Any = 3
    for _ in range(80):  # FastMCP takes any JSON for `note`; a job's payload nests 64 deep
        nested = [nested]

    async def scenario() -> dict[str, Any]:
        async with Client(server.url) as client:
            listed = {tool.name: tool for tool in await client.list_tools()}
            bad = {
                "type": await client.call_tool("pay", {"amount": "seven"}, raise_on_error=False),
                "range": await client.call_tool("pay", {"amount": 0}, raise_on_error=False),
                "NUL": await client.call_tool(
                    "pay", {"amount": 2, "memo": "a\x00b"}, raise_on_error=False
                ),
                "deep": await client.call_tool("keep", {"note": nested}, raise_on_error=False),
                "key": await client.call_tool(
                    "pay", {"amount": 2}, meta=key(17), raise_on_error=False
                ),
            }
            seen = {"listed": listed, "bad": bad, "jobs": ledger.list()}
            seen["paid"] = await client.call_tool("pay", {"amount": 4}, meta=key("order-4"))
            seen["again"] = await client.call_tool(
                "pay", {"amount": 4, "memo": ""}, meta=key("order-4")
            )
            for _ in range(2):
                await client.call_tool("keep", {"note": {"a": [1, "x"]}})
            seen["refund"] = await client.call_tool(
                "refund", {"order": "A-1"}, raise_on_error=False
            )
        return seen

    seen = asyncio.run(scenario())
    schema = seen["listed"]["pay"].input_schema
    assert set(schema["properties"]) == {"amount", "memo"} and schema["required"] == ["amount"]
    assert schema["properties"]["amount"]["minimum"] == 1
    assert seen["listed"]["pay"].description == "Pay an amount, once."
    bad = seen["bad"]
    assert "amount" in error_text(bad["type"]) and "amount" in error_text(bad["range"])
    assert "no job was made" in error_text(bad["NUL"]) and "NUL" in error_text(bad["NUL"])
    assert "no job was made" in error_text(bad["deep"]) and "deep" in error_text(bad["deep"])
    assert "idempotency key" in error_text(bad["key"])
    assert seen["jobs"] == []
    assert seen["paid"].structured_content == {"paid": 4, "by": "W"}
    assert seen["again"].structured_content == seen["paid"].structured_content
    (job,) = ledger.list(kind="pay")
    assert (job.state, job.idempotency_key) == (JobState.SUCCEEDED, "order-4")
    assert job.payload == {"amount": 4, "memo": ""}
    assert [j.state for j in ledger.list(kind="keep")] == [JobState.SUCCEEDED] * 2
    (refund,) = ledger.list(kind="refund")
    assert error_text(seen["refund"]) == (
        f"job {refund.id} failed after 1 attempt(s): order A-1 was never paid"
    )
    assert applied(bank) == Counter({f"tool-job:{job.id}:charge": 1})


def test_a_worker_killed_mid_effect_gives_one_charge_and_the_same_answer(
    ledger: tenure.Ledger,
    db_url: str,
    fastmcp_workers: Workers,
    bank: BankServer,
    server: FastMcpServer,
    tmp_path: Path,
) -> None:
    """The call's worker is SIGKILLed after the bank applied the charge; a second worker takes
    the job over and the call answers with its result; a retry with the same key gets the
    same answer from the same job; the bank applied the charge once."""
    env = {"TENURE_TEST_RECEIVER": bank.url}
    doomed = fastmcp_workers.start(db_url, "A", env={**env, "TENURE_TEST_KILL_AT": "in_effect"})

    async def scenario() -> tuple[CallToolResult, CallToolResult]:
        async with Client(server.url) as client:
            call = asyncio.create_task(client.call_tool("pay", {"amount": 5}, meta=key("order-5")))
            await asyncio.to_thread(
                kill_in_effect_then_start_another, fastmcp_workers, db_url, tmp_path, doomed, env
            )
            first = await asyncio.wait_for(call, 60)
            return first, await client.call_tool("pay", {"amount": 5}, meta=key("order-5"))

    first, again = asyncio.run(scenario())
    assert first.structured_content == again.structured_content == {"paid": 5, "by": "B"}
    (job,) = ledger.list(kind="pay")
    assert (job.state, job.attempt, job.idempotency_key) == (JobState.SUCCEEDED, 2, "order-5")
    assert applied(bank) == Counter({f"tool-job:{job.id}:charge": 1})


def test_a_call_ended_by_the_server_or_abandoned_leaves_the_job_for_the_retry_to_find(
    ledger: tenure.Ledger,
    db_url: str,
    fastmcp_workers: Workers,
    bank: BankServer,
    server: FastMcpServer,
    tmp_path: Path,
) -> None:
    """While a worker holds the call's job, the call ends three times without an answer: its
    client (on the 2026-07-28 protocol, FastMCP's default) abandons it, which closes its
    stream; the FastMCP server is stopped (SIGTERM) and started again; it is SIGKILLed and
    started again. None of these cancels the job: the client's retry with the same key finds
    it, the same answer, one charge."""
    env = {"TENURE_TEST_RECEIVER": bank.url, "TENURE_TEST_KILL_AT": "in_effect"}
    fastmcp_workers.start(db_url, "W", env=env)

    async def interrupted(how: str | signal.Signals) -> list[CallToolResult | BaseException]:
        ended: list[CallToolResult | BaseException] = []
        # Leaving the client reaches for a stopped server too: the transport's error.
        with contextlib.suppress(httpx2.TransportError):
            async with Client(server.url) as client:
                call = asyncio.create_task(
                    client.call_tool("pay", {"amount": 6}, meta=key("order-6"))
                )
                await asyncio.to_thread(
                    poll, lambda: list(tmp_path.glob("at-in_effect-*")), 30, "W in the effect"
                )
                if isinstance(how, signal.Signals):
                    code = await asyncio.to_thread(server.stop, how)
                    # A SIGTERM stops it by itself, cancelling its calls on the way out.
                    assert (code == -signal.SIGKILL) == (how is signal.SIGKILL), code
                else:
                    call.cancel()
                ended += await asyncio.gather(call, return_exceptions=True)
        return ended

    async def retry() -> CallToolResult:
        async with Client(server.url) as client:
            answer: CallToolResult = await client.call_tool(
                "pay", {"amount": 6}, meta=key("order-6")
            )
            return answer

    (abandoned,) = asyncio.run(interrupted("abandon"))
    assert isinstance(abandoned, asyncio.CancelledError)
    for stop in (signal.SIGTERM, signal.SIGKILL):
        (ended,) = asyncio.run(interrupted(stop))
        assert isinstance(ended, Exception), ended  # the call's connection broke
        server.start()
        # A stopped server has finished with its calls (the abandoned one included).
        (job,) = ledger.list(kind="pay")
        assert job.state is JobState.RUNNING
    (tmp_path / "release-in_effect").touch()
    answer = asyncio.run(retry())
    assert answer.structured_content == {"paid": 6, "by": "W"}
    (job,) = ledger.list(kind="pay")
    assert (job.state, job.attempt) == (JobState.SUCCEEDED, 1)
    assert applied(bank) == Counter({f"tool-job:{job.id}:charge": 1})


def test_a_client_cancelling_its_call_cancels_the_job_and_the_fence_refuses_its_charge(
    ledger: tenure.Ledger,
    db_url: str,
    fastmcp_workers: Workers,
    bank: BankServer,
    server: FastMcpServer,
    tmp_path: Path,
) -> None:
    """A client on a session (FastMCP's legacy mode) cancels its call while the worker is
    about to send the charge: the client's `notifications/cancelled` cancels the job, and the
    charge the worker sends late is refused by the bank's fence."""
    env = {"TENURE_TEST_RECEIVER": bank.url, "TENURE_TEST_KILL_AT": "before_send"}
    fastmcp_workers.start(db_url, "W", env=env)

    async def scenario() -> None:
        async with Client(server.url, mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("pay", {"amount": 8}, meta=key("order-8")))
            await asyncio.to_thread(
                poll, lambda: list(tmp_path.glob("at-before_send-*")), 30, "W before its send"
            )
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await client.ping()  # the session goes on

    asyncio.run(scenario())
    (job,) = ledger.list(kind="pay")
    poll(lambda: ledger.get(job.id).state is JobState.CANCELLED, 30, "the job cancelled")
    (tmp_path / "release-before_send").touch()
    refused = poll(
        lambda: [e for e in bank.bank.events if e.what == "refused"], 30, "the bank's refusal"
    )
    assert [e.key for e in refused] == [f"tool-job:{job.id}:charge"]
    assert applied(bank) == Counter()


def test_a_durable_tool_is_refused_where_it_cannot_be_one(
    make_app: Any,
) -> None:
    """Under FastMCP's tool decorator only (above it, FastMCP's metadata would be left on the
    function it never registers), with the job's context first, not FastMCP's, and named
    arguments; nothing is registered."""
    app = make_app()

    @tool(name="plain")
    def plain(ctx: tenure.JobContext, amount: int) -> int:
        return amount

    with pytest.raises(InvalidJobClass, match=r"under @mcp\.tool"):
        durable(app)(plain)

    def fastmcps(ctx: Context, amount: int) -> int:
        return amount

    def no_context() -> int:
        return 1

    def starred(ctx: tenure.JobContext, *amounts: int) -> int:
        return sum(amounts)

    misuses: list[tuple[Callable[..., Any], str]] = [
        (fastmcps, "not FastMCP's"), (no_context, "first parameter"), (starred, "named")
    ]  # fmt: skip
    for fn, words in misuses:
        with pytest.raises(InvalidJobClass, match=words):
            durable(app)(fn)
    assert app.job_classes == {}


def test_a_tenant_function_keys_each_tenants_calls_apart(make_app: Any) -> None:
    """`tenant=` a function of FastMCP's Context: the job is that tenant's, and the same key
    under another tenant is another job (a worker on threads, FastMCP's in-memory client)."""
    app = make_app()
    mcp = FastMCP("tenants")
    tenants = iter(["acme", "acme", "globex"])

    @mcp.tool
    @durable(app, tenant=lambda context: next(tenants) if isinstance(context, Context) else "")
    def echo(ctx: tenure.JobContext, words: list[str]) -> dict[str, Any]:
        return {"words": words, "tenant": ctx.tenant}

    async def three_calls() -> list[Any]:
        async with Client(mcp) as client:
            return [
                (await client.call_tool("echo", {"words": ["a"]}, meta=key("k"))).data
                for _ in range(3)
            ]

    with tenure.Worker(app):
        answers = asyncio.run(three_calls())
    assert answers == [{"words": ["a"], "tenant": t} for t in ("acme", "acme", "globex")]
    assert sorted(j.tenant for j in app.ledger.list(kind="echo", tenant=None)) == [
        "acme",
        "globex",
    ]


def test_without_fastmcp_the_import_names_the_extra() -> None:
    """`import tenure.integrations.fastmcp` without FastMCP installed raises MissingExtra with
    the install command, not a bare ModuleNotFoundError from deep inside."""
    code = (
        "import sys; sys.modules['fastmcp'] = None\n"
        "from tenure.extras import MissingExtra\n"
        "try:\n    import tenure.integrations.fastmcp\n"
        "except MissingExtra as exc:\n    print(exc)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'tenure[fastmcp]'" in ran.stdout, ran.stderr
