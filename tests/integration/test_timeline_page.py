"""A job's life drawn in headless Chromium (Debian's, driven by Playwright): the lease timeline
and the run tree on the dashboard's job page, over real data (`tenure demo`, a real worker
process), and the offline page `tenure events ID --timeline --html` writes, with no network."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import keys
from tenure.service import ServiceSettings
from tenure.types import EventType
from tests.support.browser import apps_worker, screenshot
from tests.support.cli import kept_demo, tenure_cli
from tests.support.pairs import claim_when_promoted, started_pair
from tests.support.service import LiveServer

pytestmark = pytest.mark.slow

sync_api: Any = pytest.importorskip("playwright.sync_api")

# What the demo's job carries (its payload's invoice, its result's payment): content, which no
# drawing of the job's life may show.
DEMO_CONTENT = ("INV-1042", "pay-1")


@dataclass(frozen=True)
class DemoRun:
    db: str
    job_id: str
    page: Path
    """The offline page `tenure demo --timeline` wrote."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """`tenure demo` played once into a database of this module's own."""
    folder = tmp_path_factory.mktemp("demo")
    db = f"sqlite:///{folder / 'demo.db'}"
    page = folder / "demo.html"
    run = kept_demo(db, page, folder)
    assert run.returncode == 0, run.stdout + run.stderr
    with tenure.connect(db) as ledger:
        [job] = ledger.list(kind="invoice")
        payload, result = ledger.get(job.id).payload, ledger.get(job.id).result
    assert payload["invoice"] == DEMO_CONTENT[0] and result["payment"] == DEMO_CONTENT[1]
    return DemoRun(db, job.id, page)


def _claims(ledger: tenure.Ledger, job_id: str) -> list[int]:
    """The tokens of the job's claims, in order: one lane each."""
    events = ledger.events(job_id)
    return [e.token for e in events if e.type is EventType.JOB_CLAIMED and e.token is not None]


def _open_dashboard(browser: Any, url: str, key: str, job_id: str, errors: list[str]) -> Any:
    """The dashboard's page of `job_id`, signed in with `key`; script errors go to `errors`."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{url}/#/jobs/{job_id}")
    page.fill("#api-key", key)
    page.click("#use-key")
    return page


def test_the_demos_job_on_the_dashboard(browser: Any, demo: DemoRun, tmp_path: Path) -> None:
    """The demo's story, drawn: W1's lane expires with its refused charge and rejected result;
    W2's lane charges, having found the charge in doubt; nothing of the job's content shows.
    The zoom holds across the page's refreshes."""
    expect = sync_api.expect
    admin = keys.new_admin_key()
    settings = ServiceSettings(admin_key_sha256=admin.key_sha256)
    with tenure.connect(demo.db) as ledger, LiveServer(ledger, settings) as server:
        first_token, second_token = _claims(ledger, demo.job_id)
        [sent] = [
            e
            for e in ledger.events(demo.job_id)
            if e.type is EventType.TOOL_REQUEST_STARTED and e.token == second_token
        ]
        assert sent.idempotency_key
        errors: list[str] = []
        page = _open_dashboard(browser, server.url, admin.key, demo.job_id, errors)

        lanes = page.locator("#timeline g.lane")
        expect(lanes).to_have_count(2, timeout=10_000)
        first, second = lanes.nth(0), lanes.nth(1)
        expect(first).to_have_attribute("data-token", str(first_token))
        expect(first).to_have_attribute("data-ended-by", "expired")
        expect(first.locator('[data-hatched="true"]')).to_have_count(1)
        expect(first.locator('[data-mark="effect_refused"]')).to_have_count(1)
        expect(first.locator('[data-mark="result_rejected"]')).to_have_count(1)
        # W1's late charge reached the bank, which refused it: it did not happen.
        expect(first.locator('[data-effect-name="charge"]')).to_have_attribute(
            "data-effect-status", "refused"
        )

        expect(second).to_have_attribute("data-token", str(second_token))
        expect(second).to_have_attribute("data-ended-by", "succeeded")
        charge = second.locator('[data-effect-name="charge"]')
        expect(charge).to_have_attribute("data-effect-status", "done")
        expect(charge).to_have_attribute("data-in-doubt", "true")
        expect(charge).to_have_attribute("data-fence", str(second_token))
        stage = second.locator('[data-stage-name="charge"]')
        expect(stage).to_have_attribute("data-stage-status", "done")
        expect(stage).to_have_attribute("data-in-doubt-from", str(first_token))
        expect(page.locator("#timeline [data-rule]")).to_have_count(0)  # SQLite: no failover

        # Hovering the charge shows its fields: the fence and the key it was sent with;
        # focusing the refusal shows why the bank refused it.
        charge.hover()
        tip = page.locator("#timeline-tip")
        expect(tip).to_be_visible()
        expect(tip).to_contain_text(str(second_token))
        expect(tip).to_contain_text(sent.idempotency_key)
        first.locator('[data-mark="effect_refused"]').focus()
        expect(tip).to_contain_text("stale_fence")

        tree = page.locator(f'#run-tree li[data-tree-job="{demo.job_id}"]')
        expect(tree).to_have_attribute("data-state", "succeeded")
        expect(tree).to_have_attribute("data-focus", "true")
        for region in ("#timeline", "#run-tree"):
            drawn = page.locator(region).inner_html()
            for content in DEMO_CONTENT:
                assert content not in drawn, f"{content!r} in {region}"
        page.mouse.move(0, 0)
        screenshot(page.locator("#timeline"), tmp_path, "timeline")

        _zoom_holds_across_refreshes(page)
        assert errors == []


