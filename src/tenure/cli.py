"""The `tenure` command line: wiring only; every operation is the Ledger's."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

from tenure import keys
from tenure.app import App
from tenure.errors import TenureError
from tenure.ledger import Ledger, connect
from tenure.logs import configure_json_logging
from tenure.replay import replay
from tenure.runtime.worker import Worker
from tenure.types import Event, Job, JobState, PurgeReport

DEFAULT_DB = "sqlite:///tenure.db"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


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
    """A job as plain JSON-ready values."""
    return dict(_plain(asdict(job)))


def event_dict(event: Event) -> dict[str, Any]:
    """An event as plain JSON-ready values."""
    return dict(_plain(asdict(event)))


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


# -- commands ----------------------------------------------------------------------------------


def cmd_migrate(ledger: Ledger, args: argparse.Namespace) -> int:
    applied = ledger.migrate()
    if args.json:
        _print_json({"applied": applied})
    else:
        print(f"applied migrations {applied}" if applied else "schema is up to date")
    return EXIT_OK


def cmd_submit(ledger: Ledger, args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--payload is not JSON: {exc}") from exc
    job_id = ledger.submit(
        args.kind,
        payload,
        idempotency_key=args.key,
        tenant=args.tenant,
        max_attempts=args.max_attempts,
        priority=args.priority,
    )
    job = ledger.get(job_id)
    if args.json:
        _print_json({"id": job.id, "state": job.state.value})
    else:
        print(job.id)
    return EXIT_OK


def cmd_status(ledger: Ledger, args: argparse.Namespace) -> int:
    job = ledger.get(args.id)
    stages = ledger.stages(job.id)
    if args.json:
        _print_json({**job_dict(job), "stages": [_plain(asdict(stage)) for stage in stages]})
        return EXIT_OK
    rows = [
        ("id", job.id),
        ("kind", job.kind),
        ("tenant", job.tenant),
        ("state", job.state.value),
        ("attempt", f"{job.attempt}/{job.max_attempts}"),
        ("token", str(job.fencing_token)),
        ("owner", job.owner_id or "-"),
        ("lease until", _when(job.lease_until)),
        ("heartbeat", _when(job.heartbeat_at)),
        ("step", str(job.step)),
        ("priority", str(job.priority)),
        ("created", _when(job.created_at)),
        ("updated", _when(job.updated_at)),
        ("payload sha256", job.payload_sha256),
    ]
    if job.error is not None:
        rows.append(("error", json.dumps(job.error, sort_keys=True)))
    if job.result is not None:
        rows.append(("result", json.dumps(job.result, sort_keys=True)))
    for name, value in rows:
        print(f"{name:>15}  {value}")
    for stage in stages:
        print(
            f"{'stage ' + str(stage.position):>15}  {stage.kind.value} {stage.name!r} "
            f"{stage.status.value} (token {stage.token})"
        )
    return EXIT_OK


def cmd_jobs(ledger: Ledger, args: argparse.Namespace) -> int:
    jobs = ledger.list(
        state=args.state, kind=args.kind, tenant=args.tenant, limit=args.limit, after=args.after
    )
    if args.json:
        _print_json([job_dict(job) for job in jobs])
        return EXIT_OK
    print(f"{'ID':36}  {'KIND':16}  {'STATE':9}  {'ATT':>5}  {'TOKEN':>5}  {'STEP':>4}  CREATED")
    for job in jobs:
        print(
            f"{job.id:36}  {job.kind[:16]:16}  {job.state.value:9}  "
            f"{job.attempt:>2}/{job.max_attempts:<2}  {job.fencing_token:>5}  {job.step:>4}  "
            f"{_when(job.created_at)}"
        )
    return EXIT_OK


def cmd_events(ledger: Ledger, args: argparse.Namespace) -> int:
    events = ledger.events(args.id)
    if args.json:
        _print_json([event_dict(event) for event in events])
        return EXIT_OK
    for event in events:
        detail = " ".join(f"{k}={v}" for k, v in sorted(event.detail.items()))
        token = "-" if event.token is None else event.token
        print(
            f"{event.seq:>6}  {_when(event.at)}  {event.type:20}  token={token}  "
            f"owner={event.owner_id or '-'}  {detail}"
        )
    return EXIT_OK


def cmd_cancel(ledger: Ledger, args: argparse.Namespace) -> int:
    ledger.cancel(args.id)
    return _report_state(ledger, args)


def cmd_requeue(ledger: Ledger, args: argparse.Namespace) -> int:
    ledger.requeue(args.id)
    return _report_state(ledger, args)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """`30d`, `12h`, `90m`, `45s`, `2w` or plain seconds → seconds."""
    value = text.strip().lower()
    unit = _UNITS.get(value[-1:]) if value else None
    number = value[:-1] if unit else value
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        raise UsageError(f"expected an age like 30d, 12h, 90m or 45s, got {text!r}") from None
    if not 0 <= seconds < float("inf"):
        raise UsageError(f"an age must be zero or more, got {text!r}")
    return seconds


def cmd_purge(ledger: Ledger, args: argparse.Namespace) -> int:
    older_than = parse_age(args.older_than)
    keep_keys = parse_age(args.keep_keys)

    def progress(report: PurgeReport) -> None:
        if report.batches % 10 == 0:
            print(f"purging: {report.jobs} jobs so far…", file=sys.stderr, flush=True)

    report = ledger.purge(older_than, keep_keys=keep_keys, batch_size=args.batch, on_batch=progress)
    if args.json:
        _print_json(asdict(report))
    else:
        print(
            f"purged {report.jobs} jobs, {report.events} events, {report.stages} stages, "
            f"{report.effects} effects in {report.batches} batches; kept "
            f"{report.kept_for_keys} for their idempotency keys"
        )
    return EXIT_OK


def cmd_replay(ledger: Ledger, args: argparse.Namespace) -> int:
    target = args.against or args.app
    load_app(args.app)  # the recording app must import too: a typo is an error, not a no-op
    report = replay(ledger, args.id, load_app(target))
    if args.json:
        _print_json({**_plain(asdict(report)), "differences": report.differences})
        return EXIT_OK
    print(
        f"job {report.job_id} ({report.kind}) replayed through {target}, version "
        f"{report.handler_version}; effects were not run"
    )
    for stage in report.stages:
        verdict = "differs" if stage.differs else "same"
        print(
            f"  #{stage.position} {stage.kind:6} {stage.name:24} {verdict}"
            + (f"  ({stage.note})" if stage.note else "")
        )
        if stage.differs:
            print(f"       recorded: {_short(stage.recorded)}")
            print(f"       replayed: {_short(stage.replayed)}")
    print(f"  result {'differs' if report.result_differs else 'same'}")
    if report.result_differs:
        print(f"       recorded: {_short(report.recorded_result)}")
        print(f"       replayed: {_short(report.replayed_result)}")
    if report.error:
        print(f"  the replayed handler raised {report.error}")
    print(f"{report.differences} difference(s)")
    return EXIT_OK


def _short(value: Any, width: int = 160) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def load_app(target: str) -> App:
    """Import `module:attribute` (the current folder is importable) and return the App."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"expected MODULE:APP (e.g. myproject.jobs:app), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TenureError(f"cannot import {module_name!r}: {exc}") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise TenureError(f"{target!r} is not a tenure.App (found {type(app).__name__})")
    return app


