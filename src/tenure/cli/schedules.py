"""`tenure schedule list|pause|resume|trigger`: the schedules the workers fire."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from datetime import datetime
from typing import Any

from tenure.cli.common import EXIT_OK, _plain, _print_json
from tenure.ledger import Ledger


def add_schedule_commands(add_group: Any, add_command: Any, sub: Any) -> None:
    ssub = add_group(
        sub,
        "schedule",
        "the kinds that fire by themselves: next and last firing, pause, run now",
        "A job class declared with schedule=... is fired by every worker that runs it, one job "
        "per slot. These commands read and steer the schedules those workers declared.",
    )
    add_command(ssub, "list", cmd_schedule_list, "each schedule, its next and last firing")
    for name, function, what in (
        ("pause", cmd_schedule_pause, "fire no slot of KIND until resumed (kept on restart)"),
        ("resume", cmd_schedule_resume, "fire KIND again (missed slots per its missed_slots)"),
        ("trigger", cmd_schedule_trigger, "run KIND once now (a worker running it submits it)"),
    ):
        add_command(ssub, name, function, what).add_argument("kind")


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(timespec="seconds")


def cmd_schedule_list(ledger: Ledger, args: argparse.Namespace) -> int:
    rows = ledger.operations.schedules.list()
    if args.json:
        _print_json(_plain([asdict(row) for row in rows]))
        return EXIT_OK
    if not rows:
        print("no schedules: a worker running a job class with schedule=... declares one")
        return EXIT_OK
    print(f"{'kind':24} {'state':7} {'next slot':26} {'last slot':26} {'fired':>6} {'missed':>6}")
    for row in rows:
        state = "paused" if row.paused else "on"
        print(
            f"{row.kind:24} {state:7} {_when(row.next_slot):26} {_when(row.last_slot):26} "
            f"{row.fired:>6} {row.missed:>6}"
        )
        print(f"  {row.description}")
    return EXIT_OK


def _done(args: argparse.Namespace, verb: str, message: str) -> int:
    if args.json:
        _print_json({"kind": args.kind, verb: True})
    else:
        print(message)
    return EXIT_OK


def cmd_schedule_pause(ledger: Ledger, args: argparse.Namespace) -> int:
    ledger.operations.schedules.pause(args.kind)
    return _done(args, "paused", f"schedule of {args.kind} paused")


def cmd_schedule_resume(ledger: Ledger, args: argparse.Namespace) -> int:
    ledger.operations.schedules.resume(args.kind)
    return _done(args, "resumed", f"schedule of {args.kind} resumed")


def cmd_schedule_trigger(ledger: Ledger, args: argparse.Namespace) -> int:
    ledger.operations.schedules.trigger(args.kind)
    return _done(args, "triggered", f"a run of {args.kind} is asked for: a worker submits it")
