"""The HTTP API over a real server on loopback, on both backends: submit, read, wait, cancel,
requeue; tenants kept apart; every error status; the health, readiness and metrics routes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import tenure
from tenure import JobState, keys
from tenure.service import ServiceSettings
from tests.support.cli import tenure_cli
from tests.support.service import LiveServer
from tests.support.waiting import poll, until_db_time_passes


@dataclass
class Service:
    server: LiveServer
    ledger: tenure.Ledger
    acme: httpx.Client
    globex: httpx.Client
    admin: httpx.Client
    anonymous: httpx.Client


@pytest.fixture
def service(ledger: tenure.Ledger) -> Iterator[Service]:
    admin = keys.new_admin_key()
    settings = ServiceSettings(admin_key_sha256=admin.key_sha256, max_wait_seconds=1.5)
    with LiveServer(ledger, settings) as server:
        clients = [
            server.client(ledger.operations.create_tenant("acme")),
            server.client(ledger.operations.create_tenant("globex")),
            server.client(admin.key),
            server.client(),
        ]
        yield Service(server, ledger, *clients)
        for client in clients:
            client.close()


def submit(client: httpx.Client, kind: str = "ocr", **body: object) -> str:
    response = client.post("/v1/jobs", json={"kind": kind, "payload": {"doc": 1}, **body})
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "queued"
    return str(response.json()["id"])


def error_code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def test_submit_answers_at_once_and_repeated_key_returns_the_job(service: Service) -> None:
    """POST /v1/jobs answers 202; the same key and payload 200 with the job; another payload 409."""
    first = service.acme.post(
        "/v1/jobs", json={"kind": "ocr", "payload": {"b": 2, "a": 1}, "idempotency_key": "doc-17"}
    )
    assert first.status_code == 202
    assert first.headers["location"] == f"/v1/jobs/{first.json()['id']}"
    again = service.acme.post(
        "/v1/jobs", json={"kind": "ocr", "payload": {"a": 1, "b": 2}, "idempotency_key": "doc-17"}
    )
    assert again.status_code == 200
    assert again.json() == first.json()
    conflict = service.acme.post(
        "/v1/jobs", json={"kind": "ocr", "payload": {"a": 9}, "idempotency_key": "doc-17"}
    )
    assert conflict.status_code == 409
    assert error_code(conflict) == "idempotency_conflict"
    by_header = service.acme.post(
        "/v1/jobs",
        json={"kind": "ocr", "payload": {"a": 1, "b": 2}},
        headers={"Idempotency-Key": "doc-17"},
    )
    assert by_header.status_code == 200
    assert by_header.json()["id"] == first.json()["id"]
    differing = service.acme.post(
        "/v1/jobs", json={"kind": "ocr", "idempotency_key": "a"}, headers={"Idempotency-Key": "b"}
    )
    assert differing.status_code == 422
    # The same key in another tenant is another job.
    other = service.globex.post(
        "/v1/jobs", json={"kind": "ocr", "payload": {"a": 1, "b": 2}, "idempotency_key": "doc-17"}
    )
    assert other.status_code == 202
    assert other.json()["id"] != first.json()["id"]
    job = service.ledger.get(first.json()["id"])
    assert (job.tenant, job.idempotency_key, job.payload) == ("acme", "doc-17", {"a": 1, "b": 2})
    assert len(service.ledger.list(tenant="acme")) == 1


def test_read_list_filter_and_page(service: Service) -> None:
    """GET /v1/jobs reads, filters and pages with `after`, newest first, no job twice."""
    ids = [submit(service.acme, kind="ocr" if i % 2 else "browse") for i in range(5)]
    job = service.acme.get(f"/v1/jobs/{ids[0]}").json()
    assert (job["id"], job["kind"], job["tenant"], job["state"]) == (
        ids[0],
        "browse",
        "acme",
        "queued",
    )
    seen: list[str] = []
    after = None
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if after:
            params["after"] = after
        page = service.acme.get("/v1/jobs", params=params).json()
        seen += [j["id"] for j in page["jobs"]]
        after = page["next"]
        if after is None:
            break
    assert seen == ids[::-1]
    ocr = service.acme.get("/v1/jobs", params={"kind": "ocr"}).json()["jobs"]
    assert sorted(j["id"] for j in ocr) == sorted(ids[1::2])
    service.ledger.cancel(ids[2])
    cancelled = service.acme.get("/v1/jobs", params={"state": "cancelled"}).json()["jobs"]
    assert [j["id"] for j in cancelled] == [ids[2]]
    events = service.acme.get(f"/v1/jobs/{ids[2]}/events").json()["events"]
    assert [e["type"] for e in events] == ["job_submitted", "job_cancelled"]
    assert service.acme.get(f"/v1/jobs/{ids[2]}/stages").json() == {"stages": []}
    bad_state = service.acme.get("/v1/jobs", params={"state": "sleeping"})
    assert bad_state.status_code == 422
    assert service.acme.get("/v1/jobs", params={"limit": 0}).status_code == 422
    assert service.acme.get("/v1/jobs", params={"limit": 1001}).status_code == 422


def test_tenants_see_only_their_own_jobs(service: Service) -> None:
    """A tenant's key sees, lists and changes only its own jobs; another tenant's is a 404."""
    mine = submit(service.acme)
    theirs = submit(service.globex)
    for path in ("", "/events", "/stages"):
        response = service.globex.get(f"/v1/jobs/{mine}{path}")
        assert response.status_code == 404, path
        assert error_code(response) == "not_found"
    for verb in ("cancel", "requeue"):
        assert service.globex.post(f"/v1/jobs/{mine}/{verb}").status_code == 404
    assert service.ledger.get(mine).state is JobState.QUEUED
    listed = service.globex.get("/v1/jobs").json()["jobs"]
    assert [j["id"] for j in listed] == [theirs]
    assert service.globex.get("/v1/jobs", params={"tenant": "acme"}).status_code == 403
    assert service.globex.get("/v1/jobs", params={"after": mine}).status_code == 404
    forged = service.globex.post("/v1/jobs", json={"kind": "ocr", "tenant": "acme"})
    assert forged.status_code == 403
    # The admin key sees every tenant, and may narrow to one.
    everything = service.admin.get("/v1/jobs").json()["jobs"]
    assert {j["id"] for j in everything} == {mine, theirs}
    only_acme = service.admin.get("/v1/jobs", params={"tenant": "acme"}).json()["jobs"]
    assert [j["id"] for j in only_acme] == [mine]
    assert service.admin.get(f"/v1/jobs/{theirs}").status_code == 200
    placed = service.admin.post("/v1/jobs", json={"kind": "ocr", "tenant": "initech"})
    assert placed.status_code == 202
    assert service.ledger.get(placed.json()["id"]).tenant == "initech"


def test_missing_bad_and_revoked_keys_are_401(service: Service) -> None:
    """Missing, forged and revoked keys get 401 with WWW-Authenticate; a spare key keeps working."""
    assert service.anonymous.get("/v1/jobs").status_code == 401
    response = service.anonymous.get("/v1/jobs", headers={"Authorization": "Bearer nonsense"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert error_code(response) == "unauthorized"
    key = service.ledger.operations.create_tenant("umbrella")
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    assert (
        service.anonymous.get("/v1/jobs", headers={"Authorization": f"Bearer {forged}"}).status_code
        == 401
    )
    spare = service.ledger.operations.issue_key("umbrella")
    with service.server.client(key) as client, service.server.client(spare) as spare_client:
        assert client.get("/v1/jobs").status_code == 200
        key_id = keys.key_id_of(key)
        assert service.ledger.operations.revoke_keys("umbrella", key_id) == 1
        assert client.get("/v1/jobs").status_code == 401
        assert spare_client.get("/v1/jobs").status_code == 200
        assert service.ledger.operations.revoke_keys("umbrella") == 1
        assert spare_client.get("/v1/jobs").status_code == 401


def test_bad_requests_get_clear_errors_and_change_nothing(service: Service) -> None:
    """Oversized, chunked, non-JSON and invalid bodies get a 4xx JSON error; nothing is stored."""
    acme = service.acme
    big = {"kind": "ocr", "payload": "x" * (1024 * 1024)}
    assert acme.post("/v1/jobs", json=big).status_code == 413

    def chunks() -> Iterator[bytes]:
        yield b'{"kind": "ocr", "payload": "'
        for _ in range(20):
            yield b"y" * 65536
        yield b'"}'

    chunked = acme.post("/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"})
    assert chunked.status_code == 413
    assert error_code(chunked) == "body_too_large"
    plain = acme.post("/v1/jobs", content=b"kind=ocr", headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415
    broken = acme.post(
        "/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert broken.status_code == 422
    assert broken.json()["error"]["message"] == (
        "the request body is not valid JSON (error at character 1)"
    )
    bad_bodies: list[dict[str, Any]] = [
        {"kind": 5},
        {"kind": ""},
        {"payload": {}},
        {"kind": "ocr", "max_attempts": 0},
        {"kind": "ocr", "priority": "high"},
        {"kind": "ocr", "priority": 2**40},
        {"kind": "ocr", "surprise": True},
        {"kind": "ocr", "payload": "nul\u0000"},
    ]
    for body in bad_bodies:
        response = acme.post("/v1/jobs", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["message"], body
    assert acme.get("/v1/jobs/not-a-uuid").status_code == 404
    assert acme.get("/v1/nothing-here").status_code == 404
    unknown = "00000000-0000-4000-8000-000000000000"
    assert acme.get(f"/v1/jobs/{unknown}", params={"wait": "soon"}).status_code == 422
    assert acme.get(f"/v1/jobs/{unknown}", params={"wait": -1}).status_code == 422
    assert acme.get(f"/v1/jobs/{unknown}").status_code == 404
    assert service.ledger.list() == []


def test_cancel_and_requeue_answer_409_when_they_cannot(service: Service) -> None:
    """Cancel and requeue answer with the new state, and 409 where the transition is not allowed."""
    job_id = submit(service.acme)
    cancelled = service.acme.post(f"/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json() == {"id": job_id, "state": "cancelled"}
    again = service.acme.post(f"/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409
    assert error_code(again) == "terminal_job"
    requeued = service.acme.post(f"/v1/jobs/{job_id}/requeue")
    assert requeued.json() == {"id": job_id, "state": "queued"}
    assert service.acme.post(f"/v1/jobs/{job_id}/requeue").status_code == 409
    assert service.ledger.get(job_id).state is JobState.QUEUED


def test_get_with_wait_long_polls_for_a_terminal_state(service: Service) -> None:
    """GET ?wait= answers once the job ends, and at the server's cap when it does not."""
    job_id = submit(service.acme)
    started = time.monotonic()
    capped = service.acme.get(f"/v1/jobs/{job_id}", params={"wait": 600})
    assert capped.json()["state"] == "queued"
    assert time.monotonic() - started >= 1.5  # the server's cap, not the 600 asked for

    answers: list[httpx.Response] = []
    waiter = threading.Thread(
        target=lambda: answers.append(service.acme.get(f"/v1/jobs/{job_id}", params={"wait": 1.5}))
    )
    lease = poll(lambda: service.ledger.claim("w1", lease_seconds=30), 10, "a claim")
    waiter.start()
    service.ledger.complete(lease, {"pages": 3})
    waiter.join(timeout=30)
    assert answers[0].json()["state"] == "succeeded"
    assert answers[0].json()["result"] == {"pages": 3}