def cmd_worker(args: argparse.Namespace) -> int:
    app = load_app(args.target)
    configure_json_logging(getattr(logging, args.log_level.upper()))
    worker = Worker(
        app,
        concurrency=args.concurrency,
        url=args.db,
        grace=args.grace,
        poll_interval=args.poll,
        kinds=args.kinds or None,
    )
    if args.metrics_port is not None:
        _serve_worker_metrics(worker, args.metrics_port)
    worker.run()
    return EXIT_OK


def _service_extra(exc: ImportError) -> UsageError:
    return UsageError(
        f"this command needs the service extra ({exc.name} is missing): "
        "pip install 'tenure[service]'"
    )


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from tenure.service.serve import serve
        from tenure.service.settings import ServiceSettings
    except ImportError as exc:
        raise _service_extra(exc) from exc
    configure_json_logging(getattr(logging, args.log_level.upper()))
    settings = ServiceSettings(
        admin_key_sha256=args.admin_key_sha256 or ServiceSettings.admin_digest_from_env(),
        max_body_bytes=args.max_body,
        max_wait_seconds=args.max_wait,
        metrics_need_key=args.metrics_need_key,
        metrics_by_tenant=args.metrics_by_tenant,
    )
    serve(_url(args), host=args.host, port=args.port, settings=settings, log_level=args.log_level)
    return EXIT_OK


