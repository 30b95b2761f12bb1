"""The commands that run something: a worker, the HTTP service, the demo, chaos; and the admin
key (no ledger needed)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys

from tenure import keys
from tenure.cli.common import (
    EXIT_OK,
    UsageError,
    _print_json,
    app_database,
    load_app,
)
from tenure.cli.rollouts import parse_variants
from tenure.database_url import (
    ChosenDatabase,
    differs_from_environment,
    environment_url,
    shown_url,
    without_app,
)
from tenure.errors import TenureError
from tenure.extras import MissingExtra, install_hint
from tenure.logs import configure_json_logging, emit
from tenure.runtime.worker import Worker
from tenure.storage import LISTEN_URL_ENV, POSTGRES_PREFIXES

log = logging.getLogger("tenure")


def _use_listen_db(args: argparse.Namespace, url: str) -> None:
    """--listen-db applies to every ledger this process opens (on `url`), as
    $TENURE_LISTEN_URL does; refused beside a database that has no LISTEN."""
    if args.listen_db is None:
        return
    if not args.listen_db.startswith(POSTGRES_PREFIXES):
        raise UsageError("--listen-db must be a postgresql:// URL of the same database")
    if not url.startswith(POSTGRES_PREFIXES):
        scheme = url.split(":", 1)[0]
        raise UsageError(
            f"--listen-db is for a PostgreSQL database behind a transaction pooler, and the "
            f"database here is a {scheme} one, which has no LISTEN: leave --listen-db out"
        )
    os.environ[LISTEN_URL_ENV] = args.listen_db


def _warn_if_split(chosen: ChosenDatabase) -> None:
    """At a process's start: say so when the environment names another database than this
    process uses (after logging is configured, so the line is the process's JSON)."""
    warning = differs_from_environment(chosen)
    if warning is not None:
        emit(
            log,
            logging.WARNING,
            "database_differs",
            database=chosen.shown,
            source=str(chosen.source),
            environment=shown_url(environment_url() or ""),
            message=warning,
        )


def cmd_worker(args: argparse.Namespace) -> int:
    app = load_app(args.target, args.app_dir)
    chosen = app_database(app, args.db, args.app_dir)
    url = chosen.url
    _use_listen_db(args, url)
    configure_json_logging(getattr(logging, args.log_level.upper()))
    _warn_if_split(chosen)
    worker = Worker(
        app,
        concurrency=args.concurrency,
        url=url,
        grace=args.grace,
        poll_interval=args.poll,
        kinds=args.kinds or None,
        variants=parse_variants(args.variants),
    )
    if args.metrics_port is not None:
        _serve_worker_metrics(worker, args.metrics_port)
    worker.run()
    return EXIT_OK


def _service_extra(exc: ImportError) -> UsageError:
    if isinstance(exc, MissingExtra):
        return UsageError(str(exc))
    return UsageError(
        f"this command needs the service extra ({exc.name} is missing): {install_hint('service')}"
    )


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from tenure.service.serve import serve
        from tenure.service.settings import ServiceSettings
    except ImportError as exc:
        raise _service_extra(exc) from exc
    chosen = without_app(args.db)
    _use_listen_db(args, chosen.url)
    configure_json_logging(getattr(logging, args.log_level.upper()))
    _warn_if_split(chosen)
    settings = ServiceSettings(
        admin_key_sha256=args.admin_key_sha256 or ServiceSettings.admin_digest_from_env(),
        max_body_bytes=args.max_body,
        max_wait_seconds=args.max_wait,
        metrics_need_key=args.metrics_need_key,
        metrics_by_tenant=args.metrics_by_tenant,
        **(
            {}
            if args.max_waits_per_tenant is None
            else {"max_waits_per_tenant": args.max_waits_per_tenant}
        ),
    )
    serve(chosen.url, host=args.host, port=args.port, settings=settings, log_level=args.log_level)
    return EXIT_OK


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from tenure.mcp import run_mcp
        from tenure.mcp.serve import check_loopback
    except MissingExtra as exc:
        raise UsageError(str(exc)) from exc

    if args.no_auth:
        if args.transport != "streamable-http":
            raise UsageError("--no-auth is for --transport streamable-http (stdio has no key)")
        try:
            check_loopback(args.host)
        except TenureError as exc:
            raise UsageError(str(exc)) from None
    app = load_app(args.target, args.app_dir)
    if not any(job_class.tool for job_class in app.job_classes.values()):
        raise UsageError(
            f"{args.target} has no job class with tool=True, so `tenure mcp` would offer no "
            "tool of its own: mark the jobs a model may call with @app.job(..., tool=True, "
            "input_schema=...)"
        )
    chosen = app_database(app, args.db, args.app_dir)
    url = chosen.url
    _use_listen_db(args, url)
    configure_json_logging(getattr(logging, args.log_level.upper()))
    _warn_if_split(chosen)
    with app.connect(url) as ledger:
        emit(log, logging.INFO, "mcp_database", database=ledger.operations.where)
        run_mcp(
            app,
            ledger,
            transport=args.transport,
            tenant=args.tenant,
            host=args.host,
            port=args.port,
            admin_key_sha256=args.admin_key_sha256 or keys.admin_digest_from_env(),
            log_level=args.log_level,
            no_auth=args.no_auth,
            stateless=args.stateless,
        )
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
    from tenure.runtime.figures import WorkerFigures

    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(WorkerFigures(worker)))
    start_http_server(port, addr="127.0.0.1", registry=registry)


def cmd_demo(args: argparse.Namespace) -> int:
    from tenure.demo.run import run_demo

    return run_demo(args.db, keep=args.keep, page=args.timeline)


def cmd_chaos(args: argparse.Namespace) -> int:
    from tenure.chaos.harness import FAULT_KINDS, Harness, Options

    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = set(faults) - set(FAULT_KINDS)
    if unknown:
        raise UsageError(f"unknown fault kinds {sorted(unknown)}: use {','.join(FAULT_KINDS)}")
    if args.jobs < 1 or args.workers < 1 or args.duration <= 0 or args.parents < 0:
        raise UsageError("--jobs, --workers and --duration must be positive, --parents >= 0")
    if not 0 < args.submit_rate <= 10_000:
        raise UsageError("--submit-rate must be above 0 and at most 10000 per second")
    # Every option is the flag of its name (--drain-timeout: drain_timeout), faults parsed.
    given = {field.name: getattr(args, field.name) for field in dataclasses.fields(Options)}
    return Harness(Options(**{**given, "faults": faults})).run()
