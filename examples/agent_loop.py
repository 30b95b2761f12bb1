"""A durable agent loop on tenure alone (model calls are paid and tools act on the world,
so a killed worker must neither ask the model again nor repeat a tool's effect): a run is a
job, each model call a step (recorded, never asked again once done), each tool call an effect
keyed `run:step` at a receiver that runs each key once, fenced by the job's token.

    python examples/agent_loop.py [--db URL]      # default: a SQLite file in a temporary folder

The script plays that failure with real processes: it submits a run, starts `tenure worker
examples.agent_loop:app`, SIGKILLs it inside step 1 after the tool's real side effect but
before the step's result is recorded (the pod dies during step 1), shows the run's
stages after the crash, starts a fresh worker, and shows the resumed run's stages and how many
real side effects the tools executed: exactly two, though step 1 ran in two processes.
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

FOLDER = Path(os.environ.get("AGENT_LOOP_DIR", "."))
KILL_AT = os.environ.get("AGENT_LOOP_KILL_AT", "")
FAST: dict[str, Any] = {"lease": 2.0, "heartbeat": 0.5, "missed": 1, "jitter": 0.5}
MAX_STEPS = 12

app = tenure.App()


def scripted_model(goal: str, history: list[dict[str, Any]]) -> dict[str, Any]:
    """A model that plans two tool calls for the goal (counted, to show none is asked twice)."""
    with open(FOLDER / "model-calls.log", "a") as calls:
        calls.write(f"{len(history)}\n")
    done = sum(1 for h in history if h["type"] == "tool")
    plan = [
        {"tool": "create_ticket", "args": {"title": goal}},
        {"tool": "notify", "args": {"channel": "#ops"}, "last": True},
    ]
    return plan[done]


def call_tool(request: dict[str, Any], fx: tenure.Effect, idempotency_key: str) -> Any:
    """The tool layer: the receiver runs each key once (and refuses a stale token)."""
    with FenceGuard(f"sqlite:///{FOLDER / 'tools.db'}") as receiver:

        def real_side_effect() -> dict[str, Any]:
            with open(FOLDER / "side-effects.log", "a") as effects:
                effects.write(f"{idempotency_key} {request['tool']}\n")
            return {"ok": True, "tool": request["tool"], "key": idempotency_key}

        answer = receiver.apply(fx.job_id, fx.token, idempotency_key, real_side_effect)
    if idempotency_key.rsplit(":", 1)[1] == KILL_AT:  # the effect ran; its result is not kept
        (FOLDER / f"at-step-{KILL_AT}").write_text(str(os.getpid()))
        time.sleep(600)
    return answer


@app.job("agent_run", **FAST)
def agent_run(ctx: tenure.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The loop: model step, tool step, ... until the model's last tool call is done."""
    run_id, history = payload["run_id"], []
    for index in range(MAX_STEPS):
        if not history or history[-1]["type"] == "tool":
            reply = ctx.step(f"{index}:model", lambda: scripted_model(payload["goal"], history))
            history.append({"type": "model", "reply": reply})
            continue
        request = history[-1]["reply"]
        key = f"{run_id}:{index}"
        outcome = ctx.effect(f"{index}:tool", lambda fx, r=request, k=key: call_tool(r, fx, k))
        history.append({"type": "tool", "outcome": outcome})
        if request.get("last"):
            return {"run_id": run_id, "steps": len(history)}
    raise tenure.NonRetryable(f"the run did not finish in {MAX_STEPS} steps")


def stages(ledger: tenure.Ledger, job_id: str) -> tuple[tuple[int, str, str], ...]:
    """The run's steps: (index, type, state)."""
    shown = []
    for stage in ledger.stages(job_id):
        index, what = stage.name.split(":")
        state = "done" if stage.status == "done" else "running"
        shown.append((int(index), what, state))
    return tuple(shown)


def until(what: str, check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def worker(url: str, folder: Path, kill_at: str, number: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), *sys.path]),
        "AGENT_LOOP_DIR": str(folder),
        "AGENT_LOOP_KILL_AT": kill_at,
    }
    log = open(folder / f"worker-{number}.log", "wb")  # noqa: SIM115 - the child keeps it
    command = [sys.executable, "-m", "tenure.cli", "worker", "examples.agent_loop:app"]
    return subprocess.Popen(
        [*command, "--db", url, "--poll", "0.1"], stdout=log, stderr=log, env=env
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: SQLite in a temporary folder)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tenure-agent-loop-"))
    url = args.db or f"sqlite:///{folder / 'runs.db'}"
    with tenure.connect(url) as ledger:
        job_id = ledger.submit("agent_run", {"run_id": "run-1", "goal": "restart the VPN"})
        print("=== attempt 1 (will crash at step 1) ===")
        first = worker(url, folder, "1", 1)
        until("the worker inside step 1", (folder / "at-step-1").exists)
        first.send_signal(signal.SIGKILL)
        first.wait()
        print(f"(crash) worker {first.pid} killed with SIGKILL during step 1")
        claims = sum(e.type == "job_claimed" for e in ledger.events(job_id))
        print(f"state after crash: {stages(ledger, job_id)} | claims: {claims}")
        print("=== attempt 2 (resume) ===")
        second = worker(url, folder, "", 2)
        try:
            until("the run to end", lambda: ledger.get(job_id).terminal, timeout=120)
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(30)
        job = ledger.get(job_id)
        effects = (folder / "side-effects.log").read_text().splitlines()
        model_calls = (folder / "model-calls.log").read_text().splitlines()
        final = stages(ledger, job_id)
        print(f"final state: {final}")
        status = f"{job.state.value} | attempt {job.attempt} | model calls: {len(model_calls)}"
        print(f"run status: {status}")
        print(f"REAL tool side effects executed: {len(effects)}")
    expected = (
        (0, "model", "done"),
        (1, "tool", "done"),
        (2, "model", "done"),
        (3, "tool", "done"),
    )
    exact = len(effects) == 2 and len(model_calls) == 2 and final == expected
    return 0 if job.state == "succeeded" and exact else 1


if __name__ == "__main__":
    sys.exit(main())
