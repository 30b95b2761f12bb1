"""The receiver side: FenceGuard on both backends, FenceMiddleware over a real server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import uvicorn

import tenure
from tenure.fence import FenceGuard, FenceMiddleware, Recorded, headers, ledger_tokens
from tests.support.asgi import read_body, send_json
from tests.support.waiting import poll


@pytest.fixture
def guard(db_url: str) -> Iterator[FenceGuard]:
    with FenceGuard(db_url) as fence_guard:
        yield fence_guard


def test_a_repeated_key_replays_without_running(guard: FenceGuard) -> None:
    """The first call runs fn and stores its result; a repeat returns it and runs nothing."""
    calls: list[int] = []
    first = guard.apply("job-1", 3, "tool-job:job-1:charge", lambda: calls.append(1) or {"id": 7})
    again = guard.apply("job-1", 3, "tool-job:job-1:charge", lambda: calls.append(2) or {"id": 8})
    older = guard.apply("job-1", 1, "tool-job:job-1:charge", lambda: calls.append(3) or {"id": 9})
    assert first == again == older == {"id": 7}
    assert calls == [1]
    assert guard.lookup("tool-job:job-1:charge") == Recorded("done", {"id": 7}, 3)
    assert guard.lookup("tool-job:job-1:never") == Recorded("never_ran")


def test_a_new_key_with_a_stale_fence_is_refused(guard: FenceGuard) -> None:
    """Once fence 5 was accepted for a scope, a new command with fence 4 raises StaleFence and
    does not run; fence 5 and 6 are accepted; other scopes are independent."""
    guard.apply("job-1", 5, "k1", lambda: "a")
    ran: list[str] = []
    with pytest.raises(tenure.StaleFence, match="below the highest accepted"):
        guard.apply("job-1", 4, "k2", lambda: ran.append("stale"))
    assert ran == []
    assert not guard.lookup("k2").ran
    assert guard.apply("job-1", 5, "k3", lambda: "same fence") == "same fence"
    assert guard.apply("job-1", 6, "k4", lambda: "higher") == "higher"
    with pytest.raises(tenure.StaleFence):
        guard.apply("job-1", 5, "k5", lambda: "now stale")
    assert guard.apply("job-2", 1, "k6", lambda: "other scope") == "other scope"
    assert tenure.fence.StaleFence is tenure.StaleFence


def test_a_replay_with_a_higher_fence_raises_the_bar(guard: FenceGuard) -> None:
    """A new owner resending an in-doubt command (same key, higher fence) gets the stored
    result, and from then on the old owner's new commands are refused."""
    guard.apply("job-1", 1, "charge", lambda: "charged")
    assert guard.apply("job-1", 2, "charge", lambda: "again") == "charged"
    with pytest.raises(tenure.StaleFence):
        guard.apply("job-1", 1, "receipt", lambda: "late")


def test_a_receiver_that_reads_the_ledger_refuses_a_cancelled_owner(
    ledger: tenure.Ledger, tmp_path: Any
) -> None:
    """With `current_token=ledger_tokens(ledger)` a cancel's token bump is the bar at once: the
    old owner's new command is refused though no newer owner ever reached the receiver, and the
    bar is kept. A receiver without it accepts that command: it has seen no higher fence. Only
    new commands read the ledger: a replay answers from the receiver alone."""
    job_id = ledger.submit("charge", {})
    lease = ledger.claim("w1", kinds=["charge"], lease_seconds=30)
    assert lease is not None
    asked: list[str] = []
    tokens = ledger_tokens(ledger)

    def current(scope: str) -> int:
        asked.append(scope)
        return tokens(scope)

    url = f"sqlite:///{tmp_path / 'a.db'}"
    reading = FenceGuard(url, current_token=current)
    blind = FenceGuard(f"sqlite:///{tmp_path / 'b.db'}")
    with reading, blind:
        ran: list[str] = []
        for guard in (reading, blind):
            guard.apply(job_id, lease.token, f"{job_id}:first", lambda: ran.append("first"))
        ledger.cancel(job_id)
        assert (
            reading.apply(job_id, lease.token, f"{job_id}:first", lambda: ran.append("x")) is None
        )
        assert asked == [job_id]  # the first command asked; its replay did not
        with pytest.raises(tenure.StaleFence, match="below the highest accepted"):
            reading.apply(job_id, lease.token, f"{job_id}:late", lambda: ran.append("late"))
        blind.apply(job_id, lease.token, f"{job_id}:late", lambda: ran.append("blind late"))
        assert ran == ["first", "first", "blind late"]
        assert reading.apply("not-a-job", 1, "other:1", lambda: "ok") == "ok"
    # The bar the ledger gave was recorded.
    with FenceGuard(url) as same_receiver_later, pytest.raises(tenure.StaleFence):
        same_receiver_later.apply(job_id, lease.token, f"{job_id}:later", lambda: "no")


