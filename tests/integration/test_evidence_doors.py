"""Evidence and principals at every door: the HTTP API, the Python client, the CLI, MCP's
`_meta`, and the service's metrics; bad input gets a 4xx, an exit 2 or a tool error."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import tenure
from tenure import DocumentRef, MediaRef, keys
from tenure.ledger import lease_port
from tenure.service import ServiceSettings
from tests.support.cli import tenure_cli
from tests.support.service import LiveServer


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def recorded_job(ledger: tenure.Ledger, tenant: str = "acme") -> str:
    """A job of `tenant` acting for user:7 that recorded a document and a media ref."""
    job_id = ledger.submit("ocr", {}, tenant=tenant, principal="user:7")
    lease = ledger.claim("w1", lease_seconds=30)
    assert lease is not None and lease.principal == "user:7"
    lease_port(ledger).record_evidence(
        lease, DocumentRef("kb://a", "v2", digest("a"), "ix-1"), retriever="kb"
    )
    lease_port(ledger).record_evidence(
        lease, MediaRef("s3://scan.png", digest("png"), "tesseract", "5.3")
    )
    return job_id


@pytest.fixture
def served(ledger: tenure.Ledger) -> Iterator[tuple[LiveServer, str, str]]:
    admin = keys.new_admin_key()
    settings = ServiceSettings(admin_key_sha256=admin.key_sha256)
    with LiveServer(ledger, settings) as server:
        yield (
            server,
            ledger.operations.create_tenant("acme"),
            ledger.operations.create_tenant("globex"),
        )


def test_http_submit_with_a_principal_and_read_the_evidence(
    ledger: tenure.Ledger, served: tuple[LiveServer, str, str]
) -> None:
    server, acme_key, globex_key = served
    with server.client(acme_key) as acme, server.client(globex_key) as globex:
        made = acme.post("/v1/jobs", json={"kind": "ocr", "principal": "user:9"})
        assert made.status_code == 202, made.text
        assert acme.get(f"/v1/jobs/{made.json()['id']}").json()["principal"] == "user:9"
        ledger.cancel(made.json()["id"])
        job_id = recorded_job(ledger)
        answer = acme.get(f"/v1/jobs/{job_id}/evidence")
        assert answer.status_code == 200
        evidence = answer.json()["evidence"]
        assert [(e["type"], e["ref"].get("source"), e["retriever"]) for e in evidence] == [
            ("document", "kb://a", "kb"),
            ("media", "s3://scan.png", None),
        ]
        assert evidence[0]["ref"]["index_version"] == "ix-1"
        assert globex.get(f"/v1/jobs/{job_id}/evidence").status_code == 404
        events = acme.get(f"/v1/jobs/{job_id}/events").json()["events"]
        assert {"version", "idempotency_key"} <= set(events[0])
        before = len(ledger.list(limit=100))
        principals: list[Any] = ["x" * 257, "user:\u001b[2J", "user:\ud800", "", 7, [[]], {"a": 1}]
        for principal in principals:
            body = json.dumps({"kind": "ocr", "principal": principal})  # \ud800 as an escape
            headers = {"Content-Type": "application/json"}
            bad = acme.post("/v1/jobs", content=body, headers=headers)
            assert 400 <= bad.status_code < 500, bad.text
            assert "error" in bad.json()
        assert len(ledger.list(limit=100)) == before


def test_the_client_submits_a_principal_and_reads_the_evidence(
    ledger: tenure.Ledger, served: tuple[LiveServer, str, str]
) -> None:
    server, acme_key, _ = served
    job_id = recorded_job(ledger)
    with tenure.Client(server.url, acme_key) as client:
        evidence = client.evidence(job_id)
        assert [e.ref for e in evidence] == [e.ref for e in ledger.evidence(job_id)]
        other = client.submit("ocr", {}, principal="user:10", idempotency_key="k-1")
        assert client.get(other).principal == "user:10"
        assert {e.idempotency_key for e in client.events(other)} == {"k-1"}


def test_the_cli_shows_principal_and_evidence(db_url: str, ledger: tenure.Ledger) -> None:
    job_id = recorded_job(ledger)
    shown = tenure_cli("evidence", job_id, db=db_url)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "document" in lines[0] and "source=kb://a" in lines[0] and "retriever=kb" in lines[0]
    assert "media" in lines[1] and "processor=tesseract" in lines[1]
    as_json = json.loads(tenure_cli("evidence", job_id, "--json", db=db_url).stdout)
    assert [e["type"] for e in as_json] == ["document", "media"]
    status = json.loads(tenure_cli("status", job_id, "--json", db=db_url).stdout)
    assert status["principal"] == "user:7"
    assert [e["ref"]["sha256"] for e in status["evidence"]] == [digest("a"), digest("png")]
    made = tenure_cli("submit", "ocr", "--principal", "user:11", "--json", db=db_url)
    assert ledger.get(json.loads(made.stdout)["id"]).principal == "user:11"
    for bad in ("x" * 257, "user:\n1"):
        refused = tenure_cli("submit", "ocr", "--principal", bad, db=db_url)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert "principal" in refused.stderr
    missing = tenure_cli("evidence", "00000000-0000-0000-0000-000000000000", db=db_url)
    assert missing.returncode == 1 and "no job has the id" in missing.stderr


def test_metrics_count_retrievals_by_retriever(
    served: tuple[LiveServer, str, str], ledger: tenure.Ledger
) -> None:
    server, _, _ = served
    job_id = ledger.submit("answer", {}, tenant="acme")
    lease = ledger.claim("w1", lease_seconds=30)
    assert lease is not None and lease.job_id == job_id
    lease_port(ledger).record_retrieval(lease, retriever="kb", cache="miss", refs=2, dropped=0)
    lease_port(ledger).record_retrieval(lease, retriever="kb", cache="hit", refs=1, dropped=1)
    text = httpx.get(server.url + "/metrics").text
    assert 'tenure_retrievals_total{cache="hit",retriever="kb"} 1.0' in text
    assert 'tenure_retrievals_total{cache="miss",retriever="kb"} 1.0' in text
    assert 'tenure_retrieval_refs_dropped_total{retriever="kb"} 1.0' in text
