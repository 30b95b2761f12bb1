"""Defects found trying tenure as a new user and as an attacker would (issue 30): each test
pins the fix at its cause and failed before it."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import tenure
from tenure import keys
from tenure.ledger import lease_port
from tenure.options import SubmitOptions
from tenure.service import ServiceSettings
from tests.support.cli import tenure_cli
from tests.support.databases import direct, execute_sql
from tests.support.service import LiveServer
from tests.support.timing import FAST
from tests.support.waiting import until_db_time_passes


@pytest.fixture
def http(ledger: tenure.Ledger) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """A tenant's client and the admin's, on a live `tenure serve` application."""
    admin = keys.new_admin_key()
    with LiveServer(ledger, ServiceSettings(admin_key_sha256=admin.key_sha256)) as server:
        tenant = server.client(ledger.operations.create_tenant("acme"))
        operator = server.client(admin.key)
        yield tenant, operator
        tenant.close()
        operator.close()


def nested(depth: int) -> Any:
    """`depth` objects, each inside the one before."""
    value: Any = 1
    for _ in range(depth):
        value = {"x": value}
    return value


def raw_post(client: httpx.Client, path: str, body: bytes) -> httpx.Response:
    return client.post(path, content=body, headers={"content-type": "application/json"})


# -- 8, 9, 10: what a JSON value may hold -----------------------------------------------------


def test_nesting_is_bounded_at_every_door(
    ledger: tenure.Ledger, http: tuple[httpx.Client, httpx.Client]
) -> None:
    """64 levels pass; 65 (and 995, which used to raise RecursionError) are refused with a
    clear error by the library and a 422 over HTTP; nothing is written."""
    tenant, _ = http
    assert ledger.get(ledger.submit("k", nested(64))).payload == nested(64)
    for depth in (65, 995, 5000):
        with pytest.raises(tenure.InvalidArgument, match="nested more than 64"):
            ledger.submit("k", nested(depth))
    answer = tenant.post("/v1/jobs", json={"kind": "k", "payload": nested(300)})
    assert answer.status_code == 422
    assert "nested more than 64" in answer.json()["error"]["message"]
    assert len(ledger.list()) == 1


def test_a_value_stored_too_deep_does_not_break_reads(
    db_url: str, ledger: tenure.Ledger, http: tuple[httpx.Client, httpx.Client]
) -> None:
    """A job whose payload older versions stored 300 levels deep: its page and the admin's
    listing answer 200, with a note in place of the value, not a 500."""
    tenant, operator = http
    job_id = ledger.submit("k", {}, tenant="acme")
    deep = json.dumps(nested(300))
    cast = "" if db_url.startswith("sqlite") else "::jsonb"
    execute_sql(db_url, f"UPDATE tenure_jobs SET payload = '{deep}'{cast}")
    page = tenant.get(f"/v1/jobs/{job_id}")
    assert page.status_code == 200
    assert "tenure_unreadable" in page.json()["payload"]
    listing = operator.get("/v1/jobs")
    assert listing.status_code == 200
    assert [job["id"] for job in listing.json()["jobs"]] == [job_id]


def test_lone_surrogates_are_refused_at_every_door(
    ledger: tenure.Ledger, http: tuple[httpx.Client, httpx.Client], db_url: str
) -> None:
    """A lone UTF-16 surrogate in a payload, a signal or a name: InvalidArgument from the
    library, a JSON 422 over HTTP (the connection stays usable), exit 2 from the CLI."""
    tenant, _ = http
    for bad in ({"s": "\ud800"}, {"\udfff": 1}):
        with pytest.raises(tenure.InvalidArgument, match="surrogate"):
            ledger.submit("k", bad)
    with pytest.raises(tenure.InvalidArgument, match="surrogate"):
        ledger.submit("k\ud800", {})
    answer = raw_post(tenant, "/v1/jobs", b'{"kind": "k", "payload": {"s": "\\ud800"}}')
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid_argument"
    job_id = ledger.submit("k", {}, tenant="acme")
    answer = raw_post(tenant, f"/v1/jobs/{job_id}/signals/go", b'{"payload": "\\udc00"}')
    assert answer.status_code == 422
    assert tenant.get(f"/v1/jobs/{job_id}").status_code == 200
    cli = tenure_cli("--db", db_url, "submit", "k", "--payload", '{"s": "\\ud800"}')
    assert cli.returncode == 2
    assert "surrogate" in cli.stderr
    assert "Traceback" not in cli.stderr
    assert len(ledger.list()) == 1


def test_the_six_characters_backslash_u0000_are_text_not_nul(ledger: tenure.Ledger) -> None:
    """The literal text `\\u0000` is stored as written; a real NUL is still refused."""
    job_id = ledger.submit("k", {"s": "\\u0000"})
    assert ledger.get(job_id).payload == {"s": "\\u0000"}
    with pytest.raises(tenure.InvalidArgument, match="NUL"):
        ledger.submit("k", {"s": "\x00"})
    with pytest.raises(tenure.InvalidArgument, match="NUL"):
        ledger.submit("k", {"\x00": 1})


# -- 11, 12: types and filters over HTTP -------------------------------------------------------


@pytest.mark.parametrize(
    "field", [{"max_attempts": "3"}, {"max_attempts": True}, {"priority": "5"}, {"priority": 1.5}]
)
def test_wrong_json_types_are_refused_not_coerced(
    ledger: tenure.Ledger, http: tuple[httpx.Client, httpx.Client], field: dict[str, Any]
) -> None:
    """A string or a boolean where a number belongs is a 422, and nothing is written."""
    tenant, _ = http
    answer = tenant.post("/v1/jobs", json={"kind": "k", "payload": {}, **field})
    assert answer.status_code == 422
    assert ledger.list() == []


def test_a_nul_in_a_list_filter_is_a_422(http: tuple[httpx.Client, httpx.Client]) -> None:
    """?kind=%00 and the admin's ?tenant=%00 are refused with a JSON error (a 500 on
    PostgreSQL before)."""
    tenant, operator = http
    for client, query in ((tenant, "kind=%00"), (operator, "tenant=%00")):
        answer = client.get(f"/v1/jobs?{query}")
        assert answer.status_code == 422
        assert "NUL" in answer.json()["error"]["message"]


# -- 14: names a terminal would obey ----------------------------------------------------------


def test_control_characters_in_names_are_refused_and_shown_escaped(
    db_url: str, ledger: tenure.Ledger
) -> None:
    """A kind with an escape sequence is refused at submit; one already stored is printed by
    `tenure jobs` and `tenure status` with the escape written out."""
    with pytest.raises(tenure.InvalidArgument, match="control character"):
        ledger.submit("k\x1b[2J", {})
    job_id = ledger.submit("k", {})
    execute_sql(
        db_url,
        "UPDATE tenure_jobs SET kind = 'k' || chr(27) || '[31mRED'".replace(
            "chr(27)", "char(27)" if db_url.startswith("sqlite") else "chr(27)"
        ),
    )
    for command in (["jobs"], ["status", job_id]):
        out = tenure_cli("--db", db_url, *command)
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout
        assert "k\\x1b[31mRED" in out.stdout


# -- 6: lease calls given something else --------------------------------------------------------


def test_lease_calls_name_a_wrong_argument(ledger: tenure.Ledger) -> None:
    """extend(None), complete("x") and friends raise InvalidArgument naming the lease, not an
    AttributeError from deep inside."""
    calls: list[Callable[[], object]] = [
        lambda: ledger.extend(None),  # type: ignore[arg-type]
        lambda: lease_port(ledger).extend_many([None]),  # type: ignore[list-item]
        lambda: ledger.complete("x", {}),  # type: ignore[arg-type]
        lambda: ledger.fail(None, {}),  # type: ignore[arg-type]
        lambda: ledger.save_step(42, 1, {}),  # type: ignore[arg-type]
        lambda: ledger.release({}),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(tenure.InvalidArgument, match=r"must be a tenure\.Lease"):
            call()


# -- 4, 5: a handler that raises ----------------------------------------------------------------


def test_a_raising_handler_says_where_at_warning_without_its_message(
    make_app: Callable[[], tenure.App], caplog: pytest.LogCaptureFixture
) -> None:
    """WARNING `handler_raised` names the module, function and line of the user's code that
    raised, and never the exception's message."""
    app = make_app()

    @app.job("typo", max_attempts=1, **FAST)
    def typo(ctx: tenure.JobContext, payload: Any) -> None:
        payload["missing"]["secret value"]

    job_id = app.submit("typo", {"missing": {}})
    with caplog.at_level(logging.WARNING, logger="tenure"), tenure.Worker(app, concurrency=1):
        assert app.ledger.wait(job_id, 30).state is tenure.JobState.FAILED
    raised = [r for r in caplog.records if getattr(r, "tenure_event", None) == "handler_raised"]
    assert len(raised) == 1
    fields = raised[0].tenure_fields  # type: ignore[attr-defined]
    line = typo.__code__.co_firstlineno + 2
    assert fields["at"] == f"{__name__}:typo:{line}"
    assert fields["error_type"] == "KeyError"
    assert "secret value" not in caplog.text