def test_concurrent_calls_with_one_key_run_fn_once(db_url: str) -> None:
    """Eight threads with one key: fn runs once, every caller gets its result."""
    with FenceGuard(db_url) as fence_guard:
        calls: list[int] = []
        gate = threading.Event()

        def slow() -> dict[str, int]:
            calls.append(1)
            gate.wait(5)
            return {"n": len(calls)}

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(fence_guard.apply, "job", 1, "key", slow) for _ in range(8)]
            poll(lambda: calls, 5, "the first call to start")
            gate.set()
            results = [f.result(timeout=30) for f in futures]
    assert calls == [1]
    assert results == [{"n": 1}] * 8


def test_lookup_tells_a_command_that_returned_nothing_from_one_that_never_ran(
    guard: FenceGuard,
) -> None:
    """An email sent returns None: `lookup` says it ran (with result None), distinct from a
    key never seen and from one still running."""
    assert guard.apply("job-2", 1, "tool-job:job-2:email", lambda: None) is None
    sent = guard.lookup("tool-job:job-2:email")
    assert (sent.ran, sent.state, sent.result) == (True, "done", None)
    never = guard.lookup("tool-job:job-2:other")
    assert (never.ran, never.state) == (False, "never_ran")
    with guard.store.fence_transaction() as tx:
        tx.highest("job-2")
        tx.begin("tool-job:job-2:pending", "job-2", 1)
    pending = guard.lookup("tool-job:job-2:pending")
    assert (pending.ran, pending.state, pending.token) == (False, "running", 1)


def test_a_failing_fn_stores_nothing(guard: FenceGuard) -> None:
    """If fn raises, the error propagates, nothing is stored, and the key can run again."""

    def broken() -> None:
        raise RuntimeError("the bank is down")

    with pytest.raises(RuntimeError):
        guard.apply("job", 1, "key", broken)
    assert guard.lookup("key").state == "never_ran"
    assert guard.apply("job", 1, "key", lambda: "second try") == "second try"


def test_a_key_left_running_by_a_dead_receiver_is_taken_over(db_url: str) -> None:
    """A key marked running longer than stale_after (its receiver died) runs again."""
    with FenceGuard(db_url, stale_after=0.2) as fence_guard:
        with fence_guard.store.fence_transaction() as tx:
            tx.highest("job")
            tx.begin("key", "job", 1)
        started = time.monotonic()
        assert fence_guard.apply("job", 1, "key", lambda: "taken over") == "taken over"
        assert time.monotonic() - started >= 0.15


def test_bad_guard_input_is_refused(guard: FenceGuard) -> None:
    """An empty scope or key, a negative or non-integer fence, a result that is not JSON."""
    for scope, fence, key in (("", 1, "k"), ("s", 1, ""), ("s", -1, "k"), ("s", "1", "k")):
        with pytest.raises(tenure.InvalidArgument):
            guard.apply(scope, fence, key, lambda: 1)  # type: ignore[arg-type]
    with pytest.raises(tenure.InvalidArgument):
        guard.apply("s", 1, "k", lambda: {1, 2})
    assert guard.lookup("k").state == "never_ran"


# -- the middleware over a real server -----------------------------------------------------------