def _zoom_holds_across_refreshes(page: Any) -> None:
    """Zoom in with the button, see two refreshes keep the window, drag across the axis to
    look closer, and reset."""
    expect = sync_api.expect
    chart = page.locator("#timeline .tl")
    window = page.locator("#timeline .tl-window")
    expect(chart).to_have_attribute("data-zoomed", "false")
    page.click('#timeline button[data-zoom="in"]')
    expect(chart).to_have_attribute("data-zoomed", "true")
    zoomed = window.text_content()
    assert zoomed.startswith("showing ")
    for _ in range(2):  # the page refreshes every second
        with page.expect_response(lambda r: r.url.endswith("/timeline")):
            pass
    expect(chart).to_have_attribute("data-zoomed", "true")
    expect(window).to_have_text(zoomed)
    axis = page.locator("#timeline .tl-axis").bounding_box()
    y = axis["y"] + axis["height"] / 2
    page.mouse.move(axis["x"] + axis["width"] * 0.4, y)
    page.mouse.down()
    page.mouse.move(axis["x"] + axis["width"] * 0.6, y, steps=4)
    page.mouse.up()
    expect(window).not_to_have_text(zoomed)
    expect(window).to_contain_text("showing ")
    page.click('#timeline button[data-zoom="reset"]')
    expect(chart).to_have_attribute("data-zoomed", "false")
    expect(page.locator("#timeline g.lane")).to_have_count(2)


def test_a_run_tree_of_three_levels(browser: Any, tmp_path: Path) -> None:
    """A real worker runs a root that spawns a branch that spawns two leaves: the tree shows
    the three levels with their states, each a link to its job's page; the root's timeline
    shows the wait for its child."""
    expect = sync_api.expect
    db = f"sqlite:///{tmp_path / 'tree.db'}"
    with tenure.connect(db) as ledger, LiveServer(ledger) as server:
        key = ledger.operations.create_tenant("acme")
        root = ledger.submit("tree_root", {}, tenant="acme", budget={"tokens": 1000})
        worker = apps_worker(db, tmp_path, "tree_root", "tree_branch", "tree_leaf")
        errors: list[str] = []
        try:
            page = _open_dashboard(browser, server.url, key, root, errors)
            top = page.locator(f'#run-tree ul.rt-tree > li[data-tree-job="{root}"]')
            expect(top).to_have_attribute("data-state", "succeeded", timeout=30_000)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
        [branch] = ledger.children(root)
        leaves = ledger.children(branch.id)
        assert len(leaves) == 2

        expect(top).to_have_attribute("data-focus", "true")
        middle = top.locator(f':scope > ul > li[data-tree-job="{branch.id}"]')
        expect(middle).to_have_attribute("data-state", "succeeded")
        for leaf in leaves:
            node = middle.locator(f':scope > ul > li[data-tree-job="{leaf.id}"]')
            expect(node).to_have_attribute("data-state", "succeeded")
            expect(node.locator(":scope > .rt-node a")).to_have_attribute(
                "href", f"#/jobs/{leaf.id}"
            )
            expect(node.locator(":scope > .rt-node")).to_contain_text("100 tokens")
        expect(page.locator("#run-tree li[data-tree-job]")).to_have_count(4)
        expect(page.locator('#run-tree [data-focus="true"]')).to_have_count(1)
        # The run's budget: each leaf's 100 tokens charged to the root's.
        budget = page.locator("#run-tree .rt-budget")
        expect(budget).to_have_text("budget left: tokens 800.0000")
        expect(budget).to_have_attribute("data-exhausted", "false")

        lanes = page.locator("#timeline g.lane")
        expect(lanes).to_have_count(2)
        expect(lanes.nth(0)).to_have_attribute("data-ended-by", "waiting")
        expect(lanes.nth(1)).to_have_attribute("data-ended-by", "succeeded")
        expect(page.locator('#timeline [data-wait-for="jobs"]')).to_have_count(1)
        expect(lanes.nth(0).locator('[data-mark="child_spawned"]')).to_have_count(1)

        # A leaf's link opens its page: the same tree, the leaf in focus.
        leaf = leaves[1]
        top.locator(f'li[data-tree-job="{leaf.id}"] > .rt-node a').click()
        expect(page.locator('[data-field="id"]')).to_have_text(leaf.id, timeout=10_000)
        focused = page.locator(f'#run-tree li[data-tree-job="{leaf.id}"]')
        expect(focused).to_have_attribute("data-focus", "true")
        expect(page.locator(f'#run-tree ul.rt-tree > li[data-tree-job="{root}"]')).to_have_count(1)
        expect(page.locator('#run-tree [data-focus="true"]')).to_have_count(1)
        expect(page.locator("#timeline g.lane")).to_have_count(1)
        screenshot(page.locator("#run-tree"), tmp_path, "run-tree")
        assert errors == []


