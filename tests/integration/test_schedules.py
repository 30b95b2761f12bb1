"""Schedules on both backends: an hour of minute slots fired by six ledgers at once on a fake
clock (one job per slot), missed slots after downtime, a pass that died between its submit and
its write, pause, resume and trigger kept in the database, and three worker processes firing a
one-second schedule (one job per slot, no slot left out)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import tenure
from tenure import keys as api_keys
from tenure.schedules import slot_key
from tenure.service import ServiceSettings
from tests.support.cli import tenure_cli
from tests.support.service import LiveServer
from tests.support.waiting import poll
from tests.support.workers import LoggedWorker

pytest.importorskip("croniter")
T0 = datetime(2030, 1, 7, 9, 0, 30, tzinfo=UTC)


def scheduled(make_app: Callable[[], tenure.App], **options: object) -> tenure.App:
    app = make_app()
    app.job("report", schedule="* * * * *", timezone="Asia/Almaty", **options)(  # type: ignore[arg-type]
        lambda ctx, payload: payload
    )
    return app


def slot_keys(ledger: tenure.Ledger, kind: str = "report") -> list[str]:
    jobs = ledger.list(kind=kind, limit=1000)
    return sorted(str(job.idempotency_key) for job in jobs)


def minute_slots(first: datetime, last: datetime) -> list[datetime]:
    slots, slot = [], first.replace(second=0)
    while slot <= last:
        slots.append(slot)
        slot += timedelta(minutes=1)
    return slots


def test_an_hour_of_slots_fired_by_six_ledgers_at_once_makes_one_job_per_slot(
    make_app: Callable[[], tenure.App], db_url: str
) -> None:
    app = scheduled(make_app)
    schedule = app.job_classes["report"].schedule
    assert schedule is not None
    app.ledger.operations.schedules.declare("report", schedule)
    moments = [T0 + timedelta(seconds=s) for s in range(0, 3600, 15)]
    errors: list[BaseException] = []

    def fire(seed: int) -> None:
        ledger = tenure.connect(db_url)
        rng = random.Random(seed)
        try:
            for moment in moments:
                late = moment + timedelta(seconds=rng.uniform(0, 10))
                ledger.operations.schedules.fire_due("report", schedule, now=late)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            ledger.close()

    threads = [threading.Thread(target=fire, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    fired = slot_keys(app.ledger)
    expected = minute_slots(T0, moments[-1])
    assert fired == sorted(slot_key("report", slot) for slot in expected)
    (row,) = app.ledger.operations.schedules.list()
    assert (row.fired, row.missed, row.last_slot) == (len(expected), 0, expected[-1])


def test_missed_slots_follow_the_policy_and_a_pass_that_died_left_one_job(
    make_app: Callable[[], tenure.App],
) -> None:
    app = scheduled(make_app, missed_slots="all", max_catch_up=3)
    schedule = app.job_classes["report"].schedule
    assert schedule is not None
    schedules = app.ledger.operations.schedules
    schedules.declare("report", schedule)
    schedules.fire_due("report", schedule, now=T0)
    # A pass submitted the 09:10 slot's job and died before it wrote its advance.
    app.ledger.submit(
        "report", None, idempotency_key=slot_key("report", T0.replace(minute=10, second=0))
    )
    after = schedules.fire_due("report", schedule, now=T0 + timedelta(minutes=10))
    assert len(after.jobs) == 4 and after.missed == 6  # 09:07-09:09 late, 09:10 on time
    assert slot_keys(app.ledger) == sorted(
        slot_key("report", T0.replace(minute=m, second=0)) for m in (0, 7, 8, 9, 10)
    )
    (row,) = schedules.list()
    assert (row.fired, row.missed) == (5, 6)
    # The first job of the pass after the gap says what was missed; each slot's job its slot.
    events = app.ledger.events(after.jobs[0])
    said = {e.type: e.detail for e in events}
    missed = {"missed": 6, "since": "2030-01-07T09:00:00Z", "policy": "all"}
    assert missed.items() <= said[tenure.EventType.SCHEDULE_MISSED].items()
    fired = {"slot": "2030-01-07T09:07:00Z", "run_now": False}
    assert fired.items() <= said[tenure.EventType.SCHEDULE_FIRED].items()


def test_pause_resume_and_trigger_are_kept_in_the_database(
    make_app: Callable[[], tenure.App], db_url: str
) -> None:
    app = scheduled(make_app, missed_slots="skip")
    schedule = app.job_classes["report"].schedule
    assert schedule is not None
    schedules = app.ledger.operations.schedules
    schedules.declare("report", schedule)
    schedules.fire_due("report", schedule, now=T0)
    paused = tenure_cli("schedule", "pause", "report", db=db_url)
    assert paused.returncode == 0, paused.stderr
    assert schedules.fire_due("report", schedule, now=T0 + timedelta(minutes=5)).jobs == ()
    assert tenure_cli("schedule", "resume", "report", db=db_url).returncode == 0
    tenure_cli("schedule", "trigger", "report", db=db_url)
    back = schedules.fire_due("report", schedule, now=T0 + timedelta(minutes=5, seconds=20))
    # The run asked for, and the on-time 09:05 slot; 09:01-09:04 passed while paused.
    assert len(back.jobs) == 2 and back.missed == 4
    assert sum(key.startswith("schedule-run:report:") for key in slot_keys(app.ledger)) == 1
    assert schedules.list()[0].triggered_at is None  # taken once
    listed = tenure_cli("schedule", "list", db=db_url)
    assert "report" in listed.stdout and "cron * * * * * (Asia/Almaty)" in listed.stdout
    unknown = tenure_cli("schedule", "trigger", "nosuch", db=db_url)
    assert unknown.returncode == 2 and "no schedule for kind 'nosuch'" in unknown.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"schedule": "61 * * * *"}, "not a cron expression"),
        ({"schedule": "0 3 * * *", "timezone": "Europe/Astana"}, "no time zone"),
        ({"schedule": 60}, "a cron expression or tenure.Every"),
        ({"schedule": "0 3 * * *", "missed_slots": "never"}, "missed_slots"),
        ({"schedule": "0 3 * * *", "schedule_payload": float("nan")}, "schedule_payload"),
        ({"schedule": "0 0 30 2 *"}, "never fires"),
        ({"timezone": "Asia/Almaty"}, "apply only with schedule"),
        ({"missed_slots": "all"}, "apply only with schedule"),
    ],
)
def test_bad_schedules_are_refused_where_they_are_declared(
    make_app: Callable[[], tenure.App], options: dict[str, object], message: str
) -> None:
    app = make_app()
    with pytest.raises(tenure.InvalidJobClass, match=message):
        app.job("bad", **options)(lambda ctx, payload: None)  # type: ignore[arg-type]
    assert "bad" not in app.job_classes


@pytest.mark.slow
def test_three_worker_processes_fire_each_slot_once(db_url: str, tmp_path: Path) -> None:
    workers = [
        LoggedWorker("tests.support.scheduled_app:app", db_url, tmp_path / str(n))
        for n in range(3)
        if (tmp_path / str(n)).mkdir() is None
    ]
    ledger = tenure.connect(db_url)
    try:
        poll(lambda: len(ledger.list(kind="tick", limit=100)) >= 6, 30, "six ticks")
    finally:
        for worker in workers:
            worker.stop()
    ticks = ledger.list(kind="tick", limit=1000)
    slots = sorted(datetime.fromisoformat(job.payload["slot"]) for job in ticks)
    assert len(set(slots)) == len(slots)  # one job per slot
    assert slots == [slots[0] + timedelta(seconds=n) for n in range(len(slots))]  # none left out
    assert all(
        job.idempotency_key == slot_key("tick", datetime.fromisoformat(job.payload["slot"]))
        for job in ticks
    )
    (row,) = ledger.operations.schedules.list()
    assert row.fired == len(slots)
    ledger.close()


def test_a_scheduler_killed_in_the_middle_of_a_slot_leaves_it_to_the_next(
    db_url: str, tmp_path: Path
) -> None:
    """A worker process SIGKILLed inside its pass (the slot reached, its job not submitted):
    the next worker fires that slot and the ones after it, one job each, none left out."""
    stalled, fresh = tmp_path / "stalled", tmp_path / "fresh"
    stalled.mkdir(), fresh.mkdir()
    first = LoggedWorker("tests.support.stalled_schedule_app:app", db_url, stalled)
    ledger = tenure.connect(db_url)
    poll(lambda: len(ledger.list(kind="tock", limit=100)) >= 2, 30, "two tocks")
    (stalled / "stall").write_text("")
    in_pass = poll(lambda: (stalled / "in-pass").exists() and (stalled / "in-pass"), 30, "a pass")
    slot = datetime.fromisoformat(in_pass.read_text())
    first.proc.kill()
    assert first.proc.wait(15) == -9
    before = sorted(
        datetime.fromisoformat(job.payload["slot"]) for job in ledger.list(kind="tock", limit=100)
    )
    assert before[-1] < slot  # killed before it submitted the slot's job
    second = LoggedWorker("tests.support.stalled_schedule_app:app", db_url, fresh)
    try:
        poll(lambda: len(ledger.list(kind="tock", limit=100)) >= len(before) + 4, 30, "tocks")
    finally:
        second.stop()
    slots = sorted(
        datetime.fromisoformat(job.payload["slot"]) for job in ledger.list(kind="tock", limit=1000)
    )
    assert slot in slots  # the slot the killed pass held was fired by the next worker
    assert len(set(slots)) == len(slots)
    assert slots == [slots[0] + timedelta(seconds=n) for n in range(len(slots))]
    ledger.close()


def test_the_admin_key_lists_the_schedules_over_http(make_app: Callable[[], tenure.App]) -> None:
    app = scheduled(make_app)
    schedule = app.job_classes["report"].schedule
    assert schedule is not None
    app.ledger.operations.schedules.declare("report", schedule)
    app.ledger.operations.schedules.fire_due("report", schedule, now=T0)
    admin = api_keys.new_admin_key()
    tenant_key = app.ledger.operations.create_tenant("acme")
    with LiveServer(app.ledger, ServiceSettings(admin_key_sha256=admin.key_sha256)) as server:
        with server.client(admin.key) as http:
            (listed,) = http.get("/v1/schedules").json()["schedules"]
            metrics = http.get("/metrics").text
        with server.client(tenant_key) as http:
            refused = http.get("/v1/schedules")
    assert listed["kind"] == "report" and listed["fired"] == 1 and not listed["paused"]
    assert listed["last_slot"].startswith("2030-01-07T09:00:00")
    assert listed["description"] == "cron * * * * * (Asia/Almaty), missed: skip"
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert 'tenure_schedule_fired_total{kind="report"} 1.0' in metrics
    assert 'tenure_schedule_missed_total{kind="report"} 0.0' in metrics


def test_a_fractional_interval_advances_and_fires_each_slot_once(
    make_app: Callable[[], tenure.App],
) -> None:
    """Slots at fractions of a second survive the store's round trip (SQLite keeps epoch
    seconds as floats): each pass moves on from the last, none fires a slot twice."""
    app = make_app()
    app.job("blink", schedule=tenure.Every(2.3))(lambda ctx, payload: None)
    schedule = app.job_classes["blink"].schedule
    assert schedule is not None
    schedules = app.ledger.operations.schedules
    schedules.declare("blink", schedule)
    fired = [
        len(schedules.fire_due("blink", schedule, now=T0 + timedelta(seconds=s)).jobs)
        for s in (0, 0, 2.3, 2.3, 4.7, 9.3)
    ]
    assert fired == [1, 0, 1, 0, 1, 2]
    (row,) = schedules.list()
    assert row.fired == 5 and len(app.ledger.list(kind="blink")) == 5


def test_a_scheduled_kinds_name_leaves_room_for_its_keys(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()
    with pytest.raises(tenure.InvalidJobClass, match="at most 159 characters"):
        app.job("k" * 160, schedule=tenure.Every(60))(lambda ctx, payload: None)
    app.job("k" * 159, schedule=tenure.Every(60))(lambda ctx, payload: None)


def test_a_trigger_runs_a_paused_schedule_once(make_app: Callable[[], tenure.App]) -> None:
    app = scheduled(make_app)
    schedule = app.job_classes["report"].schedule
    assert schedule is not None
    schedules = app.ledger.operations.schedules
    schedules.declare("report", schedule)
    schedules.pause("report")
    schedules.trigger("report")
    schedules.trigger("report")  # twice before a pass
    first = schedules.fire_due("report", schedule, now=T0)
    again = schedules.fire_due("report", schedule, now=T0 + timedelta(minutes=1))
    assert (len(first.jobs), again.jobs) == (1, ())
    assert slot_keys(app.ledger)[0].startswith("schedule-run:report:")


def test_a_payload_function_that_raises_stops_neither_the_worker_nor_the_other_kinds(
    make_app: Callable[[], tenure.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()

    def broken(slot: datetime) -> dict[str, str]:
        raise KeyError("not in this slot")

    app.job("broken", schedule=tenure.Every(1), schedule_payload=broken)(lambda c, p: None)
    app.job("fine", schedule=tenure.Every(1))(lambda ctx, payload: None)
    with tenure.Worker(app, poll_interval=0.05) as worker:
        poll(lambda: len(app.ledger.list(kind="fine")) >= 2, 20, "two slots of the fine kind")
        assert worker.crashed is None  # the scheduler thread lives on
    assert app.ledger.list(kind="broken") == []
    failed = [r for r in caplog.records if r.getMessage().startswith("schedule_pass_failed")]
    assert failed and all("kind=broken" in r.getMessage() for r in failed)
    assert all("not in this slot" not in r.getMessage() for r in failed)  # no content


def test_a_jittered_slots_job_waits_for_its_share(make_app: Callable[[], tenure.App]) -> None:
    app = make_app()
    app.job("spread", schedule=tenure.Every(3600), schedule_jitter=900)(lambda c, p: None)
    schedule = app.job_classes["spread"].schedule
    assert schedule is not None
    schedules = app.ledger.operations.schedules
    schedules.declare("spread", schedule)
    (job_id,) = schedules.fire_due("spread", schedule, now=T0).jobs
    slot = T0.replace(minute=0, second=0)
    assert app.ledger.get(job_id).run_after == schedule.start_of(slot) > slot


def test_firing_something_that_is_not_a_schedule_is_refused(db_url: str) -> None:
    with tenure.connect(db_url) as ledger:
        with pytest.raises(tenure.InvalidArgument, match="must be a tenure Schedule"):
            ledger.operations.schedules.fire_due("report", "* * * * *")  # type: ignore[arg-type]
        with pytest.raises(tenure.InvalidArgument, match="kind"):
            ledger.operations.schedules.fire_all({"bad\x00kind": None})  # type: ignore[dict-item]
        assert ledger.operations.schedules.list() == []
