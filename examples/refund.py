"""A refund that asks a person for approval, spawns a fenced charge as a child job, waits for
it and sleeps: killed with SIGKILL at each point, it still ends with one charge.

    python examples/refund.py [--db URL]        # default: a SQLite file in a temporary folder

The script plays every part with real processes: it submits the refund, starts `tenure worker
examples.refund:app`, approves the refund (twice, as a double click would), and kills each
worker with SIGKILL at the next point (after the child is spawned, inside the charge after the
bank applied it, during the durable sleep), starting a fresh worker each time.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tenure
from tenure.fence import FenceGuard

FOLDER = Path(os.environ.get("REFUND_EXAMPLE_DIR", "."))
KILL_AT = os.environ.get("REFUND_EXAMPLE_KILL_AT", "")
# Short leases so that a killed worker's job is taken over within seconds.
FAST: dict[str, Any] = {"lease": 2.0, "heartbeat": 0.5, "missed": 1, "jitter": 0.5}

app = tenure.App()


def checkpoint(point: str) -> None:
    """Where the script kills the worker: say so, then stall until killed."""
    if point == KILL_AT:
        (FOLDER / f"at-{point}").write_text(str(os.getpid()))
        time.sleep(600)


@app.job("charge_card", **FAST)
def charge_card(ctx: tenure.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The irreversible effect: the bank (a fence receiver) runs each key once."""

    def charge(fx: tenure.Effect) -> Any:
        with FenceGuard(f"sqlite:///{FOLDER / 'bank.db'}") as bank:

            def book() -> dict[str, Any]:
                with open(FOLDER / "charges.log", "a") as ledger_file:
                    ledger_file.write(f"{fx.key} {payload['amount']}\n")
                return {"charged": payload["amount"], "fence": fx.token}

            receipt = bank.apply(fx.job_id, fx.token, fx.key, book)
        checkpoint("charged")  # the bank has it; the worker dies before recording it
        return receipt

    return ctx.effect("charge", charge)


@app.job("refund", spawns=["charge_card"], **FAST)
def refund(ctx: tenure.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    quote = ctx.step("quote", lambda: {"amount": payload["amount"]})
    answer = ctx.wait_for("approval", timeout=86_400)  # suspends: no lease, no worker slot
    if not answer.get("approved"):
        return {"refused": True}
    child = ctx.spawn("charge_card", {"amount": quote["amount"]})  # once, across attempts
    checkpoint("spawned")
    receipt = ctx.wait_job(child, timeout=3_600)  # suspends until the child ends
    ctx.sleep(2)  # a durable timer (say, a cooling-off period)
    checkpoint("slept")
    return {"receipt": receipt, "approved_by": answer.get("by")}


def until(what: str, check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


class Workers:
    """`tenure worker examples.refund:app` processes, each told where to stall."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url, self.folder = url, folder
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, kill_at: str = "", *only: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), *sys.path]),
            "REFUND_EXAMPLE_DIR": str(self.folder),
            "REFUND_EXAMPLE_KILL_AT": kill_at,
        }
        log = open(self.folder / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115
        command = [sys.executable, "-m", "tenure.cli", "worker", "examples.refund:app"]
        command += ["--db", self.url, "--poll", "0.1", *(["--kinds", *only] if only else [])]
        proc = subprocess.Popen(command, stdout=log, stderr=log, env=env)
        self.procs.append(proc)
        return proc

    def kill_at(self, proc: subprocess.Popen[bytes], point: str) -> None:
        until(f"the worker at {point!r}", (self.folder / f"at-{point}").exists)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        print(f"  worker {proc.pid} killed with SIGKILL at {point!r}")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: SQLite in a temporary folder)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tenure-refund-"))
    url = args.db or f"sqlite:///{folder / 'refund.db'}"
    ledger = tenure.connect(url)
    refund_id = ledger.submit("refund", {"amount": 4200})
    print(f"refund {refund_id} submitted")
    workers = Workers(url, folder)
    approval = {"approved": True, "by": "ops"}
    try:
        first = workers.start("spawned", "refund")  # refunds only: the charge runs later
        until("the approval wait", lambda: ledger.get(refund_id).state == "waiting")
        job = ledger.get(refund_id)
        waits_for = job.wait and job.wait.signal
        print(f"waiting for: {waits_for} (owner {job.owner_id}, lease {job.lease_until})")
        print("approve:", ledger.signal(refund_id, "approval", approval))
        print("approve again (double click):", ledger.signal(refund_id, "approval", approval))
        workers.kill_at(first, "spawned")
        workers.kill_at(workers.start("charged"), "charged")
        workers.kill_at(workers.start("slept"), "slept")
        workers.start()
        until("the refund to end", lambda: ledger.get(refund_id).terminal, timeout=120)
    finally:
        workers.stop()
    job = ledger.get(refund_id)
    children = ledger.children(refund_id)
    charges = (folder / "charges.log").read_text().splitlines()
    print(f"refund {job.state.value}: {job.result}")
    print(f"children submitted: {len(children)} ({', '.join(c.state.value for c in children)})")
    print(f"charges at the bank: {len(charges)}")
    lifecycle = [e.type.value for e in ledger.events(refund_id) if e.type.value.startswith("job_")]
    print("refund events:", " ".join(lifecycle))
    ledger.close()
    return 0 if job.state == "succeeded" and len(charges) == 1 and len(children) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
