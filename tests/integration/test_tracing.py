"""OpenTelemetry traces with the real SDK: the test's span (in-memory exporter) submits a job of
two steps and a fenced effect; `tenure worker` processes and a fenced receiver process export
their spans to files. The first worker is paused inside its first step until its lease is
gone; the second runs the job. One trace goes from the submit through both attempts to the
receiver's fence decision, the lease loss is an event of the first attempt, and no payload or
result is in any span."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tenure
from tenure.testing.process import spawn_worker, wait_started
from tests.support import traced
from tests.support.processes import ROOT
from tests.support.service import free_port
from tests.support.tokens import claimed
from tests.support.waiting import poll, until_db_time_passes

pytestmark = pytest.mark.slow
SECRET_CARD = "4111-SECRET-CARD"  # noqa: S105 - content that must not leak


def spans_in(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _hex(value: int, width: int) -> str:
    return f"0x{value:0{width}x}"


class Processes:
    """A fenced receiver process and `tenure worker tests.support.traced:app` processes,
    each exporting its spans to `<name>.spans` in the test's folder."""

    def __init__(self, folder: Path, db_url: str) -> None:
        self.folder, self.db_url = folder, db_url
        self.port = free_port()
        self.env = {
            "PYTHONPATH": str(ROOT),
            "TENURE_TEST_DIR": str(folder),
            "TENURE_TEST_RECEIVER": f"http://127.0.0.1:{self.port}",
        }
        self.procs: list[subprocess.Popen[bytes]] = []

    def receiver(self) -> None:
        command = [sys.executable, "-m", "tests.support.traced", "receiver", str(self.port)]
        self.procs.append(
            subprocess.Popen(
                [*command, f"sqlite:///{self.folder / 'bank.db'}"],
                env={**os.environ, **self.env, "TENURE_TEST_SPANS": self.spans_file("receiver")},
                cwd=ROOT,
            )
        )
        poll(lambda: listening(self.port), 30, "the receiver to listen")

    def worker(self, name: str) -> subprocess.Popen[bytes]:
        log = self.folder / f"{name}.log"
        env = {**self.env, "TENURE_TEST_SPANS": self.spans_file(name)}
        proc = spawn_worker(
            "tests.support.traced:app", self.db_url, log, "--poll", "0.05", env=env, cwd=ROOT
        )
        self.procs.append(proc)
        wait_started(proc, log)
        return proc

    def spans_file(self, name: str) -> str:
        return str(self.folder / f"{name}.spans")

    def spans(self, *names: str) -> list[dict[str, Any]]:
        return [span for name in names for span in spans_in(Path(self.spans_file(name)))]

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            proc.wait(timeout=30)


@pytest.fixture
def processes(db_url: str, tmp_path: Path) -> Iterator[Processes]:
    group = Processes(tmp_path, db_url)
    try:
        yield group
    finally:
        group.stop()


def test_one_trace_from_the_submit_through_both_attempts_to_the_receiver(
    db_url: str, tmp_path: Path, processes: Processes
) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    processes.receiver()
    with traced.app.connect(db_url) as ledger:
        with provider.get_tracer("agent").start_as_current_span("agent.turn") as turn:
            payload = {"amount": 7, "card": SECRET_CARD}
            job_id = ledger.submit("traced_charge", payload, labels={"model": "m-2"})
        context = turn.get_span_context()
        assert ledger.get(job_id).traceparent == (
            f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
        )
        first = processes.worker("w1")
        poll((tmp_path / "in-quote").exists, 30, "the first attempt's quote")
        first.send_signal(signal.SIGSTOP)
        held_until = ledger.get(job_id).lease_until
        assert held_until is not None
        until_db_time_passes(ledger, held_until)
        processes.worker("w2")
        done = poll(lambda: (job := ledger.get(job_id)).terminal and job, 30, "the job")
        assert (done.state, done.attempt, done.result) == (
            tenure.JobState.SUCCEEDED, 2, {"receipt": "r-7"},
        )  # fmt: skip
        first.send_signal(signal.SIGCONT)
        poll(
            lambda: any(
                e.type == "heartbeat_lost" and e.token == claimed(ledger, job_id)[0]
                for e in ledger.events(job_id)
            ),
            30,
            "the first worker to find its lease lost",
        )
        (tmp_path / "go").write_text("")  # its handler returns: the attempt ends, stopped
        poll(
            lambda: any(s["name"] == "tenure.job" for s in processes.spans("w1")),
            30,
            "the first attempt's span to end",
        )
    (submitted,) = memory.get_finished_spans()
    check_trace(processes.spans("w1", "w2", "receiver"), submitted, job_id)


