"""`tenure rollout start|status|stop`, and the `--variants` a worker declares."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from tenure.cli.common import EXIT_OK, UsageError, _plain, _print_json
from tenure.ledger import Ledger, RolloutStatus, VariantFigures
from tenure.types import OnTrip, RolloutState


def parse_variants(values: list[str] | None) -> dict[str, list[str]]:
    """`--variants refund=v2 --variants ocr=stable,m-2` → {kind: [variant, ...]}."""
    found: dict[str, list[str]] = {}
    for value in values or []:
        kind, sep, names = value.partition("=")
        variants = [name.strip() for name in names.split(",") if name.strip()]
        if not sep or not kind.strip() or not variants:
            raise UsageError(f"--variants takes KIND=VARIANT[,VARIANT...], got {value!r}")
        found.setdefault(kind.strip(), []).extend(variants)
    return found


def add_rollout_commands(add_group: Any, add_command: Any, sub: Any) -> None:
    rsub = add_group(
        sub,
        "rollout",
        "canary a variant of a kind, with a breaker",
        "Give a variant to a share of a kind's new jobs, compare it with stable, and trip back "
        "to stable when failures or cost pass a threshold.",
    )
    p = add_command(rsub, "start", cmd_rollout_start, "start a rollout of KIND to VARIANT")
    p.add_argument("kind")
    p.add_argument("variant")
    p.add_argument("--tenants", help="only these tenants' jobs (comma-separated)")
    p.add_argument("--percent", type=float, help="share of the jobs, 0-100 (100 with --tenants)")
    p.add_argument("--max-failure-rate", type=float, help="trip above this rate (0-1)")
    p.add_argument("--max-cost-ratio", type=float, help="trip above this cost per job vs stable")
    p.add_argument("--min-jobs", type=int, default=20, help="candidate jobs ended before a trip")
    p.add_argument("--on-trip", default="stable", choices=list(OnTrip))
    p = add_command(rsub, "status", cmd_rollout_status, "compare candidate and stable")
    p.add_argument("kind")
    p = add_command(rsub, "stop", cmd_rollout_stop, "end a rollout: new jobs are stable again")
    p.add_argument("kind")
    p = add_command(rsub, "release", cmd_rollout_release, "run the jobs a tripped rollout held")
    p.add_argument("kind")


def cmd_rollout_start(ledger: Ledger, args: argparse.Namespace) -> int:
    tenants = None if args.tenants is None else [t for t in args.tenants.split(",") if t.strip()]
    rollout = ledger.operations.start_rollout(
        args.kind,
        args.variant,
        tenants=tenants,
        percent=args.percent,
        max_failure_rate=args.max_failure_rate,
        max_cost_ratio=args.max_cost_ratio,
        min_jobs=args.min_jobs,
        on_trip=args.on_trip,
    )
    if args.json:
        _print_json(_plain(asdict(rollout)))
        return EXIT_OK
    who = "every tenant" if rollout.tenants is None else ", ".join(rollout.tenants)
    print(f"rollout of {rollout.kind} to {rollout.variant}: {rollout.percent:g}% of {who}")
    return EXIT_OK


def cmd_rollout_status(ledger: Ledger, args: argparse.Namespace) -> int:
    status = ledger.operations.rollout_status(args.kind)
    if args.json:
        _print_json(
            _plain(
                {
                    "rollout": asdict(status.rollout),
                    "candidate": asdict(status.candidate),
                    "stable": asdict(status.stable),
                    "cost_ratio": status.cost_ratio,
                    "tripped_now": status.tripped_now,
                }
            )
        )
        return EXIT_OK
    print(_headline(status))
    print(f"  {'':22} {'candidate':>12} {'stable':>12}")
    for label, value in _rows(status.candidate, status.stable):
        print(f"  {label:22} {value[0]:>12} {value[1]:>12}")
    ratio = "n/a" if status.cost_ratio is None else f"{status.cost_ratio:.2f}"
    print(f"  cost ratio (usd per job, candidate / stable): {ratio}")
    return EXIT_OK


def cmd_rollout_stop(ledger: Ledger, args: argparse.Namespace) -> int:
    ledger.operations.stop_rollout(args.kind)
    if args.json:
        _print_json({"kind": args.kind, "stopped": True})
    else:
        print(f"rollout of {args.kind} stopped: new jobs are stable")
    return EXIT_OK


def cmd_rollout_release(ledger: Ledger, args: argparse.Namespace) -> int:
    released = ledger.operations.release_held(args.kind)
    if args.json:
        _print_json({"kind": args.kind, "released": released})
    else:
        print(f"released {released} held job(s) of {args.kind}: they run as stable")
    return EXIT_OK


def _headline(status: RolloutStatus) -> str:
    r = status.rollout
    who = "every tenant" if r.tenants is None else ", ".join(r.tenants)
    line = f"rollout of {r.kind} to {r.variant} ({r.percent:g}% of {who}): {r.state}"
    if r.state is RolloutState.TRIPPED and r.trip:
        line += f" ({', '.join(r.trip.get('why', []))} after {r.trip.get('jobs')} jobs)"
        line += ": new jobs get stable" if r.on_trip is OnTrip.STABLE else ": its new jobs are held"
    limits = []
    if r.max_failure_rate is not None:
        limits.append(f"failure rate > {r.max_failure_rate:g}")
    if r.max_cost_ratio is not None:
        limits.append(f"cost ratio > {r.max_cost_ratio:g}")
    if limits:
        line += f"\n  breaker: {' or '.join(limits)}, after {r.min_jobs} candidate jobs ended"
    return line


def _rows(a: VariantFigures, b: VariantFigures) -> list[tuple[str, tuple[str, str]]]:
    def both(value: Any) -> tuple[str, str]:
        return (value(a), value(b))

    def rate(f: VariantFigures) -> str:
        return "n/a" if f.failure_rate is None else f"{f.failure_rate:.1%}"

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    return [
        ("jobs", both(lambda f: str(f.jobs))),
        ("succeeded", both(lambda f: str(f.succeeded))),
        ("failed", both(lambda f: str(f.failed))),
        ("cancelled", both(lambda f: str(f.cancelled))),
        ("not ended", both(lambda f: str(f.unfinished))),
        ("failure rate", both(rate)),
        ("retries", both(lambda f: str(f.retries))),
        ("p50 ms (submit to end)", both(lambda f: ms(f.p50_ms))),
        ("p95 ms (submit to end)", both(lambda f: ms(f.p95_ms))),
        ("tokens", both(lambda f: str(f.tokens))),
        ("usd", both(lambda f: f"{f.usd:.4f}")),
        ("steps in doubt", both(lambda f: str(f.in_doubt))),
    ]
