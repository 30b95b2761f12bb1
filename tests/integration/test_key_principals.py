"""Principals a key cannot forge: a key bound to `user:42/` submits as user:42 or a principal
under it, never as another (403 `principal_not_allowed` over HTTP, PrincipalNotAllowed from the
client, a tool error over MCP, nothing written), and reads only its principals' jobs and
evidence, by every door. The retriever is real (tests.support.apps: the handbook's executives'
plan is for user:ceo alone) and runs in a `tenure worker` process, so a retrieval the worker
cached for user:ceo is in play when the bound key asks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import tenure
from tenure import JobState, keys
from tenure.errors import IdempotencyConflict, InvalidArgument, JobNotFound, PrincipalNotAllowed
from tenure.service import ServiceSettings
from tests.support.cli import tenure_cli
from tests.support.service import LiveServer
from tests.support.workers import Workers

EXEC_PLAN = "lib://exec-plan"


class Keys:
    """acme's service key (unbound), a key bound to user:42/, and one bound to user:ceo."""

    def __init__(self, ledger: tenure.Ledger) -> None:
        self.service = ledger.operations.create_tenant("acme")
        self.user42 = ledger.operations.issue_key("acme", principal="user:42/")
        self.ceo = ledger.operations.issue_key("acme", principal="user:ceo")


@pytest.fixture
def served(ledger: tenure.Ledger) -> Iterator[tuple[LiveServer, Keys]]:
    with LiveServer(ledger, ServiceSettings()) as server:
        yield server, Keys(ledger)


