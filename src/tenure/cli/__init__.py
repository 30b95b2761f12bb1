"""The `tenure` command line: wiring only; every operation is the Ledger's (see `commands`,
`processes`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tenure.cli.commands import (
    cmd_cancel,
    cmd_eval,
    cmd_events,
    cmd_evidence,
    cmd_jobs,
    cmd_migrate,
    cmd_purge,
    cmd_replay,
    cmd_requeue,
    cmd_signal,
    cmd_status,
    cmd_submit,
    cmd_tenant_create,
    cmd_tenant_key,
    cmd_tenant_limit,
    cmd_tenant_list,
    cmd_tenant_revoke,
)
from tenure.cli.common import (
    DEFAULT_DB,
    EXIT_FAILURE,
    EXIT_USAGE,
    UsageError,
    _url,
    count_at_least,
    output_file,
    port_number,
    seconds_at_least,
)
from tenure.cli.doctor import cmd_doctor
from tenure.cli.processes import (
    cmd_admin_key,
    cmd_chaos,
    cmd_demo,
    cmd_mcp,
    cmd_serve,
    cmd_worker,
)
from tenure.cli.rollouts import add_rollout_commands
from tenure.cli.schedules import add_schedule_commands
from tenure.errors import InvalidArgument, TenureError
from tenure.ledger import Ledger, connect
from tenure.types import JobState

Command = Callable[[Ledger, argparse.Namespace], int]

# The commands that run an app: its `App(url)` comes before the environment.
APP_DB_HELP = (
    f"database URL (default: the URL the app gives App(url), else $TENURE_DATABASE_URL, else "
    f"{DEFAULT_DB})"
)


Standalone = Callable[[argparse.Namespace], int]


def _common(parser: argparse.ArgumentParser, *, top: bool, db_help: str | None = None) -> None:
    """--db and --json, accepted before the command and after it."""
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--db",
        default=default,
        metavar="URL",
        help=db_help or f"database URL (default: $TENURE_DATABASE_URL, else {DEFAULT_DB})",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print machine-readable JSON",
    )


def _listen_db(parser: argparse.ArgumentParser) -> None:
    """--listen-db: where LISTEN goes when --db is a transaction pooler's address."""
    parser.add_argument(
        "--listen-db",
        metavar="URL",
        help="a direct PostgreSQL URL for LISTEN when --db goes through a transaction pooler "
        "(default: $TENURE_LISTEN_URL; without one, workers and waiters poll)",
    )


def _add_command(sub: Any, name: str, command: Command, help: str) -> argparse.ArgumentParser:
    """A subcommand that runs `command` with an open ledger; takes --db and --json."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
    _common(parser, top=False)
    parser.set_defaults(run=command)
    return parser


def _add_standalone(
    sub: Any,
    name: str,
    run: Standalone,
    help: str,
    description: str,
    *,
    listen: bool = False,
    db_help: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand that runs `run` on its own (it opens what it needs); takes --db and --json,
    and --listen-db with `listen`."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description)
    _common(parser, top=False, db_help=db_help)
    if listen:
        _listen_db(parser)
    parser.set_defaults(standalone=run)
    return parser


def _add_group(sub: Any, name: str, help: str, description: str) -> Any:
    """A subcommand of actions (`tenure tenant create`, …): its subparsers. --db and --json go
    before the action as well as after it."""
    group = sub.add_parser(name, help=help, description=description)
    _common(group, top=False)
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")


def _version() -> str:
    """The installed package's version (its metadata), for `tenure --version`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tenure")
    except PackageNotFoundError:  # pragma: no cover - run from a tree that is not installed
        return "unknown (not installed)"