def cmd_tenant_create(ledger: Ledger, args: argparse.Namespace) -> int:
    _print_key(args, args.name, ledger.create_tenant(args.name))
    return EXIT_OK


def cmd_tenant_key(ledger: Ledger, args: argparse.Namespace) -> int:
    _print_key(args, args.name, ledger.issue_key(args.name))
    return EXIT_OK


def _print_key(args: argparse.Namespace, tenant: str, key: str) -> None:
    if args.json:
        _print_json({"tenant": tenant, "key": key})
    else:
        print(key)
        print("(shown once; tenure keeps only its SHA-256)", file=sys.stderr)


def cmd_tenant_revoke(ledger: Ledger, args: argparse.Namespace) -> int:
    revoked = ledger.revoke_keys(args.name, args.key_id)
    if args.json:
        _print_json({"tenant": args.name, "revoked": revoked})
    else:
        print(f"revoked {revoked} key(s) of {args.name}")
    return EXIT_OK


def _parse_limit(text: str) -> int | None:
    """A whole number >= 1, or none/off for no limit."""
    if text.strip().lower() in {"none", "off"}:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise UsageError(f"a limit is a whole number >= 1 or 'none', got {text!r}")
    return int(text)


def cmd_tenant_limit(ledger: Ledger, args: argparse.Namespace) -> int:
    limit = _parse_limit(args.limit)
    ledger.set_tenant_limit(args.name, limit)
    if args.json:
        _print_json({"tenant": args.name, "limit": limit})
    elif limit is None:
        print(f"tenant {args.name}: no limit")
    else:
        print(f"tenant {args.name}: at most {limit} jobs at once")
    return EXIT_OK


def cmd_tenant_list(ledger: Ledger, args: argparse.Namespace) -> int:
    tenants = ledger.tenants()
    if args.json:
        _print_json([_plain(asdict(t)) for t in tenants])
        return EXIT_OK
    print(f"{'TENANT':<30} {'KEYS':>4} {'REVOKED':>7}  CREATED")
    for t in tenants:
        print(f"{t.name:<30} {t.active_keys:>4} {t.revoked_keys:>7}  {_when(t.created_at)}")
    return EXIT_OK


def cmd_admin_key(args: argparse.Namespace) -> int:
    issued = keys.new_admin_key()
    if args.json:
        _print_json({"key": issued.key, "sha256": issued.key_sha256})
    else:
        print(issued.key)
        print(f"TENURE_ADMIN_KEY_SHA256={issued.key_sha256}")
        print(
            "(give the key to operators; configure tenure serve with the digest only)",
            file=sys.stderr,
        )
    return EXIT_OK


def _serve_worker_metrics(worker: Worker, port: int) -> None:
    try:
        from prometheus_client import CollectorRegistry, start_http_server

        from tenure.service.metrics import WorkerCollector
    except ImportError as exc:
        raise _service_extra(exc) from exc
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(worker))
    start_http_server(port, addr="127.0.0.1", registry=registry)


def cmd_demo(args: argparse.Namespace) -> int:
    from tenure.demo.run import run_demo

    return run_demo(args.db)


def cmd_chaos(args: argparse.Namespace) -> int:
    from tenure.chaos.harness import FAULT_KINDS, Harness, Options

    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = set(faults) - set(FAULT_KINDS)
    if unknown:
        raise UsageError(f"unknown fault kinds {sorted(unknown)}: use {','.join(FAULT_KINDS)}")
    if args.jobs < 1 or args.workers < 1 or args.duration <= 0:
        raise UsageError("--jobs, --workers and --duration must be positive")
    options = Options(
        db=args.db,
        jobs=args.jobs,
        workers=args.workers,
        concurrency=args.concurrency,
        duration=args.duration,
        faults=faults,
        fault_every=args.fault_every,
        lease=args.lease,
        seed=args.seed,
        report=args.report,
        drain_timeout=args.drain_timeout,
    )
    return Harness(options).run()


def _url(args: argparse.Namespace) -> str:
    return str(args.db or os.environ.get("TENURE_DATABASE_URL") or DEFAULT_DB)


