"""What the commands share: the default database, exit codes, usage errors, JSON and text output."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from tenure.app import App
from tenure.database_url import DEFAULT_URL, ChosenDatabase, UrlSource, without_app
from tenure.errors import TenureError
from tenure.types import Event, Job

T = TypeVar("T")

DEFAULT_DB = DEFAULT_URL


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def job_dict(job: Job) -> dict[str, Any]:
    """A job as plain JSON-ready values (its evidence as `tenure evidence --json` shows it)."""
    plain = dict(_plain(asdict(job)))
    plain["evidence"] = [record.to_dict() for record in job.evidence]
    return plain


def event_dict(event: Event) -> dict[str, Any]:
    """An event as plain JSON-ready values."""
    return dict(_plain(asdict(event)))


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def print_rows(
    rows: Sequence[T],
    as_json: bool,
    to_dict: Callable[[T], Any],
    line: Callable[[T], str],
    *,
    heading: str | None = None,
    empty: str | None = None,
) -> int:
    """A list command's answer: the rows as a JSON array, or a line each (under `heading`;
    `empty` when there are none)."""
    if as_json:
        _print_json([to_dict(row) for row in rows])
        return EXIT_OK
    if heading is not None:
        print(heading)
    if not rows and empty is not None:
        print(empty)
    for row in rows:
        print(line(row))
    return EXIT_OK


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


_UNSHOWN = {code: f"\\x{code:02x}" for code in (*range(0x00, 0x20), *range(0x7F, 0xA0))}


def shown(text: str) -> str:
    """Text for a terminal: control characters (escape sequences, carriage returns) written
    out as `\\xNN`, so that a stored name can never drive the reader's terminal."""
    return text.translate(_UNSHOWN)


def _short(value: Any, width: int = 160) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _url(args: argparse.Namespace) -> str:
    return without_app(args.db).url


def load_app(target: str, app_dir: str | None = None) -> App:
    """Import `module:attribute` from `app_dir` (default: the current folder) and return the
    App. A target that names no App is a usage error; an exception raised while the user's
    module runs is said in one line with where it was raised, not as a traceback."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"expected MODULE:APP (e.g. myproject.jobs:app), got {target!r}")
    folder = os.getcwd() if app_dir is None else os.path.abspath(app_dir)
    if not os.path.isdir(folder):
        raise UsageError(f"--app-dir {app_dir!r} is not a folder")
    if "/" in module_name or os.path.isfile(os.path.join(folder, module_name)):
        raise UsageError(_file_target_hint(module_name, attribute))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (
            exc.name == module_name or module_name.startswith(f"{exc.name}.")
        ):
            raise UsageError(
                f"no module {module_name!r} in {folder} (MODULE is a dotted module name "
                "importable from the current folder, or from --app-dir)"
            ) from exc
        raise TenureError(f"cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:
        raise TenureError(f"importing {module_name!r} raised {_raised_where(exc)}") from exc
    app = getattr(module, attribute, None)
    if isinstance(app, App):
        return app
    apps = sorted(name for name, value in vars(module).items() if isinstance(value, App))
    found = "has no attribute" if app is None else f"has {type(app).__name__} as"
    hint = f"; its App is {', '.join(f'{module_name}:{name}' for name in apps)}" if apps else ""
    raise UsageError(f"{target!r} is not a tenure.App: {module_name} {found} {attribute!r}{hint}")


def _file_target_hint(module_name: str, attribute: str) -> str:
    path = Path(module_name)
    dotted = path.with_suffix("").name if path.suffix == ".py" else path.name
    folder = str(path.parent)
    where = "" if folder in ("", ".") else f" --app-dir {folder}"
    return (
        f"MODULE is a dotted module name, not a file: use {dotted}:{attribute}{where} "
        f"(got {module_name}:{attribute})"
    )


def _raised_where(exc: BaseException) -> str:
    """`ValueError: bad (jobs.py, line 3)`: the exception and the innermost line that raised
    it."""
    said = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, SyntaxError):  # its text names the file and line already
        return said
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return said
    last = frames[-1]
    return f"{said} ({last.filename}, line {last.lineno})"


def app_database(app: App, db: str | None, app_dir: str | None) -> ChosenDatabase:
    """The database a process of `app` uses: `--db`, else the app's URL (its `App(url)`, else
    `$TENURE_DATABASE_URL`, else sqlite:///tenure.db). With `--app-dir`, a relative SQLite path
    is the app folder's, not the working folder's: an MCP client starts `tenure mcp` in a
    folder of its own, and the calls must queue where the project's workers look."""
    chosen = ChosenDatabase(db, UrlSource.OPTION) if db else ChosenDatabase(app.url, app.url_source)
    url = chosen.url
    relative = url.removeprefix("sqlite:///")
    if app_dir is None or not url.startswith("sqlite:///") or relative.startswith("/"):
        return chosen
    path, sep, query = relative.partition("?")
    if not path or path == ":memory:":
        return chosen
    joined = f"sqlite:///{os.path.join(os.path.abspath(app_dir), path)}{sep}{query}"
    return ChosenDatabase(joined, chosen.source)


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1-65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, got {port}")
    return port


def count_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number, at least `minimum`."""

    def parse(text: str) -> int:
        try:
            count = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if count < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {count}")
        return count

    return parse


def seconds_at_least(minimum: float) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds, at least `minimum`."""

    def parse(text: str) -> float:
        try:
            seconds = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not math.isfinite(seconds) or seconds < minimum:
            raise argparse.ArgumentTypeError(
                f"must be a finite number of seconds, at least {minimum:g}; got {text}"
            )
        return seconds

    return parse


def output_file(text: str) -> Path:
    """An argument naming a file to write: its folder must exist (argparse then says so and
    exits 2, before anything runs)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: name a file to write")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"no folder {path.parent} to write {path.name} in")
    return path