def test_readyz_and_metrics_report_the_queue(service: Service) -> None:
    """/readyz and /metrics report queued, running and expired figures by the database's clock."""
    assert service.anonymous.get("/healthz").json() == {"status": "ok"}
    for _ in range(3):
        submit(service.acme, kind="ocr")
    submit(service.globex, kind="browse")
    lease = service.ledger.claim("w1", kinds=["browse"], lease_seconds=0.2)
    assert lease is not None
    until_db_time_passes(service.ledger, lease.lease_until)
    ready = service.anonymous.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert (body["status"], body["queued"], body["running"], body["expired_leases"]) == (
        "ready",
        3,
        1,
        1,
    )
    assert body["oldest_queued_age_seconds"] > 0
    text = service.anonymous.get("/metrics").text
    assert 'tenure_jobs{kind="ocr",state="queued"} 3.0' in text
    assert 'tenure_jobs{kind="browse",state="running"} 1.0' in text
    assert 'tenure_expired_leases{kind="browse"} 1.0' in text
    assert "tenure_database_up 1.0" in text
    service.ledger.claim("w2", kinds=["browse"], lease_seconds=30)  # reclaims the expired lease
    text = service.anonymous.get("/metrics").text
    assert 'tenure_jobs_reclaimed_total{kind="browse"} 1.0' in text
    assert 'tenure_leases_expired_total{kind="browse"} 1.0' in text
    assert 'tenure_expired_leases{kind="browse"} 0.0' in text


