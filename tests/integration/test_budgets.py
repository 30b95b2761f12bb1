"""Spend budgets on both backends: a report charges the job and every budgeted ancestor in one
write, a run that went over stops (its reporting job fails, its queued jobs do not start, it
spawns no more), the overspend is at most one call per job running when it ran out, and bad
budgets are refused with nothing stored."""

from __future__ import annotations

import functools
import math
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import keys as api_keys
from tenure.ledger import lease_port
from tenure.service import ServiceSettings
from tests.support.cli import tenure_cli
from tests.support.databases import execute_sql
from tests.support.service import LiveServer
from tests.support.waiting import poll

CALL = 0.1  # what each call of the tests' `spend` handler costs, in usd


def budget_app(
    make_app: Callable[[], tenure.App], together: int = 1
) -> tuple[tenure.App, list[str]]:
    """`plan` spawns `spend` children that call until the run is over its budget; with
    `together`, that many children start calling at the same moment (all running at once)."""
    app = make_app()
    ran: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(together)

    @app.job("spend", max_attempts=3)
    def spend(ctx: tenure.JobContext, payload: Any) -> Any:
        with lock:
            ran.append(ctx.job_id)
        start.wait(30)
        while True:  # calls until a report takes the run over its budget
            ctx.report_cost(usd=CALL, calls=1)

    @app.job("plan", spawns=["spend"])
    def plan(ctx: tenure.JobContext, payload: Any) -> Any:
        children = [ctx.spawn("spend", {"n": n}) for n in range(payload["children"])]
        return ctx.wait_job(children)

    return app, ran


def ended(ledger: tenure.Ledger, job_id: str) -> Callable[[], tenure.Job | None]:
    def check() -> tenure.Job | None:
        job = ledger.get(job_id)
        return job if job.terminal else None

    return check


