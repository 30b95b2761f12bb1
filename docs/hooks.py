"""MkDocs hook: the reference pages' generated parts, made from the code at build time (the
argument parser, the OpenAPI document, the MCP server's own tools, the event and error types,
the metric collectors), so the reference cannot drift from what tenure does.

A page asks for a part with a line `<!-- generated: NAME -->`.
"""

from __future__ import annotations

import argparse
import inspect
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)
ROOT = Path(__file__).resolve().parents[1]


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _cli() -> str:
    from tenure.cli import build_parser

    out: list[str] = []

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if words:
            out.append(f"{'#' * min(len(words) + 1, 4)} `tenure {' '.join(words)}`\n")
            if parser.description:
                out.append(parser.description + "\n")
            out.append("```text\n" + parser.format_usage().strip() + "\n```\n")
            rows = []
            for action in parser._actions:
                if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                    continue
                name = ", ".join(action.option_strings) or action.metavar or action.dest
                default = action.default
                shown = "" if default in (None, argparse.SUPPRESS, False) else f"`{default}`"
                rows.append(f"| `{_cell(name)}` | {_cell(action.help or '')} | {_cell(shown)} |")
            if rows:
                out.append("| argument | meaning | default |\n| --- | --- | --- |")
                out.extend(rows)
                out.append("")
        for sub in subs:
            for name, child in sub.choices.items():
                walk(child, [*words, name])

    walk(build_parser(), [])
    return "\n".join(out)


def _openapi() -> dict[str, Any]:
    import tenure
    from tenure.service.app import create_app

    with (
        tempfile.TemporaryDirectory() as folder,
        tenure.connect(f"sqlite:///{folder}/docs.db") as ledger,
    ):
        fastapi_app: Any = getattr(create_app(ledger), "app")  # noqa: B009 (RequestLimits wraps it)
        schema: dict[str, Any] = fastapi_app.openapi()
        return schema


def _http() -> str:
    schema = _openapi()
    out = [
        f"OpenAPI {schema['openapi']}, `{schema['info']['title']}` {schema['info']['version']}: "
        "`tenure serve` answers the whole document at `/openapi.json`.\n",
        "| method | path | what it does | answers |",
        "| --- | --- | --- | --- |",
    ]
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            codes = ", ".join(sorted(operation.get("responses", {})))
            summary = operation.get("summary") or operation.get("operationId", "")
            out.append(f"| {method.upper()} | `{_cell(path)}` | {_cell(summary)} | {codes} |")
    return "\n".join(out) + "\n"


def _mcp_tools() -> str:
    from tenure.mcp.tools import OWN_TOOLS

    out = ["| tool | what it does | arguments |", "| --- | --- | --- |"]
    for name, tool in OWN_TOOLS.items():
        properties = tool.input_schema.get("properties", {})
        args = ", ".join(f"`{key}`" for key in properties) or "none"
        out.append(f"| `{name}` | {_cell(tool.description)} | {args} |")
    return "\n".join(out) + "\n"


def _events() -> str:
    from tenure.types import EventType

    out = ["| event | value |", "| --- | --- |"]
    out += [f"| `{member.name}` | `{member.value}` |" for member in EventType]
    return "\n".join(out) + "\n"


def _error_classes() -> Iterator[type]:
    from tenure import errors

    for _, value in inspect.getmembers(errors, inspect.isclass):
        if issubclass(value, errors.TenureError) and value.__module__ == errors.__name__:
            yield value


def _errors() -> str:
    out = [
        "| exception | base | wire code | HTTP status | when |",
        "| --- | --- | --- | --- | --- |",
    ]
    for cls in sorted(_error_classes(), key=lambda c: c.__name__):
        base = cls.__mro__[1].__name__
        code = getattr(cls, "error_code", "")
        status = getattr(cls, "http_status", "")
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0]
        out.append(f"| `tenure.{cls.__name__}` | `{base}` | `{code}` | {status} | {_cell(doc)} |")
    return "\n".join(out) + "\n"


def _metrics() -> str:
    import tenure
    from tenure.runtime.latency import LatencyHistogram
    from tenure.service.metrics import DatabaseCollector, WorkerCollector

    class _Idle:
        """A worker that ran nothing: its collector's families, without samples."""

        def __init__(self) -> None:
            self.worker_id = "w"
            self.claim_latency = LatencyHistogram()
            self.stats: dict[str, int] = {}
            self.running = 0
            self.job_counts: dict[Any, int] = {}
            self.job_spend: dict[Any, float] = {}
            self.class_labels: dict[str, dict[str, str]] = {}

    rows: list[tuple[str, str, str, str]] = []
    with (
        tempfile.TemporaryDirectory() as folder,
        tenure.connect(f"sqlite:///{folder}/docs.db") as ledger,
    ):
        ledger.submit("example", {})
        for family in DatabaseCollector(ledger).collect():
            rows.append(("`tenure serve`", family.name, family.type, family.documentation))
    for family in WorkerCollector(_Idle()).collect():
        rows.append(("`tenure worker`", family.name, family.type, family.documentation))
    out = ["| from | metric | type | meaning |", "| --- | --- | --- | --- |"]
    out += [f"| {who} | `{name}` | {kind} | {_cell(doc)} |" for who, name, kind, doc in rows]
    return "\n".join(out) + "\n"


def _alerts() -> str:
    rules = (ROOT / "docs" / "alerts.yml").read_text(encoding="utf-8")
    return f"```yaml\n{rules.rstrip()}\n```\n"


def _changelog() -> str:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return text.split("\n", 1)[1]  # the page has its own title


PARTS: dict[str, Callable[[], str]] = {
    "cli": _cli,
    "http": _http,
    "mcp-tools": _mcp_tools,
    "events": _events,
    "errors": _errors,
    "metrics": _metrics,
    "changelog": _changelog,
    "alerts": _alerts,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    def part(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in PARTS:
            raise KeyError(f"no generated part {name!r} (have {sorted(PARTS)})")
        return PARTS[name]()

    return _MARKER.sub(part, markdown)