async def bank(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A tiny receiver: each request 'charges' once and answers with a counter."""
    if scope["type"] != "http":
        return
    body = await read_body(receive)
    bank.charges += 1  # type: ignore[attr-defined]
    status = 503 if b"fail" in body else 201
    await send_json(send, status, b'{"charge": %d}' % bank.charges)  # type: ignore[attr-defined]


bank.charges = 0  # type: ignore[attr-defined]


@pytest.fixture
def served(db_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    require = getattr(request, "param", False)
    exempt = {"exempt_methods": ("GET",), "exempt_paths": ("/healthz",)} if require else {}
    with FenceGuard(db_url) as fence_guard:
        bank.charges = 0  # type: ignore[attr-defined]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        config = uvicorn.Config(
            FenceMiddleware(bank, fence_guard, require=require, **exempt),  # type: ignore[arg-type]
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        poll(lambda: server.started, 10, "uvicorn to start")
        yield f"http://127.0.0.1:{port}"
        server.should_exit = True
        thread.join(10)


def fenced(fence: int, key: str, scope: str = "job-1") -> dict[str, str]:
    fx = tenure.Effect("charge", key, fence, False, scope)
    return headers(fx)


def test_middleware_replays_refuses_and_passes_through(served: str) -> None:
    """Over HTTP: a repeat is replayed with the stored status and body, a stale fence is a 409
    with a JSON reason, requests without fence headers pass through."""
    with httpx.Client(base_url=served) as client:
        first = client.post("/charge", json={"amount": 1}, headers=fenced(2, "k1"))
        again = client.post("/charge", json={"amount": 1}, headers=fenced(2, "k1"))
        assert (first.status_code, first.json()) == (201, {"charge": 1})
        assert (again.status_code, again.json()) == (201, {"charge": 1})
        assert again.headers["x-fence-replayed"] == "true"
        stale = client.post("/charge", json={"amount": 1}, headers=fenced(1, "k2"))
        assert stale.status_code == 409
        refused = stale.json()["error"]
        assert refused["code"] == "stale_fence" and refused["fence"] == 1
        plain = client.post("/charge", json={"amount": 1})
        assert (plain.status_code, plain.json()) == (201, {"charge": 2})
        partial = client.post("/charge", headers={"Idempotency-Key": "k3"})
        assert partial.status_code == 400
        bad = client.post("/charge", headers={**fenced(1, "k4"), "X-Execution-Fence": "x"})
        assert bad.status_code == 400
    assert bank.charges == 2  # type: ignore[attr-defined]


def test_middleware_does_not_store_server_errors(served: str) -> None:
    """A 5xx from the receiver is passed on and not stored: the retry runs again."""
    with httpx.Client(base_url=served) as client:
        failed = client.post("/charge", content=b"fail", headers=fenced(1, "k"))
        assert failed.status_code == 503
        retried = client.post("/charge", content=b"ok", headers=fenced(1, "k"))
        assert (retried.status_code, retried.json()) == (201, {"charge": 2})
        assert "x-fence-replayed" not in retried.headers


@pytest.mark.parametrize("served", [True], indirect=True)
@pytest.mark.parametrize("backend", ["sqlite"])
def test_middleware_can_require_fence_headers(served: str) -> None:
    """With require=True, a request without fence headers gets 428, except the exempt ones:
    a GET anywhere and anything under /healthz (not /healthzx)."""
    with httpx.Client(base_url=served) as client:
        missing = client.post("/charge", json={})
        assert missing.status_code == 428
        assert missing.json()["error"]["code"] == "fence_required"
        assert client.post("/charge", json={}, headers=fenced(1, "k")).status_code == 201
        assert client.get("/charge").status_code == 201
        assert client.post("/healthz", json={}).status_code == 201
        assert client.post("/healthz/deep", json={}).status_code == 201
        assert client.post("/healthzx", json={}).status_code == 428


def test_idempotency_keys_are_per_scope(db_url: str) -> None:
    """Scope B sending scope A's key runs its own command and gets its own result, never A's;
    a lookup by scope tells them apart."""
    with FenceGuard(db_url) as guard:
        assert guard.apply("job-a", 1, "tool-key", lambda: {"for": "a"}) == {"for": "a"}
        assert guard.apply("job-b", 1, "tool-key", lambda: {"for": "b"}) == {"for": "b"}
        assert guard.apply("job-a", 1, "tool-key", lambda: {"for": "again"}) == {"for": "a"}
        assert guard.lookup("tool-key", "job-a").result == {"for": "a"}
        assert guard.lookup("tool-key", "job-b").result == {"for": "b"}
        assert guard.lookup("tool-key", "job-c").state == "never_ran"
