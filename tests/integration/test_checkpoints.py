"""Versioned checkpoints, on both backends: the envelope a worker writes, migration of an old
checkpoint when a job resumes under newer code (original kept), refusal of a newer or
unmigratable one, and resume checks that pass or end the job `failed`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import JobState
from tests.support.waiting import poll


def first_attempts(app: tenure.App, version: int, *results: dict[str, Any]) -> list[str]:
    """Run one `research` job per result under `version`: each records step `fetch` with it,
    then the worker stops (leases released, jobs queued again with their checkpoints)."""

    @app.job("research", version=version)
    def research(ctx: tenure.JobContext, payload: Any) -> None:
        ctx.step("fetch", lambda: results[payload["n"]])
        ctx.cancelled.wait(30)

    ids = [app.submit("research", {"n": n}) for n in range(len(results))]
    worker = tenure.Worker(app, concurrency=len(results)).start()
    for job_id in ids:
        poll(lambda: app.ledger.get(job_id).step == 1 or None, what="a first step")  # noqa: B023
    worker.stop(grace=0)
    for job_id in ids:
        job = app.ledger.get(job_id)
        assert (job.state, job.step) == (JobState.QUEUED, 1)
        assert job.checkpoint["schema_version"] == version
    return ids


def resume(app: tenure.App, job_id: str) -> tenure.Job:
    with tenure.Worker(app, concurrency=1):
        return app.ledger.wait(job_id, 30)


def test_a_first_attempt_writes_the_envelope(make_app: Callable[..., tenure.App]) -> None:
    """A first attempt stores its checkpoint in the versioned envelope (stages, approval, …)."""
    app = make_app()

    @app.job("report", version=4)
    def report(ctx: tenure.JobContext, payload: Any) -> str:
        ctx.evidence(tenure.DocumentRef("doc:17", "v3", "0" * 64))
        ctx.step("render", lambda: {"pages": 2})
        ctx.note_approval({"by": "ops", "for": "email"})
        ctx.effect("email", lambda fx: {"sent": fx.key})
        return "ok"

    job_id = app.submit("report", {}, tenant="acme")
    with tenure.Worker(app, concurrency=1):
        job = app.ledger.wait(job_id, 30)
    envelope = job.checkpoint
    assert job.state is JobState.SUCCEEDED
    assert {k: envelope[k] for k in ("schema_version", "handler_version", "tenant", "job_id")} == {
        "schema_version": 4,
        "handler_version": 4,
        "tenant": "acme",
        "job_id": job_id,
    }
    assert [(s["position"], s["name"], s["kind"]) for s in envelope["stages"]] == [
        (0, "render", "step"),
        (1, "email", "effect"),
    ]
    assert envelope["stages"][0]["result"] == {"pages": 2}
    assert envelope["effects"] == {"email": "done"}
    assert envelope["evidence"] == [
        {"type": "document", "source": "doc:17", "version": "v3", "sha256": "0" * 64}
        | {"index_version": None}
    ]
    assert envelope["approvals"] == [{"by": "ops", "for": "email"}]


def test_an_old_checkpoint_is_migrated_on_resume_and_the_original_kept(
    make_app: Callable[..., tenure.App],
) -> None:
    """A v1 checkpoint resumed by v2 code is migrated in order, the original kept beside it."""
    (job_id,) = first_attempts(make_app(), 1, {"text": "hello", "lang": "en"})
    newer = make_app()
    ran: Counter[str] = Counter()

    @newer.checkpoint_migration("research", from_version=1)
    def text_becomes_body(checkpoint: dict[str, Any]) -> dict[str, Any]:
        for stage in checkpoint["stages"]:
            if stage["name"] == "fetch":
                stage["result"] = {"body": stage["result"].pop("text"), **stage["result"]}
        return checkpoint

    @newer.job("research", version=2)
    def research(ctx: tenure.JobContext, payload: Any) -> dict[str, Any]:
        fetched = ctx.step("fetch", lambda: ran.update(["fetch"]) or {"body": "fresh"})
        return {"got": fetched["body"], "version": ctx.checkpoint["schema_version"]}

    job = resume(newer, job_id)
    assert job.state is JobState.SUCCEEDED, job.error
    assert job.result == {"got": "hello", "version": 2}
    assert ran == Counter()  # the recorded step was replayed, not run
    original = job.checkpoint["original"]
    assert original["schema_version"] == 1
    assert original["checkpoint"]["stages"][0]["result"] == {"text": "hello", "lang": "en"}
    migrated = [e for e in newer.ledger.events(job_id) if e.type == "checkpoint_migrated"]
    assert [(e.detail["from_version"], e.detail["to_version"]) for e in migrated] == [(1, 2)]


@pytest.mark.parametrize(
    ("written", "reader", "migrations", "code"),
    [
        (2, 1, [], "checkpoint_too_new"),
        (1, 3, [1], "checkpoint_unmigratable"),
    ],
)
def test_a_checkpoint_this_code_cannot_read_fails_the_job(
    make_app: Callable[..., tenure.App],
    written: int,
    reader: int,
    migrations: list[int],
    code: str,
) -> None:
    """A checkpoint too new, or with no migration path, fails the job; the handler never runs."""
    (job_id,) = first_attempts(make_app(), written, {"text": "hello"})
    other = make_app()
    ran: Counter[str] = Counter()
    for version in migrations:
        other.checkpoint_migration("research", from_version=version)(lambda c: c)

    @other.job("research", version=reader)
    def research(ctx: tenure.JobContext, payload: Any) -> None:
        ran["handler"] += 1

    job = resume(other, job_id)
    assert (job.state, job.error["code"]) == (JobState.FAILED, code)
    assert ran == Counter()
    assert job.checkpoint["schema_version"] == written  # left as it was, not misread


def test_resume_checks_refuse_or_let_the_job_go_on(make_app: Callable[..., tenure.App]) -> None:
    """A resume check that raises ResumeRefused ends that job failed; the others resume."""
    revoked, permitted = first_attempts(make_app(), 1, {"text": "secret"}, {"text": "public"})
    seen: list[tuple[str, list[str]]] = []

    def still_permitted(ctx: tenure.JobContext, checkpoint: dict[str, Any]) -> None:
        seen.append((ctx.job_id, [s["name"] for s in checkpoint["stages"]]))
        if checkpoint["stages"][0]["result"]["text"] == "secret":
            raise tenure.ResumeRefused("permission_revoked", "the user lost access")

    later = make_app()
    ran: Counter[str] = Counter()

    @later.job("research", version=1, resume_checks=[still_permitted])
    def research(ctx: tenure.JobContext, payload: Any) -> str:
        ran["handler"] += 1
        return str(ctx.step("fetch", lambda: {"text": "again"})["text"])

    refused = resume(later, revoked)
    assert refused.state is JobState.FAILED
    assert refused.error == {"code": "permission_revoked", "message": "the user lost access"}
    events = [e for e in later.ledger.events(revoked) if e.type == "resume_refused"]
    assert [e.detail["code"] for e in events] == ["permission_revoked"]
    went_on = resume(later, permitted)
    assert (went_on.state, went_on.result) == (JobState.SUCCEEDED, "public")
    assert sorted(seen) == sorted([(revoked, ["fetch"]), (permitted, ["fetch"])])
    assert ran["handler"] == 1  # only the permitted job's handler ran

    fresh = later.submit("research", {})
    with tenure.Worker(later, concurrency=1):
        assert later.ledger.wait(fresh, 30).result == "again"
    assert len(seen) == 2  # a first attempt has nothing to resume: no checks


def test_checkpoint_migrations_are_checked_when_registered(
    make_app: Callable[..., tenure.App],
) -> None:
    """Duplicate or malformed migrations and resume checks are refused at registration."""
    app = make_app()
    app.checkpoint_migration("research", from_version=1)(lambda c: c)
    with pytest.raises(tenure.InvalidJobClass, match="twice"):
        app.checkpoint_migration("research", from_version=1)(lambda c: c)
    for bad in (0, -1, True, "1"):
        with pytest.raises(tenure.InvalidJobClass, match="from_version"):
            app.checkpoint_migration("research", from_version=bad)  # type: ignore[arg-type]
    with pytest.raises(tenure.InvalidJobClass, match="resume check"):
        app.job("x", resume_checks=["not callable"])(lambda ctx, p: None)  # type: ignore[list-item]