def _report_state(ledger: Ledger, args: argparse.Namespace) -> int:
    job = ledger.get(args.id)
    if args.json:
        _print_json({"id": job.id, "state": job.state.value, "fencing_token": job.fencing_token})
    else:
        print(f"{job.id} {job.state.value} (token {job.fencing_token})")
    return EXIT_OK


# -- parser ------------------------------------------------------------------------------------

Command = Callable[[Ledger, argparse.Namespace], int]
Standalone = Callable[[argparse.Namespace], int]


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """--db and --json, accepted before the command and after it."""
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--db",
        default=default,
        metavar="URL",
        help=f"database URL (default: $TENURE_DATABASE_URL, else {DEFAULT_DB})",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print machine-readable JSON",
    )


def _add_command(sub: Any, name: str, command: Command, help: str) -> argparse.ArgumentParser:
    """A subcommand that runs `command` with an open ledger; takes --db and --json."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
    _common(parser, top=False)
    parser.set_defaults(run=command)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `tenure`."""
    parser = argparse.ArgumentParser(
        prog="tenure", description="Leased, fenced, durable jobs on SQLite and PostgreSQL."
    )
    _common(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, command: Command, help: str) -> argparse.ArgumentParser:
        return _add_command(sub, name, command, help)

    add("migrate", cmd_migrate, "create or upgrade the schema")
    p = add("submit", cmd_submit, "submit a job and print its id")
    p.add_argument("kind")
    p.add_argument("--payload", default="{}", help="the payload as JSON (default: {})")
    p.add_argument("--key", help="idempotency key (per tenant)")
    p.add_argument("--tenant", default="default")
    p.add_argument("--priority", type=int, default=0, help="higher runs first")
    p.add_argument("--max-attempts", type=int, default=None)
    add("status", cmd_status, "show one job").add_argument("id")
    p = add("jobs", cmd_jobs, "list jobs, newest first")
    p.add_argument("--state", choices=[s.value for s in JobState])
    p.add_argument("--kind")
    p.add_argument("--tenant")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--after", metavar="ID", help="continue after this job id")
    add("events", cmd_events, "show a job's event timeline").add_argument("id")
    add("cancel", cmd_cancel, "cancel a queued or running job").add_argument("id")
    add("requeue", cmd_requeue, "make a failed or cancelled job claimable again").add_argument("id")
    p = add("replay", cmd_replay, "re-run a finished job's stages with effects switched off")
    p.add_argument("id")
    p.add_argument("--app", required=True, metavar="MODULE:APP", help="the app that ran it")
    p.add_argument(
        "--against", metavar="MODULE:APP", help="replay through this app's handler instead"
    )
    p = add("purge", cmd_purge, "delete old terminal jobs with their events, stages, effects")
    p.add_argument("--older-than", required=True, metavar="AGE", help="e.g. 30d, 12h, 90m")
    p.add_argument(
        "--keep-keys",
        default="7d",
        metavar="AGE",
        help="keep jobs with an idempotency key at least this long (default 7d)",
    )
    p.add_argument("--batch", type=int, default=1000, help="jobs looked at per transaction")
    _add_tenant_commands(sub)
    _add_process_commands(sub)
    return parser


def _add_tenant_commands(sub: Any) -> None:
    """`tenant create|key|revoke|list|admin-key`: API keys for `tenure serve`."""
    tenant = sub.add_parser(
        "tenant", help="tenants and their API keys", description="Tenants and their API keys."
    )
    tsub = tenant.add_subparsers(dest="tenant_command", required=True, metavar="ACTION")

    def add(name: str, command: Command, help: str) -> argparse.ArgumentParser:
        return _add_command(tsub, name, command, help)

    add("create", cmd_tenant_create, "create a tenant and print its first API key").add_argument(
        "name"
    )
    add("key", cmd_tenant_key, "issue another API key to a tenant (rotation)").add_argument("name")
    p = add("revoke", cmd_tenant_revoke, "revoke a tenant's API keys (or one, by --key-id)")
    p.add_argument("name")
    p.add_argument("--key-id", help="the id in tnr_<id>_...; default: every live key")
    add("list", cmd_tenant_list, "list tenants and their key counts")
    p = add(
        "limit", cmd_tenant_limit, "at most N of a tenant's jobs run at once ('none': no limit)"
    )
    p.add_argument("name")
    p.add_argument("limit", metavar="N")
    p = tsub.add_parser(
        "admin-key",
        help="generate an admin key and the digest that configures tenure serve",
        description="Print a new admin key and TENURE_ADMIN_KEY_SHA256=<digest>. The key is "
        "not stored anywhere: tenure serve is configured with the digest alone.",
    )
    _common(p, top=False)
    p.set_defaults(standalone=cmd_admin_key)