def test_a_step_that_raised_is_failed_not_in_doubt(
    make_app: Callable[[], tenure.App],
) -> None:
    """The step's function raised on attempt 1: attempt 2 runs it again without a
    `step_in_doubt`; `step_failed` records the error type."""
    app = make_app()
    runs: list[int] = []

    @app.job("flaky", max_attempts=2, **FAST)
    def flaky(ctx: tenure.JobContext, payload: Any) -> str:
        def once() -> str:
            runs.append(ctx.attempt)
            if ctx.attempt == 1:
                raise ConnectionError("the service said no")
            return "ok"

        return str(ctx.step("call", once))

    job_id = app.submit("flaky", {})
    with tenure.Worker(app, concurrency=1):
        done = app.ledger.wait(job_id, 30)
    assert (done.state, done.result, runs) == (tenure.JobState.SUCCEEDED, "ok", [1, 2])
    types = [e.type for e in app.ledger.events(job_id)]
    assert "step_in_doubt" not in types
    failed = [e for e in app.ledger.events(job_id) if e.type == "step_failed"]
    assert [(e.detail["position"], e.detail["error_type"]) for e in failed] == [
        (0, "ConnectionError")
    ]


# -- 3, 9, 13: the command line ------------------------------------------------------------------


def test_version_and_the_demo_help() -> None:
    """`tenure --version` prints the package's version; `tenure demo --help` says its default
    database is a temporary one."""
    from importlib.metadata import version

    out = tenure_cli("--version")
    assert (out.returncode, out.stdout.strip()) == (0, f"tenure {version('tenure')}")
    helped = tenure_cli("demo", "--help")
    assert "temporary" in " ".join(helped.stdout.split())


