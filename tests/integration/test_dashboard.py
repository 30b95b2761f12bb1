"""The dashboard in headless Chromium (Debian's, driven by Playwright): enter a key, watch a job
go queued → running → succeeded while a real worker process runs it, cancel another job."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import JobState
from tests.support.browser import apps_worker, screenshot
from tests.support.service import LiveServer

pytestmark = pytest.mark.slow

sync_api: Any = pytest.importorskip("playwright.sync_api")


def test_dashboard_shows_a_job_run_and_cancels_another(browser: object, tmp_path: Path) -> None:
    """In Chromium the dashboard lists the tenant's jobs only, shows a run's stages, and cancels."""
    expect = sync_api.expect
    db = f"sqlite:///{tmp_path / 'dash.db'}"
    with tenure.connect(db) as ledger, LiveServer(ledger) as server:
        key = ledger.operations.create_tenant("acme")
        watched = ledger.submit("long_stage", {}, tenant="acme")
        doomed = ledger.submit("nobody_runs_this", {}, tenant="acme")
        ledger.submit("long_stage", {}, tenant="globex")  # another tenant's: never shown

        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(server.url + "/")
        page.fill("#api-key", key)
        page.click("#use-key")
        rows = page.locator("#jobs tr")
        expect(rows).to_have_count(2)

        def state_of(job_id: str) -> Any:
            return page.locator(f'tr[data-job-id="{job_id}"] [data-state]')

        expect(state_of(watched)).to_have_text("queued")
        age = page.locator(f'tr[data-job-id="{watched}"] td.age')
        expect(age).to_have_text(_seconds_left())  # the time since it was submitted

        worker = apps_worker(db, tmp_path, "long_stage")
        try:
            expect(state_of(watched)).to_have_text("running", timeout=20_000)
            lease = page.locator(f'tr[data-job-id="{watched}"] [data-lease-until]')
            expect(lease).to_have_text(_seconds_left(), timeout=5_000)
            shot = screenshot(page, tmp_path, "dashboard")
            assert shot.stat().st_size > 0
            (tmp_path / "finish").write_text("")
            expect(state_of(watched)).to_have_text("succeeded", timeout=20_000)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)

        page.locator(f'tr[data-job-id="{doomed}"] button.cancel').click()
        expect(state_of(doomed)).to_have_text("cancelled", timeout=10_000)
        assert ledger.get(doomed).state is JobState.CANCELLED
        assert ledger.get(watched).state is JobState.SUCCEEDED

        page.click(f'tr[data-job-id="{watched}"] a')
        expect(page.locator("#events tr[data-event=job_succeeded]")).to_have_count(1)
        expect(page.locator("#stages tr")).to_have_count(2)
        expected = ledger.get(watched)
        result_text = json.dumps(expected.result, separators=(",", ":"))
        expect(page.locator('[data-field="result"]')).to_have_text(result_text)
        size = len(json.dumps(expected.payload, separators=(",", ":")).encode())
        expect(page.locator('[data-field="payload size"]')).to_have_text(f"{size} bytes")
        screenshot(page, tmp_path, "job")


def _seconds_left() -> object:
    import re

    return re.compile(r"^\d+(\.\d)? s$")


def test_dashboard_shows_what_a_job_waits_for_and_sends_its_signal(
    browser: object, tmp_path: Path
) -> None:
    """A job waiting for an approval is listed with what it waits for; the job page's form
    sends the signal, and a real worker process resumes the job to success."""
    expect = sync_api.expect
    db = f"sqlite:///{tmp_path / 'dash.db'}"
    with tenure.connect(db) as ledger, LiveServer(ledger) as server:
        key = ledger.operations.create_tenant("acme")
        job_id = ledger.submit("approval", {}, tenant="acme")
        worker = apps_worker(db, tmp_path, "approval")
        try:
            page = browser.new_page()  # type: ignore[attr-defined]
            page.goto(server.url + "/")
            page.fill("#api-key", key)
            page.click("#use-key")
            row = page.locator(f'tr[data-job-id="{job_id}"]')
            expect(row.locator("[data-state]")).to_have_text("waiting", timeout=20_000)
            expect(row.locator("td.waiting-for")).to_contain_text("signal approval")
            screenshot(page, tmp_path, "waiting")
            row.locator("a").click()
            expect(page.locator("#signal-name")).to_have_value("approval", timeout=10_000)
            page.fill("#signal-payload", '{"approved": true, "by": "ops"}')
            page.click("#signal-send")
            expect(page.locator("#signal-result")).to_have_text("stored", timeout=10_000)
            expect(page.locator('[data-field="state"]')).to_have_text("succeeded", timeout=20_000)
            expect(page.locator("#events tr[data-event=signal_received]")).to_have_count(1)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
        done = ledger.get(job_id)
        assert done.result["answer"] == {"approved": True, "by": "ops"}


def test_dashboard_compares_a_rollout_for_the_tenants_kinds(
    browser: object, tmp_path: Path
) -> None:
    """The rollouts view shows acme's canary (candidate against stable over acme's jobs, cost
    ratio included) and not a rollout that reaches only another tenant."""
    from tests.integration.test_rollouts import _run_by_hand

    expect = sync_api.expect
    db = f"sqlite:///{tmp_path / 'dash.db'}"
    with tenure.connect(db) as ledger, LiveServer(ledger) as server:
        key = ledger.operations.create_tenant("acme")
        ledger.operations.start_rollout("variant_echo", "v2", percent=50, max_failure_rate=0.5)
        ledger.operations.start_rollout("flaky_candidate", "m-2", tenants=["globex"])
        _run_by_hand(ledger, "variant_echo", "acme", fails=0, runs=12)
        jobs = ledger.list(kind="variant_echo", tenant="acme")
        candidates = sum(job.variant == "v2" for job in jobs)

        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(server.url + "/#/rollouts")
        page.fill("#api-key", key)
        page.click("#use-key")
        block = page.locator('.rollout[data-kind="variant_echo"]')
        expect(block.locator(".rollout-state")).to_have_text("active", timeout=10_000)
        expect(page.locator(".rollout")).to_have_count(1)
        jobs_row = block.locator('tr[data-figure="jobs"]')
        expect(jobs_row.locator(".candidate")).to_have_text(str(candidates))
        expect(jobs_row.locator(".stable")).to_have_text(str(len(jobs) - candidates))
        both_sides = 0 < candidates < len(jobs)  # a share of 12 random ids: almost always
        expect(block.locator(".cost-ratio")).to_have_text("3.00" if both_sides else "n/a")
        screenshot(page, tmp_path, "rollouts")


def test_dashboard_signed_in_with_a_bound_key_shows_its_principals_jobs_only(
    browser: object, tmp_path: Path
) -> None:
    """A key bound to user:42/ sees who it is and the jobs of user:42 and under it only."""
    expect = sync_api.expect
    with (
        tenure.connect(f"sqlite:///{tmp_path / 'bound.db'}") as ledger,
        LiveServer(ledger) as server,
    ):
        ledger.operations.create_tenant("acme")
        key = ledger.operations.issue_key("acme", principal="user:42/")
        mine = ledger.submit("nobody_runs_this", {}, tenant="acme", principal="user:42/a")
        ledger.submit("nobody_runs_this", {}, tenant="acme", principal="user:ceo")

        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(server.url + "/")
        page.fill("#api-key", key)
        page.click("#use-key")
        expect(page.locator("#who")).to_contain_text("bound to user:42/")
        expect(page.locator("#jobs tr")).to_have_count(1)
        expect(page.locator(f'tr[data-job-id="{mine}"]')).to_have_count(1)


def test_dashboard_lists_the_schedules_for_the_admin_key(browser: object, tmp_path: Path) -> None:
    """The schedules view shows each declared schedule's state, slots and counts; a tenant
    key is told the admin key lists them."""
    from tenure import keys
    from tenure.schedules import Schedule
    from tenure.service import ServiceSettings

    expect = sync_api.expect
    admin = keys.new_admin_key()
    settings = ServiceSettings(admin_key_sha256=admin.key_sha256)
    with (
        tenure.connect(f"sqlite:///{tmp_path / 'sched.db'}") as ledger,
        LiveServer(ledger, settings) as server,
    ):
        tenant_key = ledger.operations.create_tenant("acme")
        hourly = Schedule(tenure.Every(3600))
        ledger.operations.schedules.declare("hourly_report", hourly)
        ledger.operations.schedules.fire_due("hourly_report", hourly)
        ledger.operations.schedules.pause("hourly_report")

        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(server.url + "/#/schedules")
        page.fill("#api-key", admin.key)
        page.click("#use-key")
        row = page.locator('#schedules tr[data-kind="hourly_report"]')
        expect(row.locator(".schedule-state")).to_have_text("paused", timeout=10_000)
        expect(row.locator(".next-slot")).to_contain_text(":00:00")
        expect(row.locator(".missed")).to_have_text("0")
        screenshot(page, tmp_path, "schedules")

        page.click("#forget")
        page.fill("#api-key", tenant_key)
        page.click("#use-key")
        expect(page.locator("#status")).to_contain_text("admin key", timeout=10_000)
