"""The commands that act on a ledger: submit, status, jobs, events, cancel, signal, requeue,
purge, replay, migrate, and the tenant commands."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from tenure.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    UsageError,
    _plain,
    _print_json,
    _short,
    _when,
    event_dict,
    job_dict,
    load_app,
    print_rows,
    shown,
)
from tenure.cli.lives import show_timeline
from tenure.evaluation import evaluate, golden_set, read_job_ids
from tenure.evidence import Evidence
from tenure.ledger import Ledger
from tenure.replay import replay
from tenure.types import Event, JobState, PurgeReport
from tenure.waits import describe_wait


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
    except ValueError as exc:  # JSONDecodeError, and integers of over 4,300 digits
        raise UsageError(f"--payload is not JSON: {exc}") from exc
    labels = {}
    for pair in args.label:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--label takes KEY=VALUE, got {pair!r}")
        labels[key] = value
    budget: dict[str, float] = {}
    for pair in args.budget:
        unit, sep, amount = pair.partition("=")
        if unit in budget:
            raise UsageError(f"--budget names {unit!r} twice")
        try:
            budget[unit] = float(amount if sep else "not a number")
        except ValueError:
            raise UsageError(f"--budget takes UNIT=AMOUNT, got {pair!r}") from None
    job_id = ledger.submit(
        args.kind,
        payload,
        idempotency_key=args.key,
        tenant=args.tenant,
        max_attempts=args.max_attempts,
        priority=args.priority,
        labels=labels or None,
        traceparent=args.traceparent,
        principal=args.principal,
        budget=budget or None,
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
        ("token", str(job.token)),
        ("owner", job.owner_id or "-"),
        ("lease until", _when(job.lease_until)),
        ("heartbeat", _when(job.heartbeat_at)),
        ("step", str(job.step)),
        ("priority", str(job.priority)),
        ("created", _when(job.created_at)),
        ("updated", _when(job.updated_at)),
        ("payload sha256", job.payload_sha256),
    ]
    if job.principal is not None:
        rows.append(("principal", job.principal))
    if job.version is not None:
        rows.append(("class version", str(job.version)))
    if job.evidence:
        rows.append(("evidence", f"{len(job.evidence)} reference(s): tenure evidence {job.id}"))
    if job.parent_id is not None:
        rows.append(("parent", job.parent_id))
    if job.state is JobState.WAITING:
        rows.append(("waiting for", describe_wait(job.wait)))
    if job.error is not None:
        rows.append(("error", json.dumps(job.error, sort_keys=True)))
    if job.result is not None:
        rows.append(("result", json.dumps(job.result, sort_keys=True)))
    for name, value in rows:
        print(f"{name:>15}  {shown(value)}")
    for stage in stages:
        print(
            f"{'stage ' + str(stage.position):>15}  {stage.kind.value} {shown(repr(stage.name))} "
            f"{stage.status.value} (token {stage.token})"
        )
    return EXIT_OK


def cmd_jobs(ledger: Ledger, args: argparse.Namespace) -> int:
    jobs = ledger.list(
        state=args.state, kind=args.kind, tenant=args.tenant, limit=args.limit, after=args.after
    )
    return print_rows(
        jobs,
        args.json,
        job_dict,
        lambda job: (
            f"{job.id:36}  {shown(job.kind[:16]):16}  {job.state.value:9}  "
            f"{job.attempt:>2}/{job.max_attempts:<2}  {job.token:>5}  {job.step:>4}  "
            f"{_when(job.created_at)}"
        ),
        heading=f"{'ID':36}  {'KIND':16}  {'STATE':9}  {'ATT':>5}  {'TOKEN':>5}  {'STEP':>4}  "
        "CREATED",
    )


def cmd_events(ledger: Ledger, args: argparse.Namespace) -> int:
    if args.html is not None and not args.timeline:
        raise UsageError("--html writes the timeline: give --timeline too")
    if args.timeline:
        return show_timeline(ledger, args.id, args.json, args.html)

    def line(event: Event) -> str:
        detail = " ".join(f"{k}={v}" for k, v in sorted(event.detail.items()))
        token = "-" if event.token is None else event.token
        return shown(
            f"{event.seq:>6}  {_when(event.at)}  {event.type:20}  token={token}  "
            f"owner={event.owner_id or '-'}  {detail}"
        )

    return print_rows(ledger.events(args.id), args.json, event_dict, line)


def cmd_evidence(ledger: Ledger, args: argparse.Namespace) -> int:
    def line(record: Evidence) -> str:
        fields = " ".join(f"{k}={v}" for k, v in asdict(record.ref).items() if v is not None)
        source = f"  retriever={record.retriever}" if record.retriever else ""
        return shown(
            f"{record.seq:>4}  {_when(record.at)}  {record.ref.type:8}  token={record.token}"
            f"{source}  {fields}"
        )

    found = ledger.evidence(args.id)
    return print_rows(
        found, args.json, lambda record: record.to_dict(), line, empty="no evidence recorded"
    )


def cmd_cancel(ledger: Ledger, args: argparse.Namespace) -> int:
    ledger.cancel(args.id)
    return _report_state(ledger, args)


def cmd_signal(ledger: Ledger, args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:  # JSONDecodeError, and integers of over 4,300 digits
        raise UsageError(f"--payload is not JSON: {exc}") from exc
    stored = ledger.signal(args.id, args.name, payload)
    job = ledger.get(args.id)
    if args.json:
        _print_json({"id": job.id, "signal": args.name, "stored": stored, "state": job.state.value})
    else:
        said = "stored" if stored else "already stored with this payload (nothing changed)"
        print(f"signal {args.name!r} {said}; job {job.id} is {job.state.value}")
    return EXIT_OK


def cmd_requeue(ledger: Ledger, args: argparse.Namespace) -> int:
    ledger.requeue(args.id)
    return _report_state(ledger, args)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


# Purging everything that finished less than this long ago needs --yes.
CONFIRM_BELOW_SECONDS = 60.0


def parse_age(text: str) -> float:
    """`30d`, `12h`, `90m`, `45s` or `2w` → seconds. A bare number is refused: `30` reads as
    thirty days to some and as thirty seconds to others."""
    value = text.strip().lower()
    unit = _UNITS.get(value[-1:]) if value else None
    if unit is None:
        raise UsageError(
            f"an age needs its unit: 30d, 12h, 90m, 45s or 2w, got {text!r} (a bare number "
            "would be read as seconds)"
        )
    try:
        seconds = float(value[:-1]) * unit
    except ValueError:
        raise UsageError(f"expected an age like 30d, 12h, 90m or 45s, got {text!r}") from None
    if not 0 <= seconds < float("inf"):
        raise UsageError(f"an age must be zero or more, got {text!r}")
    return seconds


def cmd_purge(ledger: Ledger, args: argparse.Namespace) -> int:
    older_than = parse_age(args.older_than)
    keep_keys = parse_age(args.keep_keys)
    if older_than < CONFIRM_BELOW_SECONDS and not (args.yes or args.dry_run):
        raise UsageError(
            f"--older-than {args.older_than} deletes every job that finished more than "
            f"{older_than:g} s ago: add --yes to confirm, or --dry-run to see how many"
        )
    if args.dry_run:
        preview = ledger.operations.purge(older_than, keep_keys=keep_keys, dry_run=True)
        if args.json:
            _print_json({"dry_run": True, **asdict(preview)})
        else:
            print(
                f"would purge {preview.jobs} jobs (with their events, stages and effects); "
                f"would keep {preview.kept_for_keys} for their idempotency keys"
            )
        return EXIT_OK

    def progress(report: PurgeReport) -> None:
        if report.batches % 10 == 0:
            print(f"purging: {report.jobs} jobs so far…", file=sys.stderr, flush=True)

    report = ledger.operations.purge(
        older_than, keep_keys=keep_keys, batch_size=args.batch, on_batch=progress
    )
    if args.json:
        _print_json(asdict(report))
    else:
        print(
            f"purged {report.jobs} jobs, {report.events} events, {report.stages} stages, "
            f"{report.effects} effects in {report.batches} batches; kept "
            f"{report.kept_for_keys} for their idempotency keys; removed "
            f"{report.retrievals} cached retrievals"
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


def cmd_eval(ledger: Ledger, args: argparse.Namespace) -> int:
    """Exit 1 when the candidate passes fewer assertions than the recording."""
    baseline = load_app(args.app)
    candidate = load_app(args.against) if args.against else baseline
    if args.jobs:
        job_ids = read_job_ids(Path(args.jobs))
    else:
        job_ids = golden_set(ledger, args.kind, parse_age(args.since))
    names = (args.app, args.against or args.app)
    report = evaluate(ledger, job_ids, baseline, candidate, names=names)
    if args.json:
        _print_json({"jobs": [asdict(job) for job in report.jobs], "totals": report.totals()})
        return EXIT_FAILURE if report.regressed else EXIT_OK
    print(
        f"golden set: {len(report.jobs)} job(s), replayed through {names[1]} and judged by "
        f"{names[0]}'s assertions; effects were not sent"
    )
    for job in report.jobs:
        replayed = "not replayed" if job.recorded_state == "cancelled" else "replayed"
        print(
            f"  {job.job_id[-8:]} {job.kind} {job.recorded_state:9} assertions "
            f"{job.recorded_passed}/{job.assertions} recorded, {job.replayed_passed}/"
            f"{job.assertions} {replayed}; stages differ {job.stages_differ}; effects "
            f"+{job.effects_added} -{job.effects_dropped}"
        )
        if job.differing:
            print(f"      differs at {', '.join(job.differing)}")
        for failure in job.failures:
            print(f"      fails {failure}")
    totals = report.totals()
    print(
        f"total: assertions passed {totals['recorded_passed']}/{totals['assertions']} recorded, "
        f"{totals['replayed_passed']}/{totals['assertions']} replayed; stages differ "
        f"{totals['stages_differ']}; effects added {totals['effects_added']}, dropped "
        f"{totals['effects_dropped']}"
    )
    print(
        f"p95 duration: recorded {_ms(totals['recorded_p95_ms'])}, replayed "
        f"{_ms(totals['replayed_p95_ms'])}; cost (ctx.report_cost): recorded "
        f"{totals['recorded_tokens']} tokens {totals['recorded_usd']:.4f} usd, replayed "
        f"{totals['replayed_tokens']} tokens {totals['replayed_usd']:.4f} usd"
    )
    if report.regressed:
        print("the candidate passes fewer assertions than the recording: exit 1")
        return EXIT_FAILURE
    print("the candidate passes as many assertions as the recording")
    return EXIT_OK


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


def cmd_tenant_create(ledger: Ledger, args: argparse.Namespace) -> int:
    _print_key(args, args.name, ledger.operations.create_tenant(args.name))
    return EXIT_OK


def cmd_tenant_key(ledger: Ledger, args: argparse.Namespace) -> int:
    words: list[str] = args.words
    if words[0] == "list" and len(words) <= 2:
        if args.principal is not None:
            raise UsageError("--principal binds a new key: use it with `tenant key add`")
        return _list_keys(ledger, args, words[1] if len(words) == 2 else None)
    if words[0] == "add" and len(words) == 2:
        tenant = words[1]
    elif len(words) == 1:
        tenant = words[0]
    else:
        raise UsageError("use `tenure tenant key add TENANT` or `tenure tenant key list [TENANT]`")
    key = ledger.operations.issue_key(tenant, principal=args.principal)
    _print_key(args, tenant, key, args.principal)
    return EXIT_OK


def _list_keys(ledger: Ledger, args: argparse.Namespace, tenant: str | None) -> int:
    found = ledger.operations.keys(tenant)
    if args.json:
        _print_json([_plain(asdict(k)) for k in found])
        return EXIT_OK
    print(f"{'KEY ID':<14} {'TENANT':<20} {'PRINCIPAL':<24} {'STATE':<8} ISSUED")
    for k in found:
        principal = "(service key)" if k.principal is None else shown(k.principal)
        state = "revoked" if k.revoked else "live"
        print(
            f"{k.key_id:<14} {shown(k.tenant):<20} {principal:<24} {state:<8} {_when(k.created_at)}"
        )
    return EXIT_OK


def _print_key(
    args: argparse.Namespace, tenant: str, key: str, principal: str | None = None
) -> None:
    if args.json:
        _print_json({"tenant": tenant, "key": key, "principal": principal})
    else:
        print(key)
        print("(shown once; tenure keeps only its SHA-256)", file=sys.stderr)
        if principal is not None:
            print(f"(bound to the principal {shown(principal)})", file=sys.stderr)


def cmd_tenant_revoke(ledger: Ledger, args: argparse.Namespace) -> int:
    revoked = ledger.operations.revoke_keys(args.name, args.key_id)
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
    ledger.operations.set_tenant_limit(args.name, limit)
    # A tenant is any name jobs are submitted under (`default` included); a limit may come
    # before its first job, so an unknown name is accepted, and said to be unknown.
    known = any(t.name == args.name for t in ledger.operations.tenants()) or ledger.list(
        tenant=args.name, limit=1
    )
    if limit is not None and not known:
        print(
            f"tenure: note: no tenant {args.name!r} has API keys or jobs yet; the limit "
            "applies to its jobs once they come (check the spelling)",
            file=sys.stderr,
        )
    if args.json:
        _print_json({"tenant": args.name, "limit": limit})
    elif limit is None:
        print(f"tenant {args.name}: no limit")
    else:
        print(f"tenant {args.name}: at most {limit} jobs at once")
    return EXIT_OK


def cmd_tenant_list(ledger: Ledger, args: argparse.Namespace) -> int:
    tenants = ledger.operations.tenants()
    if args.json:
        _print_json([_plain(asdict(t)) for t in tenants])
        return EXIT_OK
    print(f"{'TENANT':<30} {'KEYS':>4} {'REVOKED':>7}  CREATED")
    for t in tenants:
        print(f"{shown(t.name):<30} {t.active_keys:>4} {t.revoked_keys:>7}  {_when(t.created_at)}")
    return EXIT_OK


def _report_state(ledger: Ledger, args: argparse.Namespace) -> int:
    job = ledger.get(args.id)
    if args.json:
        _print_json({"id": job.id, "state": job.state.value, "fencing_token": job.token})
    else:
        print(f"{job.id} {job.state.value} (token {job.token})")
    return EXIT_OK