def test_a_report_is_charged_to_the_job_and_its_ancestors(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.job("child")
    def child(ctx: tenure.JobContext, payload: Any) -> Any:
        left = ctx.report_cost(usd=0.25, calls=1)
        return None if left is None else dict(left.remaining)

    @app.job("parent", spawns=["child"])
    def parent(ctx: tenure.JobContext, payload: Any) -> Any:
        return ctx.wait_job(ctx.spawn("child", {}, budget={"calls": 3, "usd": 5}))

    parent_id = app.ledger.submit("parent", {}, budget={"usd": 1.0, "calls": 10})
    with tenure.Worker(app, poll_interval=0.05):
        job = poll(ended(app.ledger, parent_id), 20, "the parent")
    assert job.state is tenure.JobState.SUCCEEDED
    # The child's own budget (3 calls; usd at most the parent's remainder), charged with the
    # parent's in one write: what the run has left is the least of the two.
    assert job.result == {"usd": 0.75, "calls": 2.0}
    left = app.ledger.operations.budget(parent_id)
    assert left is not None and dict(left.remaining) == {"usd": 0.75, "calls": 9.0}
    assert app.ledger.job_cost(parent_id) == (0, 0.0)  # the cost row is the child's


@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_run_over_its_budget_stops_within_one_call_per_running_job(
    make_app: Callable[[], tenure.App], concurrency: int
) -> None:
    children = 4
    app, ran = budget_app(make_app, together=1 if concurrency == 1 else children)
    plan = app.ledger.submit("plan", {"children": children}, budget={"usd": 1.0})
    with tenure.Worker(app, concurrency=concurrency, poll_interval=0.05):
        job = poll(ended(app.ledger, plan), 60, "the plan")
    kids = app.ledger.children(plan)
    assert len(kids) == children
    # A child failed, or the plan's failure cancelled it before it ran (as a failed parent's
    # unfinished children are).
    assert {kid.state for kid in kids} <= {tenure.JobState.FAILED, tenure.JobState.CANCELLED}
    failed = [kid for kid in kids if kid.state is tenure.JobState.FAILED]
    assert failed and {kid.error["code"] for kid in failed if kid.error} == {"budget_exhausted"}
    # The plan woke to a run with nothing left: it did not start again.
    assert job.state is tenure.JobState.FAILED and job.error is not None
    assert job.error["code"] == "budget_exhausted"
    left = app.ledger.operations.budget(plan)
    assert left is not None and left.exhausted
    overspend = -left.remaining["usd"]
    started = len(set(ran))
    # Each job that ran made at most one call past the budget, and no attempt was retried.
    assert 0 < overspend <= started * CALL + 1e-9, (overspend, started)
    assert all(kid.attempt == 1 for kid in kids if kid.id in ran)
    if concurrency == 1:
        # One child spent it all; the others were claimed after and never ran.
        assert started == 1 and math.isclose(overspend, CALL)
    print(f"concurrency {concurrency}: {started} children ran, overspend {overspend:.2f} usd")


def test_a_run_with_nothing_left_spawns_no_more(make_app: Callable[[], tenure.App]) -> None:
    app = make_app()

    @app.job("spawner", spawns=["noop"])
    def spawner(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.report_cost(calls=2)
        return ctx.spawn("noop", {})

    app.job("noop")(lambda ctx, payload: payload)
    job_id = app.ledger.submit("spawner", {}, budget={"calls": 2})
    with tenure.Worker(app, poll_interval=0.05):
        job = poll(ended(app.ledger, job_id), 20, "the spawner")
    assert job.state is tenure.JobState.FAILED and job.error is not None
    assert job.error["code"] == "budget_exhausted"
    assert app.ledger.children(job_id) == []


@pytest.mark.parametrize(
    ("budget", "says"),
    [
        ({}, "maps units to amounts"),
        ([1], "maps units to amounts"),
        ({"usd": math.nan}, "finite number"),
        ({"usd": -1}, "finite number"),
        ({"usd": math.inf}, "finite number"),
        ({"usd": 10**16}, "finite number"),
        ({"usd": 10**400}, "finite number"),
        ({"usd": 10**5000}, "an integer out of range"),
        ({"usd": True}, "must be a number"),
        ({"usd": "5"}, "must be a number"),
        ({"usd": {"deep": 1}}, "must be a number"),
        ({"USD": 1}, "lowercase name"),
        ({"us\x00d": 1}, "lowercase name"),
        ({"\ud800": 1}, "lowercase name"),
        ({f"u{n}": 1 for n in range(17)}, "at most 16 units"),
    ],
)
def test_a_bad_budget_is_refused_and_stores_nothing(db_url: str, budget: Any, says: str) -> None:
    with tenure.connect(db_url) as ledger:
        with pytest.raises(tenure.InvalidArgument, match=says):
            ledger.submit("k", {}, budget=budget)
        assert ledger.list() == []


def test_submit_many_takes_no_budget(db_url: str) -> None:
    with tenure.connect(db_url) as ledger:
        with pytest.raises(tenure.InvalidArgument, match="no budget"):
            ledger.submit_many("k", [{}, {}], budget={"usd": 1})
        assert ledger.list() == []


def test_a_child_asks_at_most_what_the_run_has_left() -> None:
    left = tenure.Budget({"usd": 0.4})
    assert left.clamp({"usd": 5, "calls": 3}) == {"usd": 0.4, "calls": 3}
    assert left.clamp(None) is None
    assert tenure.Budget({"usd": 0.0}).exhausted
    assert tenure.Budget({"usd": 1.0}, over=True).exhausted


def test_a_budget_goes_through_the_http_api(make_app: Callable[[], tenure.App]) -> None:
    """The service takes a budget with a submit, and refuses a bad one with a 4xx and a JSON
    body, storing nothing."""
    app = make_app()
    admin = api_keys.new_admin_key()
    settings = ServiceSettings(admin_key_sha256=admin.key_sha256)
    with LiveServer(app.ledger, settings) as server, server.client(admin.key) as http:
        ok = http.post("/v1/jobs", json={"kind": "k", "budget": {"usd": 2.5}})
        assert ok.status_code == 202, ok.text
        left = app.ledger.operations.budget(ok.json()["id"])
        assert left is not None and dict(left.remaining) == {"usd": 2.5}
        tree = http.get(f"/v1/jobs/{ok.json()['id']}/tree").json()
        assert tree["budget"] == {"remaining": {"usd": 2.5}, "exhausted": False}
        bad_budgets: list[object] = [{"usd": -1}, {"USD": 1}, {"usd": "5"}, {"usd": 1e300}, [], {}]
        for bad in bad_budgets:
            refused = http.post("/v1/jobs", json={"kind": "k", "budget": bad})
            assert 400 <= refused.status_code < 500, (bad, refused.status_code)
            assert isinstance(refused.json(), dict)
    assert len(app.ledger.list()) == 1


def test_spend_is_counted_by_kind_unit_and_labels(make_app: Callable[[], tenure.App]) -> None:
    """A worker's /metrics counts what its jobs reported, by the class's labels (tool,
    model, provider) and unit: numbers only."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from tenure.runtime.figures import WorkerFigures
    from tenure.service.metrics import WorkerCollector

    app = make_app()

    @app.job("ask", labels={"provider": "openai", "model": None})
    def ask(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.report_cost(tokens=120, usd=0.25, calls=1)
        return None

    app.ledger.submit("ask", {"secret": "prompt"}, labels={"model": "gpt-5"})
    app.ledger.submit("ask", {"secret": "prompt"}, labels={"model": "gpt-5"})
    with tenure.Worker(app, poll_interval=0.05) as worker:
        poll(lambda: worker.stats.get("succeeded", 0) >= 2, 20, "two jobs")
        registry = CollectorRegistry()
        registry.register(WorkerCollector(WorkerFigures(worker)))
        text = generate_latest(registry).decode()
    spend = {
        line.split("{")[1].split("}")[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("tenure_worker_spend_total{")
    }
    usd = [v for labels, v in spend.items() if 'unit="usd"' in labels]
    assert usd == [0.5]
    (labels,) = [labels for labels in spend if 'unit="calls"' in labels]
    assert 'kind="ask"' in labels and 'model="gpt-5"' in labels and 'provider="openai"' in labels
    assert "prompt" not in text


def test_a_held_job_waits_for_its_budget_to_be_raised(make_app: Callable[[], tenure.App]) -> None:
    """A class with on_budget="hold": the report that goes over gives the job back, held,
    without spending an attempt; raising the run's budget releases it and it finishes, its
    paid step not paid again."""
    app = make_app()
    paid: list[int] = []

    @app.job("careful", on_budget="hold", max_attempts=1)
    def careful(ctx: tenure.JobContext, payload: Any) -> Any:
        def call(n: int) -> int:
            paid.append(n)
            ctx.report_cost(usd=0.2)
            return n

        return [ctx.step(f"call-{n}", functools.partial(call, n)) for n in range(3)]

    job_id = app.ledger.submit("careful", {}, budget={"usd": 0.3})
    with tenure.Worker(app, poll_interval=0.05):
        held = poll(
            lambda: [
                e
                for e in app.ledger.events(job_id)
                if e.type is tenure.EventType.JOB_RELEASED
                and e.detail.get("reason") == "budget_exhausted"
            ],
            20,
            "the job held",
        )
        assert held[0].detail == {"reason": "budget_exhausted", "held": True}
        job = app.ledger.get(job_id)
        assert job.state is tenure.JobState.QUEUED and job.attempt == 0
        assert app.ledger.operations.raise_budget(job_id, usd=1.0) == [job_id]
        done = poll(ended(app.ledger, job_id), 20, "the job after the raise")
    assert done.state is tenure.JobState.SUCCEEDED and done.result == [0, 1, 2]
    # Call 1 went over: its step raised and was not recorded, so it ran again; call 0 not.
    assert paid == [0, 1, 1, 2]
    left = app.ledger.operations.budget(job_id)
    assert left is not None and math.isclose(left.remaining["usd"], 1.3 - 0.8)


def test_raising_a_run_without_a_budget_is_refused(db_url: str) -> None:
    with tenure.connect(db_url) as ledger:
        job_id = ledger.submit("k", {})
        with pytest.raises(tenure.InvalidArgument, match="no budget of usd to raise"):
            ledger.operations.raise_budget(job_id, usd=1)
        budgeted = ledger.submit("k", {}, budget={"usd": 1})
        with pytest.raises(tenure.InvalidArgument, match="no budget of calls to raise"):
            ledger.operations.raise_budget(budgeted, calls=5)
        assert ledger.operations.raise_budget(budgeted, usd=2) == []
        left = ledger.operations.budget(budgeted)
        assert left is not None and dict(left.remaining) == {"usd": 3.0}
        with pytest.raises(tenure.InvalidArgument, match="lowercase name"):
            ledger.operations.raise_budget(job_id, USD=1)
        with pytest.raises(tenure.InvalidArgument, match="more than 0"):
            ledger.operations.raise_budget(budgeted, usd=0)
        assert [e.type for e in ledger.events(budgeted)].count(tenure.EventType.BUDGET_RAISED) == 1


def test_a_job_without_a_budget_is_not_held_for_one(make_app: Callable[[], tenure.App]) -> None:
    """A handler of an on_budget="hold" class may raise BudgetExhausted itself; in a run with
    no budget there is nothing to raise, so the job fails (`budget_exhausted`) instead of
    waiting for ever."""
    app = make_app()

    @app.job("stopper", on_budget="hold")
    def stopper(ctx: tenure.JobContext, payload: Any) -> Any:
        raise tenure.BudgetExhausted("too little left for the next call")

    job_id = app.ledger.submit("stopper", {})
    with tenure.Worker(app, poll_interval=0.05):
        done = poll(ended(app.ledger, job_id), 20, "the job to end")
    assert done.state is tenure.JobState.FAILED and done.attempt == 1
    assert done.error is not None and done.error["code"] == "budget_exhausted"


def test_on_budget_is_fail_or_hold() -> None:
    app = tenure.App("sqlite:///:memory:")
    with pytest.raises(tenure.InvalidJobClass, match="on_budget is 'fail' or 'hold'"):
        app.job("k", on_budget="wait")(lambda ctx, payload: payload)


def test_a_report_of_a_bad_amount_is_refused(make_app: Callable[[], tenure.App]) -> None:
    app = make_app()
    refused: list[str] = []

    @app.job("bad_report")
    def bad_report(ctx: tenure.JobContext, payload: Any) -> Any:
        for units in ({"usd": math.inf}, {"usd": -1.0}, {"calls": math.nan}, {"Calls": 1}):
            try:
                ctx.report_cost(**units)
            except tenure.InvalidArgument as exc:
                refused.append(str(exc))
        return len(refused)

    job_id = app.ledger.submit("bad_report", {}, budget={"usd": 1, "calls": 1})
    with tenure.Worker(app, poll_interval=0.05):
        job = poll(ended(app.ledger, job_id), 20, "the job")
    assert job.result == 4, refused
    left = app.ledger.operations.budget(job_id)
    assert left is not None and dict(left.remaining) == {"usd": 1.0, "calls": 1.0}


def test_a_purge_keeps_a_budgeted_parent_while_its_children_run(db_url: str) -> None:
    with tenure.connect(db_url) as ledger:
        parent = ledger.submit("plan", {}, budget={"usd": 1})
        lease = ledger.claim("w", kinds=["plan"])
        assert lease is not None
        child, _ = lease_port(ledger).spawn(lease, "c", "step", {})
        ledger.complete(lease, None)
        ledger.operations.purge(0, keep_keys=0)
        assert ledger.get(parent).state is tenure.JobState.SUCCEEDED  # kept
        assert ledger.operations.budget(child) is not None
        ledger.cancel(child)
        ledger.operations.purge(0, keep_keys=0)
        with pytest.raises(tenure.JobNotFound):
            ledger.get(parent)


def test_a_purge_keeps_a_budgeted_run_while_a_grandchild_runs(db_url: str) -> None:
    """The chain a grandchild charges goes through its finished parent to the finished root:
    a purge keeps both while it runs, and takes the three once it has ended."""
    with tenure.connect(db_url) as ledger:
        port = lease_port(ledger)
        root_id = ledger.submit("plan", {}, budget={"usd": 1})
        root = ledger.claim("w", kinds=["plan"])
        assert root is not None
        child_id, _ = port.spawn(root, "c", "child", {})
        child = ledger.claim("w", kinds=["child"])
        assert child is not None
        leaf_id, _ = port.spawn(child, "g", "leaf", {})
        leaf = ledger.claim("w", kinds=["leaf"])
        assert leaf is not None
        ledger.complete(child, None)
        ledger.complete(root, None)
        ledger.operations.purge(0, keep_keys=0)
        assert {ledger.get(root_id).state, ledger.get(child_id).state} == {
            tenure.JobState.SUCCEEDED
        }
        assert port.report_cost(leaf_id, 1, usd=0.25, budgeted=leaf.budgeted) is not None
        assert ledger.operations.budget(root_id) == ledger.operations.budget(leaf_id)
        ledger.complete(leaf, None)

        def purged() -> bool:  # a purge takes what ended before its clock's now
            ledger.operations.purge(0, keep_keys=0)
            return not ledger.list()

        poll(purged, what="the run purged")


def test_a_raise_between_the_look_and_the_hold_releases_the_job(db_url: str) -> None:
    """The race of a worker holding a job for its run's budget: it saw the budget spent, a
    raise committed (the job was running, not held: nothing for the raise to release), then
    the worker held it. The hold looks again and releases the job: it is claimable now."""
    with tenure.connect(db_url) as ledger:
        port = lease_port(ledger)
        job_id = ledger.submit("plan", {}, budget={"calls": 1})
        lease = ledger.claim("w", kinds=["plan"])
        assert lease is not None
        port.report_cost(job_id, lease.attempt, units={"calls": 1})
        seen = ledger.operations.budget(job_id)  # the worker's look
        assert seen is not None and seen.exhausted
        assert ledger.operations.raise_budget(job_id, calls=1) == []  # running: none held
        raised = [e for e in ledger.events(job_id) if e.type is tenure.EventType.BUDGET_RAISED]
        assert [(e.detail["raised"], e.detail["released"]) for e in raised] == [({"calls": 1.0}, 0)]
        port.hold_for_budget(lease, seen)
        again = ledger.claim("w", kinds=["plan"])
        assert again is not None and again.job_id == job_id
        assert again.attempt == lease.attempt  # the hold spent no attempt


def test_a_hold_with_no_raise_since_the_look_stays_held(db_url: str) -> None:
    """A handler may stop a job for its budget before it is spent (it asked `ctx.budget()`
    and found too little for its next call), and a job may be held with no budget at all:
    the hold stays until a raise, it is not released to be claimed and held again."""
    with tenure.connect(db_url) as ledger:
        port = lease_port(ledger)
        ledger.submit("plan", {}, budget={"usd": 1})
        ledger.submit("plan", {})
        for _ in range(2):
            lease = ledger.claim("w", kinds=["plan"])
            assert lease is not None
            seen = ledger.operations.budget(lease.job_id)
            assert (seen is not None) is lease.budgeted and not (seen and seen.exhausted)
            port.hold_for_budget(lease, seen)
        assert ledger.claim("w", kinds=["plan"]) is None


def test_the_cli_submits_a_budget_and_refuses_a_bad_one(db_url: str) -> None:
    done = tenure_cli("submit", "k", "--budget", "usd=5", "--budget", "calls=50", db=db_url)
    assert done.returncode == 0, done.stderr
    with tenure.connect(db_url) as ledger:
        left = ledger.operations.budget(done.stdout.strip())
        assert left is not None and dict(left.remaining) == {"usd": 5.0, "calls": 50.0}
    for bad in ("usd", "usd=nan", "USD=1", "usd=-1", "usd=1e999", "=1", "usd=1=2"):
        refused = tenure_cli("submit", "k", "--budget", bad, db=db_url)
        assert refused.returncode == 2, (bad, refused.stderr)
        assert "Traceback" not in refused.stderr
    for twice in (("--budget", "usd=1", "--budget", "usd=2"),):
        refused = tenure_cli("submit", "k", *twice, db=db_url)
        assert refused.returncode == 2, (bad, refused.stderr)
        assert "Traceback" not in refused.stderr
    with tenure.connect(db_url) as ledger:
        assert len(ledger.list()) == 1


RUN_KINDS = {"root": "plan", "other": "other", "child": "child", "bare_child": "bare"}


def budgeted_run(ledger: tenure.Ledger) -> dict[str, str]:
    """A run without a budget whose child has one, that child's own child, a sibling without
    one, and another run: {name: job id}, each of its own kind, all left queued."""
    port = lease_port(ledger)
    jobs = {"root": ledger.submit("plan", {}), "other": ledger.submit("other", {})}
    root = ledger.claim("w", kinds=["plan"])
    assert root is not None
    jobs["child"], _ = port.spawn(root, "c", "child", {}, budget={"usd": 1})
    jobs["bare_child"], _ = port.spawn(root, "b", "bare", {})
    child = ledger.claim("w", kinds=["child"])
    assert child is not None
    jobs["grandchild"], _ = port.spawn(child, "g", "leaf", {})
    ledger.release(root)
    ledger.release(child)
    return jobs


def budgeted_flags(ledger: tenure.Ledger) -> dict[str, bool]:
    """The run's jobs claimed one by one: whether each lease says its run is budgeted."""
    flags = {}
    for name, kind in {**RUN_KINDS, "grandchild": "leaf"}.items():
        lease = ledger.claim("x", kinds=[kind])
        assert lease is not None, name
        flags[name] = lease.budgeted
    return flags


def test_a_lease_says_whether_its_run_is_budgeted(db_url: str) -> None:
    """`Lease.budgeted` is set where the job is written: its own budget, or a budgeted
    ancestor; a job beside them (a sibling, another run) is not, and never reads a chain."""
    with tenure.connect(db_url) as ledger:
        jobs = budgeted_run(ledger)
        assert budgeted_flags(ledger) == {
            "root": False,
            "other": False,
            "child": True,
            "bare_child": False,
            "grandchild": True,
        }
        # The cost of a job outside any budget is recorded all the same, in one statement.
        port = lease_port(ledger)
        assert port.report_cost(jobs["other"], 1, 3, 0.5, {"calls": 1}, budgeted=False) is None
        assert ledger.job_cost(jobs["other"]) == (3, 0.5)
        assert ledger.operations.report_cost(jobs["grandchild"], 1, usd=0.25) is not None
        assert ledger.operations.budget(jobs["child"]) == ledger.operations.budget(
            jobs["grandchild"]
        )


def test_the_upgrade_marks_the_runs_budgeted_before_it(
    db_url: str, connect: Callable[..., tenure.Ledger]
) -> None:
    """Version 21 marks every job of a run budgeted before it existed (a database at version
    20 has no such column): the same flags as for jobs written after it."""
    with tenure.connect(db_url) as ledger:
        budgeted_run(ledger)
    sqlite = db_url.startswith("sqlite:")
    on = {"tenure_jobs_child_budgeted": "tenure_jobs", "tenure_budgets_mark_job": "tenure_budgets"}
    for trigger, table in on.items():
        execute_sql(db_url, f"DROP TRIGGER {trigger}" + ("" if sqlite else f" ON {table}"))
    execute_sql(db_url, "ALTER TABLE tenure_jobs DROP COLUMN budgeted")
    execute_sql(db_url, "DELETE FROM tenure_schema_version WHERE version = 21")
    flags = budgeted_flags(connect())
    assert [name for name, budgeted in flags.items() if budgeted] == ["child", "grandchild"]


def test_jobs_an_older_version_writes_are_marked_too(db_url: str) -> None:
    """During a rolling upgrade a worker of a version before 21 writes rows without the flag:
    a child it spawns under a budgeted job, a budget it submits. The triggers of version 21
    mark both, so no job of a budgeted run starts unchecked or reports uncharged."""
    with tenure.connect(db_url) as ledger:
        jobs = budgeted_run(ledger)
        orphan = str(uuid.uuid4())
        execute_sql(  # the INSERT of a version that has no `budgeted` column to name
            db_url,
            "INSERT INTO tenure_jobs (id, kind, tenant, max_attempts, payload, payload_sha256,"
            " run_after, priority, created_at, updated_at, parent_id, state)"
            f" SELECT '{orphan}', 'orphan', tenant, max_attempts, payload, payload_sha256,"
            " run_after, priority, created_at, updated_at, id, 'queued'"
            f" FROM tenure_jobs WHERE id = '{jobs['grandchild']}'",
        )
        execute_sql(
            db_url,
            "INSERT INTO tenure_budgets (job_id, budget)"
            f" VALUES ('{jobs['other']}', '{{\"usd\": 1}}')",
        )
        flags = budgeted_flags(ledger)
        orphan_lease = ledger.claim("x", kinds=["orphan"])
        assert orphan_lease is not None and orphan_lease.budgeted
        assert [name for name, budgeted in flags.items() if budgeted] == [
            "other",
            "child",
            "grandchild",
        ]
