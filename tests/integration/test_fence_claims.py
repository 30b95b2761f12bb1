"""Invariant 17: a receiver never accepts two holders of one token. A claim's identity travels
with its fence; a refusal names the receiver's highest token, and the job's next claim starts
above it, so a job is never stuck behind a receiver that saw a lost era."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import uvicorn

import tenure
from tenure import JobState
from tenure.fence import FenceGuard, FenceMiddleware, headers, raise_for_refusal
from tenure.testing.proxy import proxy_to
from tests.support.asgi import read_body, send_json
from tests.support.databases import PostgresServer, drop_schema, new_schema
from tests.support.timing import FAST
from tests.support.tokens import micros
from tests.support.waiting import poll


@pytest.fixture
def guard(db_url: str) -> Iterator[FenceGuard]:
    with FenceGuard(db_url) as fence_guard:
        yield fence_guard


def test_a_second_holder_of_one_token_is_refused(guard: FenceGuard) -> None:
    """Token 5 accepted from claim A: a new command with token 5 from claim B raises
    FenceConflict naming 5 and does not run; A's own next command with 5 runs; a higher token
    from B binds the scope to B."""
    ran: list[str] = []
    guard.apply("job-1", 5, "k1", lambda: ran.append("a1"), claim="claim-a")
    with pytest.raises(tenure.FenceConflict, match="another claim") as refused:
        guard.apply("job-1", 5, "k2", lambda: ran.append("b1"), claim="claim-b")
    assert (refused.value.highest, refused.value.token, refused.value.scope) == (5, 5, "job-1")
    assert refused.value.error_code == "fence_conflict" and refused.value.http_status == 409
    assert isinstance(refused.value, tenure.StaleFence)
    guard.apply("job-1", 5, "k3", lambda: ran.append("a2"), claim="claim-a")
    guard.apply("job-1", 6, "k4", lambda: ran.append("b2"), claim="claim-b")
    with pytest.raises(tenure.FenceConflict):
        guard.apply("job-1", 6, "k5", lambda: ran.append("a3"), claim="claim-a")
    with pytest.raises(tenure.StaleFence) as below:
        guard.apply("job-1", 5, "k6", lambda: ran.append("a4"), claim="claim-a")
    assert not isinstance(below.value, tenure.FenceConflict) and below.value.highest == 6
    assert ran == ["a1", "a2", "b2"]


def test_a_repeated_key_is_replayed_whatever_claim_sends_it(guard: FenceGuard) -> None:
    """The same command (same key) from another claim of the same token is replayed, not
    refused: it is one command, already done."""
    assert guard.apply("job-1", 5, "charge", lambda: {"id": 1}, claim="claim-a") == {"id": 1}
    assert guard.apply("job-1", 5, "charge", lambda: {"id": 2}, claim="claim-b") == {"id": 1}


def test_fences_without_a_claim_keep_todays_behaviour(guard: FenceGuard) -> None:
    """Senders that send no claim are judged by the token alone (an equal token is accepted);
    a claimed sender then binds the unbound highest, and a second claim is refused."""
    ran: list[str] = []
    guard.apply("job-1", 3, "k1", lambda: ran.append("old-1"))
    guard.apply("job-1", 3, "k2", lambda: ran.append("old-2"))
    guard.apply("job-1", 3, "k3", lambda: ran.append("a"), claim="claim-a")
    guard.apply("job-1", 3, "k4", lambda: ran.append("old-3"))
    with pytest.raises(tenure.FenceConflict):
        guard.apply("job-1", 3, "k5", lambda: ran.append("b"), claim="claim-b")
    assert ran == ["old-1", "old-2", "a", "old-3"]


def test_a_bad_claim_is_refused_before_anything_runs(guard: FenceGuard) -> None:
    """An empty claim or one with a NUL is an InvalidArgument; nothing runs or is recorded."""
    for claim in ("", "a\x00b", "x" * 10_000):
        with pytest.raises(tenure.InvalidArgument):
            guard.apply("job-1", 1, "k", lambda: "ran", claim=claim)
    assert guard.lookup("k").state == "never_ran"


# -- the worker's side: a refusal puts the job's next claim above the receiver's highest -------


def test_a_refusal_floors_the_jobs_token_above_the_receivers_highest(
    connect: Callable[..., tenure.Ledger], guard: FenceGuard
) -> None:
    """A receiver that accepted this job's token from another claim (a database that lost the
    claim handed it out again) refuses it; the attempt fails with the token floored there, and
    the next claim is above it and accepted."""
    ledger = connect()
    job_id = ledger.submit("pay", {})
    lease = ledger.claim("w1", lease_seconds=30)
    assert lease is not None
    guard.apply(job_id, lease.token, "lost-era-effect", lambda: "done", claim="lost-claim")
    with pytest.raises(tenure.FenceConflict) as refused:
        guard.apply(job_id, lease.token, "charge", lambda: "charged", claim=lease.claim)
    assert refused.value.highest == lease.token
    state = ledger.fail(lease, {"code": "fence_conflict"}, retry_in=0.001, token_floor=lease.token)
    assert state is JobState.QUEUED
    retried = [e for e in ledger.events(job_id) if e.type == "job_retry_scheduled"]
    assert retried[-1].detail["token_floor"] == lease.token
    job = poll(
        lambda: ledger.claim("w2", lease_seconds=30, kinds=["pay"]), 10, "the job claimable again"
    )
    assert job.token > lease.token
    assert guard.apply(job_id, job.token, "charge", lambda: "charged", claim=job.claim) == (
        "charged"
    )


def test_a_worker_is_never_stuck_behind_a_receiver_that_saw_a_lost_era(
    make_app: Callable[[], tenure.App], db_url: str
) -> None:
    """A receiver saw a token for this job that the database never handed out (a lost era, from
    a server whose clock ran ahead): the worker's effect is refused, the job's token is floored
    at the receiver's highest, and the next attempt's effect is accepted, once."""
    app = make_app()
    charges: list[int] = []
    with FenceGuard(db_url) as receiver:

        @app.job("pay", **FAST)
        def pay(ctx: tenure.JobContext, payload: dict[str, Any]) -> Any:
            def charge(fx: tenure.Effect) -> Any:
                return receiver.apply(
                    fx.job_id, fx.token, fx.key, lambda: charges.append(fx.token), claim=fx.claim
                )

            ctx.effect("charge", charge)
            return {"charged_at": ctx.token}

        job_id = app.submit("pay", {})
        ahead = micros(app.ledger.now() + timedelta(minutes=10))
        receiver.apply(job_id, ahead, "lost-era", lambda: "seen", claim="lost-claim")
        with tenure.Worker(app):
            done = app.ledger.wait(job_id, 20)
    assert done.state is JobState.SUCCEEDED, done.error
    assert done.result["charged_at"] > ahead and charges == [done.result["charged_at"]]
    refused = [e for e in app.ledger.events(job_id) if e.type == "job_retry_scheduled"]
    assert [e.detail.get("token_floor") for e in refused] == [ahead]


# -- the middleware and the sender's helpers over a real server ---------------------------------


async def shop(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A receiver that takes every order it is let through."""
    if scope["type"] == "http":
        await read_body(receive)
        await send_json(send, 201, b'{"ordered": true}')


