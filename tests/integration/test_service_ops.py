"""The service as operators run it: `tenure serve` and `tenure tenant` as real processes,
/readyz across a database outage (a real proxy cut), and a worker's own /metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import tenure
from tenure.testing.process import spawn_worker, wait_started
from tenure.testing.proxy import proxy_to
from tests.support.cli import cli_env, tenure_cli, tenure_process
from tests.support.databases import PostgresServer, drop_schema, new_schema
from tests.support.processes import ROOT
from tests.support.service import LiveServer, free_port
from tests.support.waiting import poll

pytestmark = pytest.mark.slow


def ops_cli(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return tenure_cli("--db", db, *args)


def test_tenant_commands_issue_list_and_revoke_keys(db_url: str) -> None:
    """`tenure tenant` creates, issues, lists and revokes keys; an existing name exits 1."""
    created = ops_cli("tenant", "create", "acme", "--json", db=db_url)
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)
    assert key["tenant"] == "acme"
    assert key["key"].startswith("tnr_")
    plain = ops_cli("tenant", "key", "acme", db=db_url)
    assert plain.returncode == 0
    second = plain.stdout.strip()
    assert second.startswith("tnr_")
    assert "\n" not in second
    again = ops_cli("tenant", "create", "acme", db=db_url)
    assert again.returncode == 1
    assert "exists" in again.stderr
    assert ops_cli("tenant", "key", "nobody", db=db_url).returncode == 1
    with tenure.connect(db_url) as ledger:
        assert ledger.operations.authenticate(key["key"]) == "acme"
        assert ledger.operations.authenticate(second) == "acme"
        stored = [t for t in ledger.operations.tenants() if t.name == "acme"]
        assert stored[0].active_keys == 2
    listed = json.loads(ops_cli("tenant", "list", "--json", db=db_url).stdout)
    assert [(t["name"], t["active_keys"]) for t in listed] == [("acme", 2)]
    revoked = ops_cli("tenant", "revoke", "acme", "--json", db=db_url)
    assert json.loads(revoked.stdout) == {"tenant": "acme", "revoked": 2}
    with tenure.connect(db_url) as ledger:
        assert ledger.operations.authenticate(key["key"]) is None
        assert ledger.operations.authenticate(second) is None
    admin = json.loads(ops_cli("tenant", "admin-key", "--json", db=db_url).stdout)
    assert tenure.keys.digest(admin["key"]) == admin["sha256"]


def test_tenure_serve_runs_as_a_process_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`tenure serve` answers health, API, dashboard and schema, and exits 0 on SIGTERM."""
    db = f"sqlite:///{tmp_path / 'serve.db'}"
    key = ops_cli("tenant", "create", "acme", db=db).stdout.strip()
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = tenure_process("serve", "--db", db, "--port", str(port), output=out)
    try:
        base = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                return httpx.get(f"{base}/healthz").status_code == 200
            except httpx.TransportError:
                assert proc.poll() is None, log.read_text()
                return False

        poll(healthy, 30, "tenure serve to answer")
        headers = {"Authorization": f"Bearer {key}"}
        submitted = httpx.post(f"{base}/v1/jobs", json={"kind": "ocr"}, headers=headers)
        assert submitted.status_code == 202
        page = httpx.get(f"{base}/", timeout=10)
        assert page.status_code == 200
        assert "<title>tenure</title>" in page.text
        assert "http://" not in page.text.replace("http://www.w3.org", "")  # nothing from a CDN
        schema = httpx.get(f"{base}/openapi.json").json()
        assert "/v1/jobs/{job_id}/cancel" in schema["paths"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()


def test_serve_without_the_extra_says_what_to_install(tmp_path: Path) -> None:
    """Without FastAPI installed, `tenure serve` exits 2 and names the extra to install."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "fastapi.py").write_text("raise ImportError('blocked', name='fastapi')\n")
    env = {"PYTHONPATH": f"{blocker}{os.pathsep}{ROOT / 'src'}"}
    result = tenure_cli("serve", "--db", f"sqlite:///{tmp_path / 'x.db'}", env=env)
    assert result.returncode == 2
    assert "pip install 'tenure[service]'" in result.stderr


@pytest.fixture
def proxied_ledger(postgres_server: PostgresServer) -> Iterator[tuple[tenure.Ledger, object]]:
    schema = new_schema(postgres_server)
    try:
        with proxy_to(postgres_server.upstream()) as proxy:
            ledger = tenure.connect(postgres_server.proxied_url(schema, proxy.port), timeout=1.0)
            try:
                yield ledger, proxy
            finally:
                ledger.close()
    finally:
        drop_schema(postgres_server, schema)


def test_postgres_readyz_is_503_while_the_database_is_cut_off(
    proxied_ledger: tuple[tenure.Ledger, object],
) -> None:
    """/readyz answers 503 while a real proxy cuts the database off, 200 again after."""
    ledger, proxy = proxied_ledger
    ledger.submit("ocr", {})
    with LiveServer(ledger) as server, server.client() as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["queued"] == 1
        proxy.cut()  # type: ignore[attr-defined]
        down = poll(
            lambda: (r := client.get("/readyz")).status_code == 503 and r, 30, "a 503 from /readyz"
        )
        assert down.json()["status"] == "unavailable"
        assert "database unreachable" in down.json()["reason"]
        assert client.get("/healthz").status_code == 200
        assert "tenure_database_up 0.0" in client.get("/metrics").text
        proxy.restore()  # type: ignore[attr-defined]
        back = poll(
            lambda: (r := client.get("/readyz")).status_code == 200 and r, 30, "a 200 again"
        )
        assert back.json()["queued"] == 1


def test_a_worker_serves_its_own_metrics(tmp_path: Path) -> None:
    """`tenure worker --metrics-port` serves its counters and the queue's figures."""
    db = f"sqlite:///{tmp_path / 'w.db'}"
    with tenure.connect(db) as ledger:
        job_id = ledger.submit("long_stage", {})
        (tmp_path / "finish").write_text("")
        port = free_port()
        log = tmp_path / "worker.log"
        proc = spawn_worker(
            "tests.support.apps:app",
            db,
            log,
            "--metrics-port",
            str(port),
            env={"PYTHONPATH": str(ROOT), "TENURE_TEST_DIR": str(tmp_path)},
        )
        try:
            wait_started(proc, log)
            poll(lambda: ledger.get(job_id).terminal, 30, "the job to finish")
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    claimed = [line for line in text.splitlines() if line.startswith("tenure_worker_claimed")]
    assert [line.split()[-1] for line in claimed if 'kind="long_stage"' in line] == ["1.0"]
    assert 'tenure_worker_commit_batches_total{worker="' in text
    assert "tenure_worker_claim_seconds_count" in text
    assert "tenure_worker_running_jobs" in text


def test_a_sigterm_while_serve_starts_stops_it(tmp_path: Path) -> None:
    """SIGTERM right after `tenure serve` says it starts (while uvicorn sets itself up): the
    process ends, five times out of five (a SIGTERM in that moment was once swallowed)."""
    db = f"sqlite:///{tmp_path / 'serve.db'}"
    for _ in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tenure.cli", "serve", "--db", db, "--port", str(free_port())],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=cli_env(),
        )  # fmt: skip
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("tenure serve: dashboard"):
                break
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("tenure serve went on after a SIGTERM during its start")
        assert code in (0, -signal.SIGTERM)