def _add_submit(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind")
    p.add_argument("--payload", default="{}", help="the payload as JSON (default: {})")
    p.add_argument("--key", help="idempotency key (per tenant)")
    p.add_argument("--tenant", default="default")
    p.add_argument("--priority", type=int, default=0, help="higher runs first")
    p.add_argument("--max-attempts", type=int, default=None)
    p.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label its job class leaves to the submitter (repeatable)",
    )
    p.add_argument("--traceparent", help="a W3C trace context the job's attempts join")
    p.add_argument("--principal", help="whom the job acts for (e.g. user:42)")
    p.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="UNIT=AMOUNT",
        help="what the run may spend, in the app's units (usd=5, calls=50; repeatable)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `tenure`."""
    parser = argparse.ArgumentParser(
        prog="tenure", description="Leased, fenced, durable jobs on SQLite and PostgreSQL."
    )
    _common(parser, top=True)
    parser.add_argument("--version", action="version", version=f"tenure {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, command: Command, help: str) -> argparse.ArgumentParser:
        return _add_command(sub, name, command, help)

    add("migrate", cmd_migrate, "create or upgrade the schema")
    _add_submit(add("submit", cmd_submit, "submit a job and print its id"))
    add("status", cmd_status, "show one job").add_argument("id")
    p = add("jobs", cmd_jobs, "list jobs, newest first")
    p.add_argument("--state", choices=[s.value for s in JobState])
    p.add_argument("--kind")
    p.add_argument("--tenant")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--after", metavar="ID", help="continue after this job id")
    p = add("events", cmd_events, "show a job's events, or its lease timeline")
    p.add_argument("id")
    p.add_argument(
        "--timeline",
        action="store_true",
        help="draw the lease timeline: one lane per claim (with --json: its JSON)",
    )
    p.add_argument(
        "--html",
        metavar="FILE",
        type=output_file,
        help="with --timeline: write it (and the run tree) as one offline HTML page",
    )
    add("evidence", cmd_evidence, "show the references a job recorded").add_argument("id")
    add("cancel", cmd_cancel, "cancel a job (and its unfinished children)").add_argument("id")
    p = add("signal", cmd_signal, "send a job a signal (an approval, an answer): once per name")
    p.add_argument("id")
    p.add_argument("name", help="the signal's name, as the handler's ctx.wait_for(name)")
    p.add_argument("--payload", default="null", help="the signal's payload as JSON (default null)")
    add("requeue", cmd_requeue, "make a failed or cancelled job claimable again").add_argument("id")
    p = add("replay", cmd_replay, "re-run a finished job's stages with effects switched off")
    p.add_argument("id")
    p.add_argument("--app", required=True, metavar="MODULE:APP", help="the app that ran it")
    p.add_argument(
        "--against", metavar="MODULE:APP", help="replay through this app's handler instead"
    )
    p = add("eval", cmd_eval, "replay a golden set through a candidate, judged by assertions")
    p.add_argument("--app", required=True, metavar="MODULE:APP", help="the baseline app")
    p.add_argument("--against", metavar="MODULE:APP", help="the candidate (default: --app)")
    golden = p.add_mutually_exclusive_group(required=True)
    golden.add_argument("--kind", help="the finished jobs of this kind make the set")
    golden.add_argument("--jobs", metavar="FILE", help="job ids, one per line or a JSON list")
    p.add_argument("--since", default="7d", metavar="AGE", help="with --kind (default 7d)")
    p = add("purge", cmd_purge, "delete old terminal jobs with their events, stages, effects")
    p.add_argument("--older-than", required=True, metavar="AGE", help="e.g. 30d, 12h, 90m")
    p.add_argument(
        "--keep-keys",
        default="7d",
        metavar="AGE",
        help="keep jobs with an idempotency key at least this long (default 7d)",
    )
    p.add_argument("--batch", type=int, default=1000, help="jobs looked at per transaction")
    p.add_argument("--dry-run", action="store_true", help="count what would go, delete nothing")
    p.add_argument("--yes", action="store_true", help="confirm an age under a minute")
    _add_tenant_commands(sub)
    add_rollout_commands(_add_group, _add_command, sub)
    add_schedule_commands(_add_group, _add_command, sub)
    _add_process_commands(sub)
    return parser


def _add_tenant_commands(sub: Any) -> None:
    """`tenant create|key|revoke|list|admin-key`: API keys for `tenure serve`."""
    tsub = _add_group(sub, "tenant", "tenants and their API keys", "Tenants and their API keys.")

    def add(name: str, command: Command, help: str) -> argparse.ArgumentParser:
        return _add_command(tsub, name, command, help)

    add("create", cmd_tenant_create, "create a tenant and print its first API key").add_argument(
        "name"
    )
    p = add("key", cmd_tenant_key, "issue another API key to a tenant, or list its keys")
    p.add_argument(
        "words",
        nargs="+",
        metavar="[add|list] TENANT",
        help="`add TENANT` (or just TENANT) issues a key; `list [TENANT]` lists keys",
    )
    p.add_argument(
        "--principal",
        help="bind the new key to this principal ('user:42'), or with a trailing '/' to it and "
        "every principal under it ('user:42/'); default: a service key of the tenant",
    )
    p = add("revoke", cmd_tenant_revoke, "revoke a tenant's API keys (or one, by --key-id)")
    p.add_argument("name")
    p.add_argument("--key-id", help="the id in tnr_<id>_...; default: every live key")
    add("list", cmd_tenant_list, "list tenants and their key counts")
    p = add(
        "limit", cmd_tenant_limit, "at most N of a tenant's jobs run at once ('none': no limit)"
    )
    p.add_argument("name")
    p.add_argument("limit", metavar="N")
    _add_standalone(
        tsub,
        "admin-key",
        cmd_admin_key,
        "generate an admin key and the digest that configures tenure serve",
        "Print a new admin key and TENURE_ADMIN_KEY_SHA256=<digest>. The key is not stored "
        "anywhere: tenure serve is configured with the digest alone.",
    )


def _add_process_commands(sub: Any) -> None:
    """`worker`, `demo` and `chaos`: commands that run processes rather than one operation."""
    _add_worker_command(sub)
    p = _add_standalone(
        sub,
        "doctor",
        cmd_doctor,
        "say which database each process of an app would use, and whether it answers",
        "List the database of the app-less commands (tenure submit, status, serve: --db, else "
        "$TENURE_DATABASE_URL, else sqlite:///tenure.db) and of each MODULE:APP's worker and "
        "mcp (--db, else App(url), else $TENURE_DATABASE_URL, else sqlite:///tenure.db), with "
        "where each choice comes from, and ask each database. Exits 1 when they are not one "
        "database or one does not answer.",
    )
    p.add_argument("targets", nargs="*", metavar="MODULE:APP", help="e.g. myproject.jobs:app")
    p.add_argument("--app-dir", metavar="DIR", help="import each MODULE from DIR")
    p = _add_standalone(
        sub,
        "serve",
        cmd_serve,
        "run the HTTP API, dashboard, /readyz and /metrics",
        "Serve the HTTP API (/v1, OpenAPI at /openapi.json), the dashboard (/), /healthz, "
        "/readyz and /metrics on uvicorn until SIGINT/SIGTERM.",
        listen=True,
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_number, default=8080)
    p.add_argument(
        "--admin-key-sha256",
        metavar="HEX",
        help="digest of the admin key (default: $TENURE_ADMIN_KEY_SHA256); "
        "see `tenure tenant admin-key`",
    )
    p.add_argument("--max-body", type=int, default=1024 * 1024, help="request body limit, bytes")
    p.add_argument(
        "--max-wait",
        type=seconds_at_least(0.0),
        default=30.0,
        help="cap of GET /v1/jobs/{id}?wait=S, seconds",
    )
    p.add_argument(
        "--max-waits-per-tenant",
        type=int,
        metavar="N",
        help="long-polls (?wait=S) one tenant may hold at once; past it, 429 (default 1000)",
    )
    p.add_argument("--metrics-need-key", action="store_true", help="/metrics asks for admin key")
    p.add_argument(
        "--metrics-by-tenant", action="store_true", help="add a tenant label to queue metrics"
    )
    _log_level(p)
    p = _add_standalone(
        sub,
        "mcp",
        cmd_mcp,
        "serve an app's tool job classes to MCP clients (stdio or streamable HTTP)",
        "Each job class marked @app.job(..., tool=True) is an MCP tool: a call submits a job, "
        "which `tenure worker` processes run, and answers with its result. Clients that "
        "declare the tasks extension get the job as a durable task. Needs the extra: pip "
        "install 'tenure[mcp]' (from a clone: pip install -e '.[mcp]').",
        listen=True,
        db_help=APP_DB_HELP,
    )
    _app_target(p)
    p.add_argument("--transport", default="stdio", choices=["stdio", "streamable-http"])
    p.add_argument("--host", default="127.0.0.1", help="streamable HTTP: address to bind")
    p.add_argument(
        "--port", type=port_number, default=8090, help="streamable HTTP: port (default 8090)"
    )
    p.add_argument(
        "--tenant",
        default="default",
        help="stdio and --no-auth: the tenant whose jobs the calls make",
    )
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="streamable HTTP without a bearer key (loopback hosts only; for local clients and "
        "test suites): every call acts for --tenant",
    )
    p.add_argument(
        "--stateless",
        action="store_true",
        help="streamable HTTP: keep no session for clients of protocols before 2026-07-28 "
        "(any replica answers; their calls' questions then wait for tenure_signal)",
    )
    p.add_argument(
        "--admin-key-sha256",
        metavar="HEX",
        help="streamable HTTP: digest of the admin key (default: $TENURE_ADMIN_KEY_SHA256)",
    )
    _log_level(p)
    p = _add_standalone(
        sub,
        "demo",
        cmd_demo,
        "play the story of a stale worker: its result rejected, its late effect refused",
        "Starts a fenced bank on 127.0.0.1 and two worker processes on a temporary SQLite "
        "database (or --db URL) and shows, for real, what tenure guarantees.",
        db_help="database URL (default: a new SQLite file in a temporary workspace, removed "
        "at the end); a given database keeps none of the demo's jobs (PostgreSQL: a schema of "
        "the demo's own, dropped; SQLite: the demo's jobs deleted, the file migrated)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the workspace (databases, worker logs), and the demo's jobs in a --db database",
    )
    p.add_argument(
        "--timeline",
        metavar="FILE",
        type=output_file,
        help="write the job's lease timeline as an offline HTML page",
    )
    p = _add_standalone(
        sub,
        "chaos",
        cmd_chaos,
        "run jobs through worker processes under random faults and check the guarantees",
        "Kill, pause, partition and skew worker processes (and restart the database when the "
        "harness started it: --db embedded; or fail over a primary/standby pair it starts, or "
        "start its last base backup as it is: --faults failover,switchover,restore) while jobs "
        "run; then count what must hold. Exits 1 if a job was lost, an effect applied twice, a "
        "stale result accepted, a token handed out or accepted twice, or a worker exited.",
    )
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument(
        "--concurrency", type=count_at_least(1), default=2, help="jobs at once per worker"
    )
    p.add_argument("--duration", type=float, default=60.0, help="seconds of faults")
    p.add_argument(
        "--faults",
        default="kill,pause,partition,restart,skew",
        help="comma-separated: kill, pause, partition, restart, skew; failover, switchover and "
        "restore start a primary/standby pair of their own (see --replication)",
    )
    p.add_argument(
        "--replication",
        choices=["sync", "async"],
        default="sync",
        help="the pair's standby for failover and switchover: synchronous or asynchronous",
    )
    p.add_argument(
        "--submit-rate",
        type=float,
        default=20.0,
        help="with failover or switchover: jobs submitted per second during the run, each "
        "acknowledged one looked for at the end",
    )
    p.add_argument("--fault-every", type=float, default=2.0, help="mean seconds between faults")
    p.add_argument("--lease", type=float, default=2.0, help="the job class's lease, seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--report", type=Path, help="write the figures as JSON here")
    p.add_argument("--drain-timeout", type=float, default=180.0)
    p.add_argument(
        "--parents",
        type=int,
        default=20,
        help="parent jobs that wait for a signal, spawn an order, wait for it and sleep",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tenure` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # psycopg_pool logs each failed connection attempt as a multi-line warning; tenure's own
    # error line says what is wrong.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    url = _url(args)
    try:
        standalone: Standalone | None = getattr(args, "standalone", None)
        if standalone is not None:
            return standalone(args)
        # `tenure migrate` migrates itself, so that it can say what it applied.
        with connect(url, migrate=args.run is not cmd_migrate) as ledger:
            code: int = args.run(ledger, args)
            return code
    except (UsageError, InvalidArgument) as exc:
        # Bad input, found by the parser or by the ledger, is a usage error (exit 2).
        parser.exit(EXIT_USAGE, f"tenure: error: {exc}\n")
    except TenureError as exc:
        print(f"tenure: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`tenure demo | head`): say nothing more, and let the
        # interpreter's last flush go nowhere instead of raising again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE


def _app_target(p: argparse.ArgumentParser) -> None:
    """MODULE:APP, and the folder it is imported from."""
    p.add_argument("target", metavar="MODULE:APP", help="e.g. myproject.jobs:app")
    p.add_argument(
        "--app-dir",
        metavar="DIR",
        help="import MODULE from DIR (default: the current folder); an MCP client's config, "
        "which starts the command elsewhere, needs it",
    )


def _log_level(p: argparse.ArgumentParser) -> None:
    """`--log-level` of the commands that run until stopped (JSON lines on stderr)."""
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def _add_worker_command(sub: Any) -> None:
    """`tenure worker MODULE:APP`."""
    p = _add_standalone(
        sub,
        "worker",
        cmd_worker,
        "run the handlers of an app",
        "Claim and run jobs with the handlers of MODULE:APP until SIGTERM/SIGINT (a second "
        "signal skips the grace period).",
        listen=True,
        db_help=APP_DB_HELP,
    )
    _app_target(p)
    p.add_argument(
        "--concurrency", type=count_at_least(1), default=4, help="jobs run at once (default 4)"
    )
    p.add_argument(
        "--grace",
        type=seconds_at_least(0.0),
        default=30.0,
        help="seconds running handlers get on shutdown before their leases are released",
    )
    p.add_argument(
        "--poll",
        type=seconds_at_least(0.01),
        default=1.0,
        help="longest idle wait between claims, seconds (at least 0.01)",
    )
    p.add_argument("--kinds", nargs="*", help="only these kinds (default: all of the app's)")
    p.add_argument(
        "--variants",
        action="append",
        metavar="KIND=VARIANT[,...]",
        help="of KIND, run only these rollout variants ('stable': jobs without one); repeatable",
    )
    _log_level(p)
    p.add_argument(
        "--metrics-port",
        type=port_number,
        help="serve this worker's Prometheus metrics on 127.0.0.1:PORT/metrics",
    )
