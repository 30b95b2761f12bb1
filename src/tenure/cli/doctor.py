"""`tenure doctor [MODULE:APP ...]`: the database each process of an app would use and where
that choice comes from, whether each database answers, and a problem when they are not one:
jobs submitted to one database are never run by workers of another."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from tenure.cli.common import EXIT_FAILURE, EXIT_OK, _print_json, app_database, load_app, shown
from tenure.database_url import (
    URL_ENV,
    ChosenDatabase,
    environment_url,
    same_database,
    shown_url,
    without_app,
)
from tenure.errors import TenureError
from tenure.storage import check_url
from tenure.storage.sqlite.store import path_from_url

# Doctor asks; it does not wait long for a database that does not answer.
_CONNECT_TIMEOUT = 3.0


@dataclass(frozen=True)
class ProcessDatabase:
    """One kind of process and the database it would use."""

    process: str
    chosen: ChosenDatabase


@dataclass(frozen=True)
class DatabaseCheck:
    """One distinct database and what asking it showed."""

    url: str
    answers: bool
    detail: str


def planned(args: argparse.Namespace) -> list[ProcessDatabase]:
    """Every process `args` configures: the app-less commands, then each app's worker and
    `tenure mcp` (they resolve the same way)."""
    rows = [ProcessDatabase("tenure submit, status, serve", without_app(args.db))]
    for target in args.targets:
        app = load_app(target, args.app_dir)
        rows.append(
            ProcessDatabase(
                f"tenure worker, mcp {target}", app_database(app, args.db, args.app_dir)
            )
        )
    return rows


def distinct(rows: list[ProcessDatabase]) -> list[str]:
    """The databases of `rows`, each once (two URLs of one database count once)."""
    found: list[str] = []
    for row in rows:
        if not any(same_database(row.chosen.url, url) for url in found):
            found.append(row.chosen.url)
    return found


def check(url: str) -> DatabaseCheck:
    """Whether `url` answers. A SQLite file that does not exist yet is not created."""
    try:
        check_url(url)
        if url.startswith("sqlite:///") and not os.path.exists(path_from_url(url)):
            return DatabaseCheck(url, True, "no file yet: the first process creates it")
    except TenureError as exc:
        return DatabaseCheck(url, False, str(exc))
    from tenure.ledger import connect

    try:
        with connect(url, migrate=False, timeout=_CONNECT_TIMEOUT, pool_size=1) as ledger:
            where = ledger.operations.where
    except TenureError as exc:
        return DatabaseCheck(url, False, str(exc))
    return DatabaseCheck(url, True, f"answers ({where})")


def cmd_doctor(args: argparse.Namespace) -> int:
    """Exit 1 when the processes would use more than one database or one does not answer."""
    rows = planned(args)
    checks = [check(url) for url in distinct(rows)]
    split = len(checks) > 1
    failing = split or not all(found.answers for found in checks)
    if args.json:
        _print_json(
            {
                "environment": shown_url(environment_url() or "") or None,
                "processes": [
                    {
                        "process": row.process,
                        "database": row.chosen.shown,
                        "source": str(row.chosen.source),
                    }
                    for row in rows
                ],
                "databases": [
                    {"database": shown_url(c.url), "answers": c.answers, "detail": c.detail}
                    for c in checks
                ],
                "one_database": not split,
            }
        )
        return EXIT_FAILURE if failing else EXIT_OK
    environment = environment_url()
    print(f"{URL_ENV}: {shown(shown_url(environment)) if environment else 'not set'}")
    width = max(len(row.process) for row in rows)
    for row in rows:
        print(f"  {row.process:<{width}}  {shown(row.chosen.shown)}  (from {row.chosen.source})")
    for found in checks:
        state = "ok" if found.answers else "does not answer"
        print(f"{shown(shown_url(found.url))}: {state}: {shown(found.detail)}")
    if split:
        print(
            f"problem: these processes use {len(checks)} databases, and a job submitted to "
            "one is never run by a worker of another. Write App() without a URL and set "
            f"{URL_ENV} for every process, or pass the same --db to each."
        )
    return EXIT_FAILURE if failing else EXIT_OK