def ended(http: httpx.Client, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", params={"wait": 30}).json()
    assert job["state"] == "succeeded", job
    return job


def test_binding_rules_and_bad_bindings(ledger: tenure.Ledger) -> None:
    """What a binding allows, at the library door; a bad binding changes nothing."""
    Keys(ledger)
    bindings = {k.principal for k in ledger.operations.keys("acme")}
    assert bindings == {None, "user:42/", "user:ceo"}
    before = ledger.operations.keys()
    for bad in ["", "/", "user:42//", "user:\x00", "user:\ud800", "x" * 300, 7, ["user:1"]]:
        with pytest.raises(InvalidArgument):
            ledger.operations.issue_key("acme", principal=bad)  # type: ignore[arg-type]
    assert ledger.operations.keys() == before
    with pytest.raises(tenure.TenureError):
        ledger.operations.keys("nobody")


def test_a_bound_key_cannot_act_for_or_read_another_principal_over_http(
    ledger: tenure.Ledger, db_url: str, served: tuple[LiveServer, Keys], workers: Workers
) -> None:
    server, key = served
    workers.start(db_url, "W")
    with (
        server.client(key.service) as service,
        server.client(key.user42) as user42,
        server.client(key.ceo) as ceo,
    ):
        # The CEO's own key, and a service key naming the CEO, read the executives' plan.
        ceo_job = ceo.post("/v1/jobs", json={"kind": "ask_handbook", "idempotency_key": "k-ceo"})
        assert ceo_job.status_code == 202, ceo_job.text
        ceo_id = ceo_job.json()["id"]
        assert ended(ceo, ceo_id)["result"] == [EXEC_PLAN, "lib://holidays"]
        named = service.post("/v1/jobs", json={"kind": "ask_handbook", "principal": "user:ceo"})
        assert ended(service, named.json()["id"])["principal"] == "user:ceo"

        # The bound key naming the CEO, or a principal outside its prefix: 403, nothing written.
        jobs_before = len(ledger.list(limit=1000))
        for other in ["user:ceo", "user:420", "user:4", "user:42x/y", "user"]:
            refused = user42.post("/v1/jobs", json={"kind": "ask_handbook", "principal": other})
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["code"] == "principal_not_allowed"
        assert len(ledger.list(limit=1000)) == jobs_before

        # Naming none acts for the binding's principal; a narrower one is allowed. Neither
        # gets the CEO's document, though the worker cached the CEO's retrieval.
        own = user42.post("/v1/jobs", json={"kind": "ask_handbook"}).json()["id"]
        narrower = user42.post(
            "/v1/jobs", json={"kind": "ask_handbook", "principal": "user:42/session-7"}
        ).json()["id"]
        for job_id, principal in [(own, "user:42"), (narrower, "user:42/session-7")]:
            job = ended(user42, job_id)
            assert job["principal"] == principal
            assert job["result"] == ["lib://holidays"]

        # Another principal's job is unknown by every route, its evidence above all.
        for path in ["", "/evidence", "/events", "/stages", "/timeline", "/tree"]:
            assert user42.get(f"/v1/jobs/{ceo_id}{path}").status_code == 404, path
            assert service.get(f"/v1/jobs/{ceo_id}{path}").status_code == 200, path
        assert user42.get(f"/v1/jobs/{ceo_id}", params={"wait": 1}).status_code == 404
        assert user42.post(f"/v1/jobs/{ceo_id}/signals/x", json=1).status_code == 404
        assert user42.post(f"/v1/jobs/{ceo_id}/cancel").status_code == 404
        assert user42.get("/v1/jobs", params={"after": ceo_id}).status_code == 404
        listed = {job["id"] for job in user42.get("/v1/jobs").json()["jobs"]}
        assert listed == {own, narrower}
        assert len(service.get("/v1/jobs").json()["jobs"]) == 4

        # The CEO's idempotency key finds the CEO's job: for the bound key, a 409 that names
        # no job, and nothing written.
        reused = user42.post("/v1/jobs", json={"kind": "ask_handbook", "idempotency_key": "k-ceo"})
        assert reused.status_code == 409, reused.text
        assert ceo_id not in reused.text
        changed = {"kind": "ask_handbook", "payload": {"topic": "x"}, "idempotency_key": "k-ceo"}
        assert ceo_id not in user42.post("/v1/jobs", json=changed).text
        assert len(ledger.list(limit=1000)) == jobs_before + 2

        # Who each key is, and the keys each may list.
        assert user42.get("/v1/me").json()["principal"] == "user:42/"
        assert service.get("/v1/me").json()["principal"] is None
        mine = user42.get("/v1/keys").json()["keys"]
        assert [k["principal"] for k in mine] == ["user:42/"]
        assert len(service.get("/v1/keys").json()["keys"]) == 3
        assert service.get("/v1/keys", params={"tenant": "globex"}).status_code == 403


def test_the_client_and_the_cli_show_and_keep_the_binding(
    ledger: tenure.Ledger, db_url: str, served: tuple[LiveServer, Keys]
) -> None:
    server, key = served
    ceo_id = ledger.submit("ask_handbook", {}, tenant="acme", principal="user:ceo")
    with tenure.Client(server.url, key.user42) as client:
        with pytest.raises(PrincipalNotAllowed):
            client.submit("ask_handbook", {}, principal="user:ceo")
        with pytest.raises(JobNotFound):
            client.get(ceo_id)
        with pytest.raises(JobNotFound):
            client.evidence(ceo_id)
        ledger.submit("ask_handbook", {}, tenant="acme", idempotency_key="k", principal="x")
        with pytest.raises(IdempotencyConflict):
            client.submit("ask_handbook", {}, idempotency_key="k")
        mine = client.submit("ask_handbook", {})
        assert client.get(mine).principal == "user:42"
    assert [j.id for j in ledger.list(principal="user:42/")] == [mine]
    assert ledger.list(principal="user:ceo")[0].id == ceo_id

    listed = tenure_cli("tenant", "key", "list", "acme", db=db_url)
    assert listed.returncode == 0, listed.stderr
    assert "user:42/" in listed.stdout and "(service key)" in listed.stdout
    added = tenure_cli("tenant", "key", "add", "acme", "--principal", "user:7", "--json", db=db_url)
    assert added.returncode == 0, added.stderr
    assert ledger.operations.identify(keys_of(added.stdout)) == tenure.ledger.Principal(
        tenant="acme",
        binding=tenure.principals.Binding("user:7"),
        key_id=keys.key_id_of(keys_of(added.stdout)),
    )
    for bad in [["--principal", "/"], ["--principal", "user:\x1b[2J"]]:
        refused = tenure_cli("tenant", "key", "add", "acme", *bad, db=db_url)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert len(ledger.operations.keys("acme")) == 4


def keys_of(stdout: str) -> str:
    key: str = json.loads(stdout)["key"]
    return key


def test_a_bound_key_over_mcp(
    ledger: tenure.Ledger, db_url: str, workers: Workers, mcp_server: Any
) -> None:
    """`tenure mcp` over streamable HTTP: naming another principal in `_meta` is a tool
    error with nothing written; another principal's job is unknown to tenure_status,
    tenure_result and tasks/get; a call naming none acts for the binding."""
    from mcp.shared.exceptions import MCPError

    from tenure.mcp.client import DurableTasks, get_task
    from tests.support.mcp_server import connected, meta

    key = Keys(ledger)
    ceo_id = ledger.submit("ask_handbook", {}, tenant="acme", principal="user:ceo")
    workers.start(db_url, "W")
    mcp_server.start_http()

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with connected(mcp_server.over_http(key.user42)) as mcp:
            seen["forged"] = await mcp.call_tool(
                "ask_handbook", {}, meta=meta({"io.tenure/principal": "user:ceo"})
            )
            seen["count"] = len(ledger.list(limit=1000))
            seen["status"] = await mcp.call_tool("tenure_status", {"id": ceo_id})
            seen["result"] = await mcp.call_tool("tenure_result", {"id": ceo_id})
            seen["signal"] = await mcp.call_tool(
                "tenure_signal", {"id": ceo_id, "name": "x", "payload": 1}
            )
            seen["own"] = await mcp.call_tool("ask_handbook", {})
        async with connected(mcp_server.over_http(key.user42, DurableTasks())) as tasks:
            with pytest.raises(MCPError) as refused:
                await get_task(tasks.session, ceo_id)
            seen["task"] = refused.value.code
        return seen

    seen = asyncio.run(scenario())
    assert seen["forged"].is_error and "principal" in seen["forged"].content[0].text
    assert seen["count"] == 1
    for name in ["status", "result", "signal"]:
        assert seen[name].is_error and "no job" in seen[name].content[0].text, seen[name]
    assert seen["task"] == -32602
    assert not seen["own"].is_error, seen["own"]
    assert json.loads(seen["own"].content[0].text) == ["lib://holidays"]
    own = [j for j in ledger.list(limit=10) if j.id != ceo_id]
    assert [(j.principal, j.state) for j in own] == [("user:42", JobState.SUCCEEDED)]
    assert "signal_received" not in {event.type for event in ledger.events(ceo_id)}