@pytest.mark.parametrize(
    "args",
    [
        ["worker", "x:app", "--poll", "0"],
        ["worker", "x:app", "--poll", "nan"],
        ["worker", "x:app", "--grace", "-1"],
        ["worker", "x:app", "--metrics-port", "0"],
        ["serve", "--port", "70000"],
        ["mcp", "x:app", "--port", "-1"],
        ["submit", "k", "--payload", '{"n": ' + "9" * 5000 + "}"],
    ],
)
def test_bad_numbers_are_usage_errors(args: list[str], tmp_path: Path) -> None:
    """Out-of-range ports, a zero or NaN poll, a negative grace and a 5,000-digit integer are
    exit 2 with one line, never a traceback (or a worker spinning at --poll 0)."""
    out = tenure_cli("--db", f"sqlite:///{tmp_path / 'x.db'}", *args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "error" in out.stderr


def test_a_closed_pipe_ends_the_demo_without_a_traceback(tmp_path: Path) -> None:
    """`tenure demo | head -1`: the reader goes away; no BrokenPipeError traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tenure.cli", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(120)
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err


# -- 7: a tool call that no worker takes up -----------------------------------------------------


def test_a_tool_call_no_worker_claims_says_so(
    ledger: tenure.Ledger, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A durable tool's call whose job nobody claims warns once, naming the kind and the
    database, instead of waiting in silence."""
    from tenure.integrations import jobcalls

    monkeypatch.setattr(jobcalls, "UNCLAIMED_WARNING", 0.2)
    calls = jobcalls.JobCalls(ledger, "ocr", timeout=0.6, tenant=None)
    job_id = calls.submit({}, "call-1")
    with caplog.at_level(logging.WARNING, logger="tenure"), pytest.raises(TimeoutError):
        calls.wait(job_id)
    said = [r.getMessage() for r in caplog.records if "no worker has claimed" in r.getMessage()]
    assert len(said) == 1
    assert "'ocr'" in said[0]
    assert ledger._store.where in said[0]


def test_a_worker_says_which_database_it_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A relative SQLite URL is logged at worker start as the file's absolute path."""
    monkeypatch.chdir(tmp_path)
    app = tenure.App("sqlite:///jobs.db")

    @app.job("noop", **FAST)
    def noop(ctx: tenure.JobContext, payload: Any) -> None:
        """Nothing: the worker needs a class to start."""

    with caplog.at_level(logging.INFO, logger="tenure"), tenure.Worker(app, concurrency=1):
        pass
    started = [r for r in caplog.records if getattr(r, "tenure_event", None) == "worker_started"]
    fields = started[0].tenure_fields  # type: ignore[attr-defined]
    assert fields["database"] == f"SQLite at {tmp_path.resolve() / 'jobs.db'}"


# -- 16: /metrics and many kinds ------------------------------------------------------------------


def test_metrics_fold_kinds_past_the_cap_into_other(
    ledger: tenure.Ledger, http: tuple[httpx.Client, httpx.Client]
) -> None:
    """120 kinds: /metrics shows at most MAX_KINDS of them by name and the rest as `other`,
    every job still counted."""
    import re

    from tenure.service.metrics import MAX_KINDS

    for n in range(120):
        ledger.submit(f"kind-{n:03d}", {}, tenant="acme")
    text = http[0].get("/metrics").text
    jobs = [line for line in text.splitlines() if line.startswith("tenure_jobs{")]
    kinds = {m.group(1) for line in jobs if (m := re.search(r'kind="([^"]*)"', line))}
    assert "other" in kinds
    assert len(kinds) <= MAX_KINDS + 1
    queued = sum(float(line.rsplit(" ", 1)[1]) for line in jobs if 'state="queued"' in line)
    assert queued == 120


# -- 23: the same value reads the same on both backends -----------------------------------------


def test_json_reads_with_the_same_key_order_on_both_backends(ledger: tenure.Ledger) -> None:
    """PostgreSQL's jsonb orders keys shortest first; tenure reads them sorted on both
    backends, nested objects included, payloads and results alike."""
    value = {"b": 1, "aa": {"z": 1, "yy": 2}, "ccc": [{"q": 1, "pp": 2}]}
    job_id = ledger.submit("k", value)
    lease = ledger.claim("w", kinds=["k"], lease_seconds=30)
    assert lease is not None
    assert list(lease.payload) == ["aa", "b", "ccc"]
    ledger.complete(lease, value)
    job = ledger.get(job_id)
    for read in (job.payload, job.result):
        assert json.dumps(read) == json.dumps(value, sort_keys=True)


# -- 17, 18, 19, 20: parents, children, purges ---------------------------------------------------


def _child(ledger: tenure.Ledger, parent: str, name: str) -> str:
    # A child of a job that holds no lease here: the submission part itself, as a spawn does.
    job_id, _ = ledger._submission.submit_or_find(name, {}, SubmitOptions(), parent_id=parent)
    return job_id


def test_a_purge_keeps_the_child_of_a_parent_that_has_not_ended(ledger: tenure.Ledger) -> None:
    """A finished child of a waiting parent survives a purge; once the parent has ended, both
    go."""
    parent = ledger.submit("parent", {})
    child = _child(ledger, parent, "child")
    lease = ledger.claim("w", kinds=["child"], lease_seconds=30)
    assert lease is not None and lease.job_id == child
    ledger.complete(lease, {"ok": True})
    until_db_time_passes(ledger, ledger.get(child).updated_at)
    assert ledger.operations.purge(older_than=0.0, keep_keys=0.0).jobs == 0
    assert ledger.get(child).state is tenure.JobState.SUCCEEDED
    ledger.cancel(parent)
    # A purge takes what changed before its clock reading: let the database's clock move on.
    until_db_time_passes(ledger, ledger.get(parent).updated_at)
    assert ledger.operations.purge(older_than=0.0, keep_keys=0.0).jobs == 2


def test_a_parent_that_fails_cancels_its_unfinished_children(ledger: tenure.Ledger) -> None:
    """The parent ends failed (say, one child failed): its other children are cancelled with
    their tokens bumped, as a cancel of the parent does; a finished one stays as it is."""
    parent = ledger.submit("parent", {}, max_attempts=1)
    lease = ledger.claim("w", kinds=["parent"], lease_seconds=30)
    assert lease is not None
    done = _child(ledger, parent, "child")
    running = _child(ledger, parent, "child")
    queued = _child(ledger, parent, "child")
    first = ledger.claim("c", kinds=["child"], lease_seconds=30)
    assert first is not None and first.job_id == done
    ledger.complete(first, {})
    second = ledger.claim("c", kinds=["child"], lease_seconds=30)
    assert second is not None and second.job_id == running
    state = ledger.fail(lease, {"code": "child_failed"}, retryable=False)
    assert state is tenure.JobState.FAILED
    states = {job_id: ledger.get(job_id).state for job_id in (done, running, queued)}
    assert states == {
        done: tenure.JobState.SUCCEEDED,
        running: tenure.JobState.CANCELLED,
        queued: tenure.JobState.CANCELLED,
    }
    with pytest.raises(tenure.LeaseLost):
        ledger.complete(second, {})


def test_requeue_brings_a_parents_cancelled_children_back(ledger: tenure.Ledger) -> None:
    """Requeueing a cancelled parent requeues the children its cancel took with it (and
    theirs), so that it does not fail again at once on them."""
    parent = ledger.submit("parent", {})
    child = _child(ledger, parent, "child")
    grandchild = _child(ledger, child, "grandchild")
    ledger.cancel(parent)
    assert ledger.get(grandchild).state is tenure.JobState.CANCELLED
    ledger.requeue(parent)
    for job_id in (parent, child, grandchild):
        assert ledger.get(job_id).state is tenure.JobState.QUEUED


@pytest.mark.parametrize("backend", ["postgres"])
def test_an_event_written_while_a_purge_deletes_its_job_leaves_no_orphan(
    db_url: str, ledger: tenure.Ledger
) -> None:
    """A stale writer's `result_rejected` racing a purge: the event waits for the purge's lock
    and finds no job, instead of outliving it (events have no foreign key)."""
    import threading

    import psycopg

    job_id = ledger.submit("k", {})
    lease = ledger.claim("w", kinds=["k"], lease_seconds=30)
    assert lease is not None
    ledger.cancel(job_id)
    with psycopg.connect(direct(db_url)) as purger:
        purger.execute("SELECT id FROM tenure_jobs WHERE id = %s FOR UPDATE", (job_id,))
        purger.execute("DELETE FROM tenure_events WHERE job_id = %s", (job_id,))
        purger.execute("DELETE FROM tenure_jobs WHERE id = %s", (job_id,))
        rejected: list[BaseException] = []

        def stale_complete() -> None:
            try:
                ledger.complete(lease, {"late": True})
            except BaseException as exc:
                rejected.append(exc)

        writer = threading.Thread(target=stale_complete)
        writer.start()
        writer.join(1.0)
        assert writer.is_alive(), "the event did not wait for the purge's lock"
        purger.commit()
    writer.join(10)
    # The job is gone: the stale write is a lost lease (job_missing), as any write of a held
    # job that vanished.
    assert [type(exc) for exc in rejected] == [tenure.LeaseLost]
    assert lease_port(ledger).lost_reason(job_id) is tenure.CancelReason.JOB_MISSING
    with psycopg.connect(direct(db_url)) as check:
        row = check.execute(
            "SELECT count(*) FROM tenure_events WHERE job_id = %s", (job_id,)
        ).fetchone()
    assert row == (0,)


# -- 22: a SQLite disk that fills up -----------------------------------------------------------


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 3 MiB tmpfs (root only): a disk that fills up for real."""
    import os
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="tenure-full-"))
    mounted = subprocess.run(
        [
            shutil.which("mount") or "/bin/mount",
            "-t",
            "tmpfs",
            "-o",
            "size=3m",
            "tmpfs",
            str(folder),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        if os.environ.get("CI") == "true" and os.geteuid() == 0:
            pytest.fail(f"cannot mount a tmpfs: {mounted.stderr}")
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run([shutil.which("umount") or "/bin/umount", "-l", str(folder)], check=False)
        folder.rmdir()


def test_a_full_disk_is_reported_and_the_worker_backs_off(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite on a disk that fills: /readyz says the database refuses writes (503), a worker
    warns once and backs off instead of a warning per try, and both recover once space is
    freed."""
    from tests.support.waiting import poll

    app = tenure.App(f"sqlite:///{small_disk / 'jobs.db'}")

    @app.job("big", **FAST)
    def big(ctx: tenure.JobContext, payload: Any) -> None:
        """Nothing: the claim is what fails."""

    filler = small_disk / "filler"
    filler.write_bytes(b"x" * 1024 * 1024)
    ledger = app.ledger
    queued = ledger.submit("big", {})
    for size in (20000, 1000, 10):  # until even a small write finds no room
        with pytest.raises(tenure.StoreUnavailable, match="full"):
            for _ in range(10000):
                ledger.submit("other", {"blob": "y" * size})
    admin = keys.new_admin_key()
    settings = ServiceSettings(admin_key_sha256=admin.key_sha256)
    with LiveServer(ledger, settings) as server, server.client() as anonymous:
        if True:
            down = anonymous.get("/readyz")
            assert down.status_code == 503
            assert "refuses writes" in down.json()["reason"]
            records = caplog.records

            def named(event: str) -> list[logging.LogRecord]:
                return [r for r in records if getattr(r, "tenure_event", None) == event]

            with (
                caplog.at_level(logging.INFO, logger="tenure"),
                tenure.Worker(app, concurrency=1, poll_interval=0.05),
            ):
                poll(lambda: named("claim_failed"), 30, "the first claim failure")
                filler.unlink()
                assert ledger.wait(queued, 30).state is tenure.JobState.SUCCEEDED
                recovered = poll(lambda: named("claim_recovered"), 30, "the recovery")
            assert len(named("claim_failed")) == 1
            assert recovered[0].tenure_fields["failures"] >= 1  # type: ignore[attr-defined]
            assert anonymous.get("/readyz").status_code == 200


def test_a_missing_postgres_database_is_named_at_once(postgres_server: Any) -> None:
    """The server answers that the database does not exist: connect says so, not that the
    server may not be running, and without waiting for the pool's time-out."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(postgres_server.url)
    url = urlunsplit(parts._replace(path="/tenure_no_such_database"))
    with pytest.raises(tenure.StoreUnavailable, match="does not exist") as refused:
        tenure.connect(url, timeout=30)
    assert "is it running" not in str(refused.value)