def test_the_offline_page_draws_with_no_network(
    browser: Any, demo: DemoRun, tmp_path: Path
) -> None:
    """`tenure demo --timeline` and `tenure events ID --timeline --html` write one page each
    that draws the lanes and the tree opened from a file, every request but the file's refused,
    and that holds none of the job's content."""
    written = tmp_path / "job.html"
    run = tenure_cli("events", demo.job_id, "--timeline", "--html", str(written), db=demo.db)
    assert run.returncode == 0, run.stdout + run.stderr
    for path in (demo.page, written):
        text = path.read_text("utf-8")
        for content in DEMO_CONTENT:
            assert content not in text, f"{content!r} in {path.name}"
        assert "Content-Security-Policy" in text  # the browser itself refuses any request
        _check_offline_page(browser, path, demo.job_id)


def _check_offline_page(browser: Any, path: Path, job_id: str) -> None:
    """Open `path` from its file with every other request refused: it draws the demo's job."""
    expect = sync_api.expect
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    errors: list[str] = []
    requested: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def only_the_file(route: Any) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            requested.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_file)
    page.goto(path.as_uri())
    lanes = page.locator("#timeline g.lane")
    expect(lanes).to_have_count(2)
    expect(lanes.nth(0)).to_have_attribute("data-ended-by", "expired")
    expect(lanes.nth(0).locator('[data-mark="effect_refused"]')).to_have_count(1)
    expect(lanes.nth(1).locator('[data-effect-name="charge"]')).to_have_attribute(
        "data-in-doubt", "true"
    )
    node = page.locator(f'#run-tree li[data-tree-job="{job_id}"]')
    expect(node).to_have_attribute("data-focus", "true")
    expect(page.locator("#run-tree a")).to_have_count(0)  # no server to link to
    expect(page.locator("#job-id")).to_have_text(job_id)
    assert requested == [] and errors == []
    page.close()


def test_the_time_axis_reads_from_milliseconds_to_days(browser: Any, demo: DemoRun) -> None:
    """The axis picks its tick step for the span shown, and says it in the unit that reads:
    a job of 3 seconds, of 3 days, and a window zoomed to 20 ms."""
    page = browser.new_page()
    page.goto(demo.page.as_uri())
    ticks = page.evaluate(
        """(spans) => spans.map((span) => {
            const step = tenureTimeline.tickStep(span, 900);
            return [step, tenureTimeline.offsetLabel(3 * step, step)];
        })""",
        [20, 3_000, 180_000, 5 * 3_600_000, 3 * 86_400_000],
    )
    assert ticks == [
        [5, "+15 ms"],
        [500, "+1.5 s"],
        [30_000, "+1 min 30 s"],
        [3_600_000, "+3 h"],
        [43_200_000, "+1 d 12 h"],
    ]
    page.close()


@pytest.mark.failover
@pytest.mark.postgres
def test_a_failover_is_drawn_as_a_rule_across_the_lanes(browser: Any) -> None:
    """W1 claims on the primary; the primary dies and the standby is promoted; W2 claims the
    job on the new primary and completes it. The page draws the failover between the lanes."""
    expect = sync_api.expect
    with started_pair(synchronous=False) as pair, tenure.connect(pair.url(), timeout=2.0) as ledger:
        key = ledger.operations.create_tenant("acme")
        job = ledger.submit("k", {}, tenant="acme")
        w1 = ledger.claim("W1", kinds=["k"], lease_seconds=0.3)
        assert w1 is not None
        pair.wait_replayed()
        before = pair.timeline()
        pair.kill_primary()
        pair.promote()

        w2 = claim_when_promoted(ledger, "W2", "k")
        ledger.complete(w2, {"by": "W2"})
        after = pair.timeline()
        assert after == before + 1

        with LiveServer(ledger) as server:
            with server.client(key) as client:
                drawn = client.get(f"/v1/jobs/{job}/timeline").json()
            [rule] = drawn["rules"]
            assert (rule["from_timeline"], rule["to_timeline"]) == (before, after)
            errors: list[str] = []
            page = _open_dashboard(browser, server.url, key, job, errors)
            lanes = page.locator("#timeline g.lane")
            expect(lanes).to_have_count(2, timeout=10_000)
            expect(lanes.nth(0)).to_have_attribute("data-lane-token", str(w1.token))
            expect(lanes.nth(1)).to_have_attribute("data-lane-token", str(w2.token))
            drawn_rule = page.locator('#timeline [data-rule="failover"]')
            expect(drawn_rule).to_have_count(1)
            expect(drawn_rule).to_have_attribute("data-from-timeline", str(before))
            expect(drawn_rule).to_have_attribute("data-to-timeline", str(after))
            expect(drawn_rule).to_contain_text(f"failover: timeline {before} → {after}")
            assert errors == []