def test_metrics_can_require_the_admin_key(ledger: tenure.Ledger) -> None:
    """With metrics_need_key, /metrics answers only the admin key, with a per-tenant breakdown."""
    admin = keys.new_admin_key()
    settings = ServiceSettings(
        admin_key_sha256=admin.key_sha256, metrics_need_key=True, metrics_by_tenant=True
    )
    ledger.submit("ocr", {}, tenant="acme")
    tenant_key = ledger.operations.create_tenant("acme")
    with LiveServer(ledger, settings) as server:
        with server.client() as anonymous, server.client(tenant_key) as tenant:
            assert anonymous.get("/metrics").status_code == 401
            assert tenant.get("/metrics").status_code == 401
        with server.client(admin.key) as client:
            text = client.get("/metrics").text
    assert 'tenure_jobs{kind="ocr",state="queued",tenant="acme"} 1.0' in text


def test_a_payload_left_out_is_an_empty_object_as_on_the_command_line(
    service: Service, db_url: str
) -> None:
    """HTTP without `payload` stores `{}`, as `tenure submit` without `--payload` does; an
    explicit null stays null."""
    left_out = submit_raw(service, {"kind": "ocr"})
    explicit = submit_raw(service, {"kind": "ocr", "payload": None})
    assert service.ledger.get(left_out).payload == {}
    assert service.ledger.get(explicit).payload is None
    done = tenure_cli("submit", "ocr", "--json", "--db", db_url)
    assert done.returncode == 0, done.stderr
    assert service.ledger.get(json.loads(done.stdout)["id"]).payload == {}


def submit_raw(service: Service, body: dict[str, Any]) -> str:
    response = service.acme.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])