def _add_process_commands(sub: Any) -> None:
    """`worker`, `demo` and `chaos`: commands that run processes rather than one operation."""
    p = sub.add_parser(
        "worker",
        help="run the handlers of an app",
        description="Claim and run jobs with the handlers of MODULE:APP until SIGTERM/SIGINT "
        "(a second signal skips the grace period).",
    )
    _common(p, top=False)
    p.set_defaults(standalone=cmd_worker)
    p.add_argument("target", metavar="MODULE:APP", help="e.g. myproject.jobs:app")
    p.add_argument("--concurrency", type=int, default=4, help="jobs run at once (default 4)")
    p.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="seconds running handlers get on shutdown before their leases are released",
    )
    p.add_argument("--poll", type=float, default=1.0, help="longest idle wait between claims, s")
    p.add_argument("--kinds", nargs="*", help="only these kinds (default: all of the app's)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--metrics-port",
        type=int,
        help="serve this worker's Prometheus metrics on 127.0.0.1:PORT/metrics",
    )
    p = sub.add_parser(
        "serve",
        help="run the HTTP API, dashboard, /readyz and /metrics",
        description="Serve the HTTP API (/v1, OpenAPI at /openapi.json), the dashboard (/), "
        "/healthz, /readyz and /metrics on uvicorn until SIGINT/SIGTERM.",
    )
    _common(p, top=False)
    p.set_defaults(standalone=cmd_serve)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument(
        "--admin-key-sha256",
        metavar="HEX",
        help="digest of the admin key (default: $TENURE_ADMIN_KEY_SHA256); "
        "see `tenure tenant admin-key`",
    )
    p.add_argument("--max-body", type=int, default=1024 * 1024, help="request body limit, bytes")
    p.add_argument(
        "--max-wait", type=float, default=30.0, help="cap of GET /v1/jobs/{id}?wait=S, seconds"
    )
    p.add_argument("--metrics-need-key", action="store_true", help="/metrics asks for admin key")
    p.add_argument(
        "--metrics-by-tenant", action="store_true", help="add a tenant label to queue metrics"
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p = sub.add_parser(
        "demo",
        help="play the seed's story: a stale worker's result rejected, its late effect refused",
        description="Starts a fenced bank on 127.0.0.1 and two worker processes on a temporary "
        "SQLite database (or --db URL) and shows, for real, what tenure guarantees.",
    )
    _common(p, top=False)
    p.set_defaults(standalone=cmd_demo)
    p = sub.add_parser(
        "chaos",
        help="run jobs through worker processes under random faults and check the guarantees",
        description="Kill, pause, partition and skew worker processes (and restart the database "
        "when the harness started it: --db embedded) while jobs run; then count what must hold. "
        "Exits 1 if a job was lost, an effect applied twice or a stale result accepted.",
    )
    _common(p, top=False)
    p.set_defaults(standalone=cmd_chaos)
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=2, help="jobs at once per worker")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of faults")
    p.add_argument("--faults", default="kill,pause,partition,restart,skew")
    p.add_argument("--fault-every", type=float, default=2.0, help="mean seconds between faults")
    p.add_argument("--lease", type=float, default=2.0, help="the job class's lease, seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--report", type=Path, help="write the figures as JSON here")
    p.add_argument("--drain-timeout", type=float, default=180.0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tenure` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    url = _url(args)
    try:
        standalone: Standalone | None = getattr(args, "standalone", None)
        if standalone is not None:
            return standalone(args)
        with connect(url) as ledger:
            code: int = args.run(ledger, args)
            return code
    except UsageError as exc:
        parser.exit(EXIT_USAGE, f"tenure: error: {exc}\n")
    except TenureError as exc:
        print(f"tenure: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