def serve(app: Any) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    poll(lambda: server.started, 10, "uvicorn to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def served(guard: FenceGuard) -> Iterator[str]:
    yield from serve(FenceMiddleware(shop, guard))  # type: ignore[arg-type]


def effect(fence: int, key: str, claim: str | None) -> tenure.Effect:
    return tenure.Effect("order", key, fence, False, "job-1", claim=claim)


def test_the_middleware_refuses_a_second_holder_with_409(served: str) -> None:
    """Over HTTP: headers(fx) carries the claim; a second claim of the accepted token gets 409
    `fence_conflict` naming the receiver's highest, which raise_for_refusal turns back into
    FenceConflict; a lower token gets `stale_fence`; other answers raise nothing."""
    with httpx.Client(base_url=served) as client:
        sent = headers(effect(7, "k1", "claim-a"))
        assert sent["X-Execution-Claim"] == "claim-a"
        first = client.post("/order", json={}, headers=sent)
        assert first.status_code == 201
        raise_for_refusal(first.status_code, first.content)
        second = client.post("/order", json={}, headers=headers(effect(7, "k2", "claim-b")))
        assert second.status_code == 409
        assert second.json()["error"] | {"message": ""} == {
            "code": "fence_conflict",
            "message": "",
            "scope": "job-1",
            "fence": 7,
            "highest": 7,
        }
        with pytest.raises(tenure.FenceConflict) as conflict:
            raise_for_refusal(second.status_code, second.content)
        assert (conflict.value.highest, conflict.value.token) == (7, 7)
        stale = client.post("/order", json={}, headers=headers(effect(6, "k3", "claim-c")))
        with pytest.raises(tenure.StaleFence) as below:
            raise_for_refusal(stale.status_code, stale.text)
        assert not isinstance(below.value, tenure.FenceConflict) and below.value.highest == 7
    raise_for_refusal(409, b'{"error": {"code": "signal_conflict"}}')
    raise_for_refusal(409, b"not json")
    # Not a refusal in FenceMiddleware's shape: nothing raised, whatever the body.
    nasties: list[bytes | str | dict[str, Any] | None] = [
        b"[" * 100_000,
        b"\xff\xfe",
        '{"error": "\ud800"}',
        b"\x00",
        None,
        {"error": []},
    ]
    for nasty in nasties:
        raise_for_refusal(409, nasty)
    raise_for_refusal(500, b'{"error": {"code": "stale_fence"}}')


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(
    "fence",
    ["1_000", "+5", "-1", "0x10", "\u0663", "1e3", "", "9223372036854775808"],
)
def test_fence_headers_are_strict_integers(served: str, fence: str) -> None:
    """A fence that is not plain ASCII digits within 0..2^63-1 is a 400 `bad_fence_headers`;
    nothing reaches the receiver."""
    sent = {**headers(effect(1, "k", None)), "X-Execution-Fence": fence}
    encoded = {name.encode(): value.encode() for name, value in sent.items()}
    with httpx.Client(base_url=served) as client:
        answer = client.post("/order", json={}, headers=encoded)
    assert answer.status_code == 400, fence
    assert answer.json()["error"]["code"] == "bad_fence_headers"


@pytest.mark.parametrize("backend", ["sqlite"])
def test_claim_headers_are_checked(served: str) -> None:
    """A claim twice, or a claim without the fence headers, is a 400 `bad_fence_headers`."""
    doubled = [*headers(effect(1, "k", "a")).items(), ("X-Execution-Claim", "b")]
    with httpx.Client(base_url=served) as client:
        twice = client.post("/order", json={}, headers=doubled)
        alone = client.post("/order", json={}, headers={"X-Execution-Claim": "a"})
    assert (twice.status_code, alone.status_code) == (400, 400)
    assert alone.json()["error"]["code"] == "bad_fence_headers"


def test_the_guards_database_away_is_a_503_with_retry_after(
    postgres_server: PostgresServer,
) -> None:
    """The receiver's database out of reach: 503 `database_unavailable` with Retry-After (a
    sender retries it), never the 400 that tells it not to; answers again once it is back."""
    schema = new_schema(postgres_server)
    try:
        with proxy_to(postgres_server.upstream()) as proxy:
            url = postgres_server.proxied_url(schema, proxy.port)
            with FenceGuard(url, timeout=1.0) as guard:
                for address in serve(FenceMiddleware(shop, guard)):  # type: ignore[arg-type]
                    with httpx.Client(base_url=address, timeout=30) as client:
                        proxy.cut()
                        away = client.post("/order", json={}, headers=headers(effect(1, "k", "a")))
                        assert away.status_code == 503
                        assert away.headers["retry-after"] == "1"
                        assert away.json()["error"]["code"] == "database_unavailable"
                        proxy.restore()
                        back = poll(
                            lambda: (
                                answer
                                if (
                                    answer := client.post(
                                        "/order", json={}, headers=headers(effect(1, "k", "a"))
                                    )
                                ).status_code
                                == 201
                                else None
                            ),
                            30,
                            "the guard to answer again",
                        )
                        assert back.json() == {"ordered": True}
    finally:
        drop_schema(postgres_server, schema)
