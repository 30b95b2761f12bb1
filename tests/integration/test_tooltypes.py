"""Tools written the way Python developers write them: a Pydantic model, TypedDict or dataclass
as the input schema and the handler's payload, the docstring as the description, the return
annotation as the output schema; `--app-dir` for `tenure worker` and `tenure mcp`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

import tenure
from tenure import JobState
from tests.support.cli import cli_env, tenure_cli
from tests.support.timing import FAST
from tests.support.waiting import poll


class Refund(BaseModel):
    order: str = Field(description="the order id")
    cents: int = Field(gt=0)


class Receipt(BaseModel):
    order: str
    refunded: int


class Lookup(TypedDict):
    sku: str


@dataclass
class Ping:
    host: str
    count: int = 1


def run_one(app: tenure.App, kind: str, payload: Any) -> tenure.Job:
    with tenure.Worker(app, concurrency=1, poll_interval=0.05):
        return app.ledger.wait(app.submit(kind, payload), 30)


def test_a_pydantic_model_is_schema_payload_and_output(make_app: Callable[[], tenure.App]) -> None:
    """The model is the input schema, the handler gets a validated model, its docstring is the
    description, its returned model is stored as JSON and described by the output schema; a
    payload that does not fit fails the job `invalid_payload`, naming the field, not the
    value."""
    app = make_app()
    seen: list[Any] = []

    @app.job("refund", tool=True, input_schema=Refund, **FAST)
    def refund(ctx: tenure.JobContext, payload: Refund) -> Receipt:
        """Refund an order, once."""
        seen.append(payload)
        return Receipt(order=payload.order, refunded=payload.cents)

    job_class = app.job_classes["refund"]
    assert job_class.description == "Refund an order, once."
    assert job_class.input_schema is not None
    assert job_class.input_schema["properties"]["cents"] == {
        "exclusiveMinimum": 0,
        "title": "Cents",
        "type": "integer",
    }
    assert job_class.input_schema["required"] == ["order", "cents"]
    assert job_class.output_schema is not None
    assert set(job_class.output_schema["properties"]) == {"order", "refunded"}
    done = run_one(app, "refund", {"order": "o-1", "cents": 5})
    assert (done.state, done.result) == (JobState.SUCCEEDED, {"order": "o-1", "refunded": 5})
    assert seen == [Refund(order="o-1", cents=5)]
    bad = run_one(app, "refund", {"order": "o-secret-77", "cents": -5})
    assert (bad.state, bad.error["code"]) == (JobState.FAILED, "invalid_payload")
    assert "cents" in bad.error["message"] and "o-secret-77" not in bad.error["message"]


def test_a_typed_dict_and_a_dataclass_work_as_payload_types(
    make_app: Callable[[], tenure.App],
) -> None:
    """The annotation alone makes the schema of a tool; an explicit description wins over the
    docstring; a dataclass payload arrives as the dataclass, defaults applied."""
    app = make_app()

    @app.job("ping", tool=True, **FAST)
    def ping(ctx: tenure.JobContext, payload: Ping) -> dict[str, Any]:
        """Ping a host."""
        return {"host": payload.host, "count": payload.count}

    @app.job("lookup", tool=True, description="Look a SKU up.", **FAST)
    def lookup(ctx: tenure.JobContext, payload: Lookup) -> Any:
        """Not this."""
        return payload["sku"]

    assert app.job_classes["ping"].input_schema == {
        "properties": {
            "host": {"title": "Host", "type": "string"},
            "count": {"default": 1, "title": "Count", "type": "integer"},
        },
        "required": ["host"],
        "title": "Ping",
        "type": "object",
    }
    assert app.job_classes["ping"].description == "Ping a host."
    assert app.job_classes["ping"].output_schema is None  # dict[str, Any] is not a schema type
    assert app.job_classes["lookup"].description == "Look a SKU up."
    assert app.job_classes["lookup"].input_schema["properties"] == {  # type: ignore[index]
        "sku": {"title": "Sku", "type": "string"}
    }
    assert run_one(app, "ping", {"host": "db-1"}).result == {"host": "db-1", "count": 1}
    assert run_one(app, "lookup", {"sku": "A-7"}).result == "A-7"


def test_a_class_that_is_not_a_tool_keeps_its_plain_payload(
    make_app: Callable[[], tenure.App],
) -> None:
    """Without tool=True or a typed input_schema, an annotation changes nothing."""
    app = make_app()

    @app.job("plain", **FAST)
    def plain(ctx: tenure.JobContext, payload: Ping) -> Any:
        return type(payload).__name__

    assert app.job_classes["plain"].payload_type is None
    assert run_one(app, "plain", {"host": "h"}).result == "dict"


def test_types_a_tool_cannot_carry_are_refused_at_registration(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    class WithCallable(BaseModel):
        callback: Callable[[], int]

    cases: list[tuple[Any, str]] = [
        (WithCallable, "has a field JSON Schema cannot express"),
        (int, "must be a JSON Schema dictionary, or a Pydantic model"),
        ([1], "must be a JSON Schema dictionary"),
    ]
    for schema, message in cases:
        with pytest.raises(tenure.InvalidJobClass, match=message):

            @app.job("bad", tool=True, description="x", input_schema=schema)
            def bad(ctx: tenure.JobContext, payload: Any) -> None: ...

    assert "bad" not in app.job_classes


TOOLS_MODULE = '''
from pydantic import BaseModel

import tenure

app = tenure.App()


class Order(BaseModel):
    order: str


class Total(BaseModel):
    order: str
    cents: int


@app.job("total", tool=True, lease=5, heartbeat=1, jitter=1)
def total(ctx, payload: Order) -> Total:
    """Total an order."""
    return Total(order=payload.order, cents=len(payload.order) * 100)
'''


@pytest.mark.slow
def test_app_dir_lets_worker_and_mcp_start_from_any_folder(db_url: str, tmp_path: Path) -> None:
    """An MCP client starts `tenure mcp` in its own folder: with --app-dir the app's module is
    found; the typed tool lists its output schema and answers with structured content. A
    missing folder is a usage error."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "typedtools.py").write_text(textwrap.dedent(TOOLS_MODULE))
    env = cli_env()
    worker = subprocess.Popen(
        [sys.executable, "-m", "tenure.cli", "--db", db_url, "worker", "typedtools:app",
         "--app-dir", str(project), "--poll", "0.05"],
        cwd=elsewhere, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "tenure.cli", "--db", db_url, "mcp", "typedtools:app",
                  "--app-dir", str(project), "--log-level", "warning"],
            env=env,
            cwd=str(elsewhere),
        )  # fmt: skip

        async def call() -> tuple[Any, Any]:
            async with Client(params) as mcp:
                tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
                return tools["total"], await mcp.call_tool("total", {"order": "o-12"})

        listed, answer = asyncio.run(call())
    finally:
        worker.terminate()
        worker.wait(15)
    assert listed.description == "Total an order."
    assert listed.output_schema["required"] == ["order", "cents"]
    assert not answer.is_error
    assert answer.structured_content == {"order": "o-12", "cents": 400}
    missing = tenure_cli("worker", "typedtools:app", "--app-dir", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "is not a folder" in missing.stderr
    poll(lambda: worker.poll() is not None, 5, "the worker to stop")


def test_task_support_takes_three_values(make_app: Callable[[], tenure.App]) -> None:
    app = make_app()
    for mode in ("optional", "forbidden", "required"):

        @app.job(f"tool_{mode}", tool=True, input_schema={"type": "object"}, task_support=mode)
        def handler(ctx: tenure.JobContext, payload: Any) -> None:
            """A tool."""

        assert app.job_classes[f"tool_{mode}"].task_support == mode
    with pytest.raises(tenure.InvalidJobClass, match="task_support must be one of"):

        @app.job("tool_sometimes", tool=True, input_schema={"type": "object"}, task_support="x")
        def sometimes(ctx: tenure.JobContext, payload: Any) -> None:
            """A tool."""


def test_a_tool_returning_content_answers_with_its_blocks_or_a_clear_error(
    make_app: Callable[[], tenure.App],
) -> None:
    """`returns_content=True`: MCP content blocks are the tool's answer as they are; a result
    that is not content is the call's error, naming where it is wrong."""
    from tenure.mcp.tools import job_result

    app = make_app()
    pixel = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}

    @app.job("shot", tool=True, input_schema={"type": "object"}, returns_content=True, **FAST)
    def shot(ctx: tenure.JobContext, payload: Any) -> Any:
        """A screenshot."""
        return payload["blocks"]

    good = run_one(app, "shot", {"blocks": [pixel, {"type": "text", "text": "the page"}]})
    answer = job_result(good, as_content=True)
    assert not answer.is_error
    assert [block.type for block in answer.content] == ["image", "text"]
    bad = run_one(app, "shot", {"blocks": [{"type": "image"}]})
    refused = job_result(bad, as_content=True)
    assert refused.is_error and "returned no MCP content blocks" in refused.content[0].text  # type: ignore[union-attr]
