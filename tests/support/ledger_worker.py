"""A worker process for tests: `python -m tests.support.ledger_worker MODE URL [options]`.

It talks to the ledger like a real worker in its own process and prints one JSON line per
thing it did, so that the test can check what each process saw.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import tenure


def say(**fields: object) -> None:
    print(json.dumps(fields, default=str), flush=True)


def claim_within(
    ledger: tenure.Ledger, owner: str, lease: float, seconds: float
) -> tenure.Lease | None:
    """Poll for a claimable job until `seconds` pass (a worker's claim loop, without a runtime)."""
    deadline = time.monotonic() + seconds
    while True:
        taken = ledger.claim(owner, lease_seconds=lease)
        if taken is not None or time.monotonic() > deadline:
            return taken
        time.sleep(0.02)


def claim_and_report(ledger: tenure.Ledger, args: argparse.Namespace) -> tenure.Lease | None:
    """Claim within --wait seconds and say what was claimed (or that nothing was)."""
    lease = claim_within(ledger, args.owner, args.lease, args.wait)
    if lease is None:
        say(claimed=False)
    else:
        say(claimed=True, job_id=lease.job_id, token=lease.token, step=lease.step)
    return lease


def seed_step(ledger: tenure.Ledger, args: argparse.Namespace) -> int:
    """The Chinese seed's worker: step 0 → retrieve and exit; step 1 → answer and finish."""
    lease = claim_and_report(ledger, args)
    if lease is None:
        return 3
    if lease.step == 0:
        ledger.save_step(lease, 1, {"evidence": "retrieved evidence"})
        say(action="saved_step", step=1)
        os._exit(0)  # leave like a crashed process: no release, no completion
    evidence = lease.checkpoint["evidence"]
    ledger.save_step(lease, 2, {"evidence": evidence, "answer": "answer from persisted evidence"})
    ledger.complete(lease, {"answer": "answer from persisted evidence", "evidence": evidence})
    say(action="completed", step=2)
    return 0


def hold_then_commit(ledger: tenure.Ledger, args: argparse.Namespace) -> int:
    """Claim, report, wait for a line on stdin, then try to commit."""
    lease = claim_and_report(ledger, args)
    if lease is None:
        return 3
    sys.stdin.readline()
    try:
        ledger.complete(lease, {"by": args.owner, "token": lease.token})
    except tenure.LeaseLost:
        say(action="lease_lost")
        return 4
    say(action="completed")
    return 0


def race(ledger: tenure.Ledger, args: argparse.Namespace) -> int:
    """Wait for 'go', then claim without completing until the run time is over (or none left)."""
    say(ready=True)
    sys.stdin.readline()
    claims = []
    stop = time.monotonic() + args.run_for
    while time.monotonic() < stop:
        lease = ledger.claim(args.owner, lease_seconds=args.lease)
        if lease is None:
            if args.once:
                break
            time.sleep(0.005)
            continue
        claims.append(
            [lease.job_id, lease.token, lease.claimed_at.timestamp(), lease.lease_until.timestamp()]
        )
        # A worker runs what it claims before claiming again: without this, SQLite's busy
        # handler lets one process retake the lock over and over (issue 7's fairness).
        time.sleep(args.work)
    say(owner=args.owner, claims=claims)
    return 0


def migrate(ledger: tenure.Ledger, args: argparse.Namespace) -> int:
    """Wait for 'go', then migrate; print the versions this process applied."""
    say(ready=True)
    sys.stdin.readline()
    say(applied=ledger.migrate())
    return 0


MODES = {
    "seed-step": seed_step,
    "hold-then-commit": hold_then_commit,
    "race": race,
    "migrate": migrate,
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("url")
    parser.add_argument("--owner", default=f"worker-{os.getpid()}")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--wait", type=float, default=10.0)
    parser.add_argument("--run-for", type=float, default=30.0)
    parser.add_argument("--once", action="store_true", help="race: stop when nothing is left")
    parser.add_argument("--work", type=float, default=0.002, help="race: seconds per job")
    args = parser.parse_args()
    with tenure.connect(args.url, migrate=False) as ledger:
        return MODES[args.mode](ledger, args)


if __name__ == "__main__":
    sys.exit(main())