def check_trace(spans: list[dict[str, Any]], submitted: Any, job_id: str) -> None:
    """One trace: both attempts under the submit's span, the lease loss on the first, the
    second's stages under it, the receiver's fence decision under the effect; no content."""
    assert {span["context"]["trace_id"] for span in spans} == {_hex(submitted.context.trace_id, 32)}
    attempts = sorted(
        (s for s in spans if s["name"] == "tenure.job"),
        key=lambda s: s["attributes"]["tenure.attempt"],
    )
    assert [a["attributes"]["tenure.attempt"] for a in attempts] == [1, 2]
    assert {a["parent_id"] for a in attempts} == {_hex(submitted.context.span_id, 16)}
    lost = [e for e in attempts[0]["events"] if e["name"] == "tenure.lease_lost"]
    first_token = attempts[0]["attributes"]["tenure.token"]
    assert [e["attributes"]["tenure.token"] for e in lost] == [first_token]
    second = attempts[1]["attributes"]
    assert (second["tenure.job.id"], second["tenure.job.kind"]) == (job_id, "traced_charge")
    assert second["tenure.token"] > first_token
    assert (second["tenure.label.tool"], second["tenure.label.model"]) == ("payments", "m-2")
    assert second["tenure.outcome"] == "succeeded"

    stages = [s for s in spans if s["parent_id"] == attempts[1]["context"]["span_id"]]
    assert [
        (s["name"], s["attributes"]["tenure.stage.name"], s["attributes"]["tenure.stage.in_doubt"])
        for s in sorted(stages, key=lambda s: s["attributes"]["tenure.stage.position"])
    ] == [
        ("tenure.step", "quote", True),
        ("tenure.effect", "charge", False),
        ("tenure.step", "summary", False),
    ]
    (effect,) = [s for s in stages if s["name"] == "tenure.effect"]
    (fence,) = [s for s in spans if s["name"] == "tenure.fence"]
    assert fence["parent_id"] == effect["context"]["span_id"]
    assert (fence["attributes"]["tenure.fence.outcome"], fence["attributes"]["tenure.token"]) == (
        "applied", second["tenure.token"],
    )  # fmt: skip
    everything = json.dumps([(s["attributes"], s["events"]) for s in spans])
    assert SECRET_CARD not in everything and "r-7" not in everything


def test_without_the_extra_nothing_is_imported(tmp_path: Path) -> None:
    """A process without site-packages (so without opentelemetry, as without `tenure[otel]`)
    runs a job with an effect on SQLite: nothing of OpenTelemetry is imported, fx carries no
    traceparent."""
    script = f"""
import sys
sys.path.insert(0, {str(ROOT / "src")!r})
import tenure
app = tenure.App({f"sqlite:///{tmp_path / 'plain.db'}"!r})

@app.job("k", lease=1.0, heartbeat=0.25, jitter=0.3)
def k(ctx, payload):
    return ctx.effect("e", lambda fx: {{"traceparent": fx.traceparent}})

with tenure.Worker(app, poll_interval=0.05):
    job = app.ledger.wait(app.submit("k", {{}}), timeout=20)
print(job.state.value, job.result, job.traceparent)
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    done = subprocess.run(
        [sys.executable, "-S", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["succeeded {'traceparent': None} None", "[]"]


def test_the_api_and_the_client_carry_the_callers_trace(ledger: tenure.Ledger) -> None:
    """`traceparent` on POST /v1/jobs is stored with the job; `tenure.Client` sends its
    current span's; a malformed one is a 422 that writes nothing."""
    from opentelemetry import trace

    from tests.support.service import LiveServer

    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with LiveServer(ledger) as server:
        key = ledger.operations.create_tenant("acme")
        http = server.client(key)
        answer = http.post("/v1/jobs", json={"kind": "k"}, headers={"traceparent": given})
        assert answer.status_code == 202, answer.text
        assert ledger.get(answer.json()["id"]).traceparent == given
        bad = http.post("/v1/jobs", json={"kind": "k"}, headers={"traceparent": "00-zz"})
        assert bad.status_code == 422 and len(ledger.list()) == 1
        http.close()
        provider = TracerProvider()
        with (
            tenure.Client(server.url, key) as client,
            provider.get_tracer("agent").start_as_current_span("turn") as turn,
        ):
            job_id = client.submit("k", {})
        assert trace.get_current_span() is not turn
    context = turn.get_span_context()
    assert ledger.get(job_id).traceparent == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    )


def test_a_child_spawned_in_a_step_joins_its_parents_trace(tmp_path: Path) -> None:
    """With a tracer provider set (a process of its own, the real SDK): a parent job submitted
    with a traceparent spawns a child in a step; the child's attempts join that trace."""
    script = f"""
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
import tenure
app = tenure.App({f"sqlite:///{tmp_path / 'spawn.db'}"!r})

@app.job("child", lease=1.0, heartbeat=0.25, jitter=0.3)
def child(ctx, payload):
    return None

@app.job("parent", lease=1.0, heartbeat=0.25, jitter=0.3, spawns=["child"])
def parent(ctx, payload):
    return ctx.wait_job(ctx.spawn("child", {{}}))

given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
with tenure.Worker(app, poll_interval=0.05):
    job = app.ledger.wait(app.submit("parent", {{}}, traceparent=given), timeout=30)
(kid,) = app.ledger.children(job.id)
print(json.dumps([job.state.value, job.traceparent, kid.traceparent]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    state, parent, child = json.loads(done.stdout.splitlines()[-1])
    assert state == "succeeded" and parent.split("-")[1] == "0af7651916cd43dd8448eb211c80319c"
    assert child.split("-")[1] == parent.split("-")[1] and child != parent
