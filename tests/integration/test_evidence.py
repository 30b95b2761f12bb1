"""Evidence by reference on both backends: typed references written with the lease, retrieval
whose cache never crosses tenants or permission versions, rechecks that drop revoked refs
(from a hit too), resumes refused when evidence changed, principals a child cannot widen,
and events that carry the class version and the idempotency key."""

from __future__ import annotations

import hashlib
import json
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import Allowed, CodeResult, DocumentRef, JobState, MediaRef, retrieval
from tenure.errors import InvalidArgument, LeaseLost
from tenure.ledger import lease_port
from tenure.testing.process import spawn_worker, wait_started
from tests.support.processes import ROOT
from tests.support.timing import FAST
from tests.support.tokens import claimed
from tests.support.waiting import poll


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Library:
    """A knowledge base whose documents, groups and grants the test changes as it goes."""

    def __init__(self) -> None:
        # document id -> (group, version)
        self.docs = {"handbook": ("public", "v1"), "forecast": ("finance", "v1")}
        self.grants = {"user:ana": {"public", "finance"}, "user:bo": {"public"}}
        self.grant_version = {"user:ana": 1, "user:bo": 1}
        self.revoked: set[str] = set()  # document ids withdrawn from everyone
        self.searches = 0
        self.ignore_filter = False

    def ref(self, doc: str) -> DocumentRef:
        _group, version = self.docs[doc]
        return DocumentRef(f"kb://{doc}", version, digest(doc + version))

    def register(self, app: tenure.App) -> tenure.Retriever:
        @app.retriever("kb", index_version=lambda: "ix-1")
        def search(query: str, *, allowed: list[str], limit: int) -> list[DocumentRef]:
            self.searches += 1
            return [
                self.ref(doc)
                for doc, (group, _) in sorted(self.docs.items())
                if self.ignore_filter or group in allowed
            ][:limit]

        @search.permissions
        def permissions(principal: str | None, tenant: str) -> Allowed:
            groups = sorted(self.grants.get(principal or "", set()))
            return Allowed(groups, f"{principal}@{self.grant_version.get(principal or '', 0)}")

        @search.recheck
        def recheck(principal: str | None, refs: list[DocumentRef]) -> list[DocumentRef]:
            groups = self.grants.get(principal or "", set())
            kept = []
            for ref in refs:
                doc = ref.source.removeprefix("kb://")
                if doc not in self.revoked and self.docs[doc][0] in groups:
                    kept.append(ref)
            return kept

        @search.current_version
        def current(ref: DocumentRef) -> DocumentRef | None:
            doc = ref.source.removeprefix("kb://")
            return None if doc not in self.docs else self.ref(doc)

        return search


def doc(evidence: tenure.Evidence) -> DocumentRef:
    """The document a piece of evidence refers to (every ref of these tests is one)."""
    assert isinstance(evidence.ref, DocumentRef), evidence.ref
    return evidence.ref


def ended(ledger: tenure.Ledger, job_id: str) -> tenure.Job:
    return poll(lambda: (job := ledger.get(job_id)).terminal and job, 30, "the job to end")


def retrieved(ledger: tenure.Ledger, job_id: str) -> dict[str, Any]:
    (event,) = [e for e in ledger.events(job_id) if e.type == "evidence_retrieved"]
    return event.detail


@pytest.fixture
def library() -> Library:
    return Library()


@pytest.fixture
def answering(make_app: Callable[[], tenure.App], library: Library) -> tenure.App:
    app = make_app()
    library.register(app)

    @app.job("answer", version=3, **FAST)
    def answer(ctx: tenure.JobContext, payload: Any) -> Any:
        refs = ctx.retrieve("kb", payload["q"], limit=payload.get("limit", 5))
        return [ref.source for ref in refs]

    return app


def run(app: tenure.App, *jobs: tuple[str, dict[str, Any], str, str]) -> list[tenure.Job]:
    """Submit (kind, payload, tenant, principal) jobs one after another, each run to its end."""
    done = []
    with tenure.Worker(app, concurrency=1, poll_interval=0.05):
        for kind, payload, tenant, principal in jobs:
            job_id = app.ledger.submit(kind, payload, tenant=tenant, principal=principal)
            done.append(ended(app.ledger, job_id))
    return done


def test_a_tenants_cached_result_is_never_returned_to_another_tenant(
    answering: tenure.App, library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same query and principal in two tenants: the second tenant's lookup is a miss
    (a search ran), also when every key is forced to collide; the first tenant's repeat hits."""
    monkeypatch.setattr(retrieval, "cache_key", lambda *parts: "one-key-for-everything")
    first, other, again = run(
        answering,
        ("answer", {"q": "Forecast"}, "acme", "user:bo"),
        ("answer", {"q": "forecast"}, "globex", "user:bo"),
        ("answer", {"q": "FORECAST  "}, "acme", "user:bo"),
    )
    assert [retrieved(answering.ledger, j.id)["cache"] for j in (first, other, again)] == [
        "miss",
        "miss",
        "hit",
    ]
    assert library.searches == 2
    assert first.result == other.result == again.result == ["kb://handbook"]
    # The query is content: no event, of any job, holds its words.
    for job in (first, other, again):
        assert "forecast" not in repr(answering.ledger.events(job.id)).lower()


def test_a_permission_version_bump_is_a_miss(answering: tenure.App, library: Library) -> None:
    """A hit while the grants stand; a new permission version (a group taken away) misses and
    returns only what is allowed now."""
    first, hit = run(
        answering,
        ("answer", {"q": "plans"}, "acme", "user:ana"),
        ("answer", {"q": "plans"}, "acme", "user:ana"),
    )
    library.grants["user:ana"] = {"public"}
    library.grant_version["user:ana"] += 1
    (after,) = run(answering, ("answer", {"q": "plans"}, "acme", "user:ana"))
    assert [retrieved(answering.ledger, j.id)["cache"] for j in (first, hit, after)] == [
        "miss",
        "hit",
        "miss",
    ]
    assert first.result == hit.result == ["kb://forecast", "kb://handbook"]
    assert after.result == ["kb://handbook"]


def test_a_revoked_document_is_dropped_from_a_cache_hit(
    answering: tenure.App, library: Library
) -> None:
    """A document withdrawn after it was cached (no permission version changed): the hit is
    rechecked, the ref dropped, the job's events and the retrieval totals say so, and it is
    not recorded as evidence."""
    (first,) = run(answering, ("answer", {"q": "plans"}, "acme", "user:ana"))
    library.revoked.add("forecast")
    (hit,) = run(answering, ("answer", {"q": "plans"}, "acme", "user:ana"))
    detail = retrieved(answering.ledger, hit.id)
    assert (detail["cache"], detail["refs"], detail["dropped"]) == ("hit", 1, 1)
    assert detail["dropped_sources"] == ["kb://forecast"]
    assert hit.result == ["kb://handbook"]
    assert [doc(e).source for e in answering.ledger.get(hit.id).evidence] == ["kb://handbook"]
    assert [doc(e).source for e in answering.ledger.get(first.id).evidence] == [
        "kb://forecast",
        "kb://handbook",
    ]
    (totals,) = answering.ledger.operations.retrieval_totals()
    assert (totals.retriever, totals.hits, totals.misses, totals.dropped) == ("kb", 1, 1, 1)


def test_a_search_that_ignores_the_filter_is_caught_by_the_recheck(
    answering: tenure.App, library: Library
) -> None:
    """A buggy search returns a document outside the principal's groups: the recheck drops it
    before the handler sees it, and the event names it."""
    library.ignore_filter = True
    (job,) = run(answering, ("answer", {"q": "plans"}, "acme", "user:bo"))
    assert job.result == ["kb://handbook"]
    detail = retrieved(answering.ledger, job.id)
    assert (detail["dropped"], detail["dropped_sources"]) == (1, ["kb://forecast"])


def test_every_reference_type_is_recorded_and_shown_in_order(
    make_app: Callable[[], tenure.App],
) -> None:
    """ctx.evidence with each type: `Job.evidence`, `ledger.evidence` and the checkpoint
    show them in order; a reference recorded again (a retried attempt) is one row."""
    app = make_app()
    code = CodeResult(digest("diff"), "git:abc123", 12, 0, "python -m pytest -q", "s3://log/1")
    media = MediaRef("s3://scans/1.png", digest("png"), "tesseract", "5.3.0")
    document = DocumentRef("kb://handbook", "v1", digest("handbook"))

    @app.job("agent", **FAST)
    def agent(ctx: tenure.JobContext, payload: Any) -> Any:
        for ref in (document, code, media, document):
            ctx.evidence(ref)
        return len(ctx.checkpoint["evidence"])

    (job,) = run(app, ("agent", {}, "default", "user:ana"))
    assert job.result == 4
    assert [e.ref for e in job.evidence] == [document, code, media]
    assert [e.ref for e in app.ledger.evidence(job.id)] == [document, code, media]
    assert {e.token for e in job.evidence} == {job.token}


def test_evidence_written_by_a_stale_token_is_refused(
    connect: Callable[..., tenure.Ledger],
) -> None:
    """The first owner's lease expires and a second owner claims the job: the first owner's
    evidence is refused (LeaseLost, result_rejected) and nothing of it is stored."""
    ledger = connect()
    job_id = ledger.submit("tool", {})
    stale = ledger.claim("owner-1", lease_seconds=0.5)
    assert stale is not None
    fresh = poll(lambda: ledger.claim("owner-2", lease_seconds=30), 10, "a reclaim")
    assert fresh.token > stale.token
    with pytest.raises(LeaseLost):
        lease_port(ledger).record_evidence(stale, DocumentRef("kb://a", "v1", digest("a")))
    lease_port(ledger).record_evidence(fresh, DocumentRef("kb://b", "v1", digest("b")))
    assert [(doc(e).source, e.token) for e in ledger.evidence(job_id)] == [("kb://b", fresh.token)]
    rejected = [e for e in ledger.events(job_id) if e.type == "result_rejected"]
    assert [e.detail["operation"] for e in rejected] == ["record_evidence"]


def test_a_resume_is_refused_when_a_document_changed_or_was_revoked(
    make_app: Callable[[], tenure.App], library: Library
) -> None:
    """A job retrieves, records a stage and waits for approval; the document changes (or is
    withdrawn) meanwhile: on resume `evidence_still_valid` fails the job with
    `evidence_changed` (or `evidence_revoked`); untouched evidence resumes."""
    app = make_app()
    library.register(app)

    @app.job("brief", resume_checks=[tenure.checks.evidence_still_valid], **FAST)
    def brief(ctx: tenure.JobContext, payload: Any) -> Any:
        refs = ctx.retrieve("kb", "plans")
        ctx.step("draft", lambda: len(refs))
        ctx.wait_for("approve")
        return "sent"

    ledger = app.ledger
    with tenure.Worker(app, concurrency=3, poll_interval=0.05):
        ids = [ledger.submit("brief", {}, principal="user:ana") for _ in range(3)]
        for job_id in ids:
            poll(lambda: ledger.get(job_id).state is JobState.WAITING, 20, "the wait")  # noqa: B023
        library.docs["forecast"] = ("finance", "v2")
        changed = ended_after_signal(ledger, ids[0])
        library.docs["forecast"] = ("finance", "v1")
        library.revoked.add("forecast")
        revoked = ended_after_signal(ledger, ids[1])
        library.revoked.clear()
        fine = ended_after_signal(ledger, ids[2])
    assert (changed.state, changed.error["code"]) == (JobState.FAILED, "evidence_changed")
    assert "kb://forecast" in changed.error["message"]
    assert (revoked.state, revoked.error["code"]) == (JobState.FAILED, "evidence_revoked")
    assert (fine.state, fine.result) == (JobState.SUCCEEDED, "sent")


def ended_after_signal(ledger: tenure.Ledger, job_id: str) -> tenure.Job:
    assert ledger.signal(job_id, "approve", True)
    return ended(ledger, job_id)


def test_a_child_acts_for_its_parent_or_narrower_never_wider(
    make_app: Callable[[], tenure.App],
) -> None:
    """A child inherits its parent's principal; a narrower one passes the app's narrowing
    function; a wider one fails the parent (`principal_widened`) and spawns nothing."""
    app = make_app()

    @app.narrows
    def narrows(parent: str | None, child: str, tenant: str) -> bool:
        return parent is not None and child.startswith(parent + "/")

    @app.job("child", **FAST)
    def child(ctx: tenure.JobContext, payload: Any) -> Any:
        return ctx.principal

    @app.job("parent", spawns=["child"], **FAST)
    def parent(ctx: tenure.JobContext, payload: Any) -> Any:
        kid = ctx.spawn("child", {}, principal=payload.get("as"))
        return ctx.wait_job(kid)

    inherit, narrower, wider = run(
        app,
        ("parent", {}, "acme", "user:ana"),
        ("parent", {"as": "user:ana/reports"}, "acme", "user:ana"),
        ("parent", {"as": "user:admin"}, "acme", "user:ana"),
    )
    assert inherit.result == "user:ana"
    assert narrower.result == "user:ana/reports"
    assert (wider.state, wider.error["code"]) == (JobState.FAILED, "principal_widened")
    assert app.ledger.children(wider.id) == []
    children = app.ledger.children(narrower.id)
    assert [(c.principal, c.tenant) for c in children] == [("user:ana/reports", "acme")]


def test_without_a_narrowing_function_a_child_may_not_name_another_principal(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.job("child", **FAST)
    def child(ctx: tenure.JobContext, payload: Any) -> Any:
        return None

    @app.job("parent", spawns=["child"], **FAST)
    def parent(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.spawn("child", {}, principal="user:ana/reports")

    (job,) = run(app, ("parent", {}, "acme", "user:ana"))
    assert (job.state, job.error["code"]) == (JobState.FAILED, "principal_widened")
    assert "no @app.narrows" in job.error["message"]


def test_events_carry_the_class_version_and_the_idempotency_key(
    make_app: Callable[[], tenure.App],
) -> None:
    """Every event of a keyed job carries its class version and key; an effect's events
    carry the effect's key instead."""
    app = make_app()

    @app.job("mail", version=7, **FAST)
    def mail(ctx: tenure.JobContext, payload: Any) -> Any:
        ctx.step("draft", lambda: "text")
        return ctx.effect("send", lambda fx: fx.key)

    ledger = app.ledger
    job_id = ledger.submit("mail", {}, idempotency_key="order-9")
    with tenure.Worker(app, concurrency=1, poll_interval=0.05):
        job = ended(ledger, job_id)
    events = ledger.events(job_id)
    assert job.version == 7 and {e.version for e in events} == {7}
    effect_key = job.result
    by_type = {(e.type, e.idempotency_key) for e in events}
    assert ("tool_request_started", effect_key) in by_type
    assert ("job_submitted", "order-9") in by_type
    assert ("job_succeeded", "order-9") in by_type
    step_done = [e for e in events if e.type == "step_done"]
    assert [e.idempotency_key for e in step_done] == ["order-9", effect_key]


def test_bad_references_principals_and_retrievals_are_refused_with_nothing_written(
    answering: tenure.App, library: Library
) -> None:
    """Malformed references, unknown retrievers, limits out of 1-100, principals too long or
    with control characters: clear errors, and nothing recorded."""
    for make in (
        lambda: DocumentRef("", "v1", digest("a")),
        lambda: DocumentRef("kb://a", "v1", "not-a-digest"),
        lambda: DocumentRef("kb://a", "v1", digest("a").upper()),
        lambda: CodeResult(digest("d"), "git:1", -1, 0, "pytest"),
        lambda: MediaRef("s3://x\x1b[31m", digest("m"), "ocr", "1"),
    ):
        with pytest.raises(InvalidArgument):
            make()
    ledger = answering.ledger
    before = len(ledger.list(limit=100))
    for principal in ("x" * 257, "user:\n42", "user:\x00", "", 42):
        with pytest.raises(InvalidArgument):
            ledger.submit("answer", {"q": "a"}, principal=principal)  # type: ignore[arg-type]
    assert len(ledger.list(limit=100)) == before
    errors: list[str] = []

    @answering.job("probe", **FAST)
    def probe(ctx: tenure.JobContext, payload: Any) -> Any:
        for name, query, limit in (("nope", "a", 5), ("kb", "a", 0), ("kb", "a", 101)):
            try:
                ctx.retrieve(name, query, limit)
            except InvalidArgument as exc:
                errors.append(str(exc))
        for bad in ("kb://a", {"source": "kb://a"}):
            try:
                ctx.evidence(bad)  # type: ignore[arg-type]
            except InvalidArgument as exc:
                errors.append(str(exc))
        return None

    (job,) = run(answering, ("probe", {}, "acme", "user:ana"))
    assert job.state is JobState.SUCCEEDED
    assert len(errors) == 5
    assert "no retriever is named 'nope'" in errors[0]
    assert "at least 1" in errors[1] and "at most 100" in errors[2]
    assert ledger.evidence(job.id) == []
    assert not [e for e in ledger.events(job.id) if e.type == "evidence_retrieved"]


def test_the_deprecated_note_evidence_still_notes_a_string(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()
    caught: list[str] = []

    @app.job("legacy", **FAST)
    def legacy(ctx: tenure.JobContext, payload: Any) -> Any:
        import warnings

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ctx.note_evidence("doc:17@v3")
        caught.extend(str(w.category.__name__) for w in seen)
        ctx.step("save", lambda: None)
        return ctx.checkpoint["evidence"]

    (job,) = run(app, ("legacy", {}, "default", "user:ana"))
    assert job.result == ["doc:17@v3"]
    assert caught == ["DeprecationWarning"]


def test_purge_removes_cache_entries_past_their_age(
    answering: tenure.App, library: Library
) -> None:
    run(answering, ("answer", {"q": "plans"}, "acme", "user:ana"))
    ledger = answering.ledger
    assert ledger.operations.purge(3600).retrievals == 0
    # Once the entry is older than the cutoff by the database's clock, a purge removes it.
    poll(lambda: ledger.operations.purge(0.01).retrievals == 1, 10, "the cache entry to be purged")
    (again,) = run(answering, ("answer", {"q": "plans"}, "acme", "user:ana"))
    assert retrieved(ledger, again.id)["cache"] == "miss"


def test_a_retriever_without_permission_functions_is_refused(
    make_app: Callable[[], tenure.App],
) -> None:
    app = make_app()

    @app.retriever("bare", index_version=lambda: "1")
    def bare(query: str, *, allowed: Any, limit: int) -> list[DocumentRef]:
        return []

    failures: list[str] = []
    done = threading.Event()

    @app.job("use", **FAST)
    def use(ctx: tenure.JobContext, payload: Any) -> Any:
        try:
            ctx.retrieve("bare", "q")
        except tenure.InvalidJobClass as exc:
            failures.append(str(exc))
        done.set()

    run(app, ("use", {}, "default", "user:ana"))
    assert done.is_set() and "no @bare.permissions" in failures[0]


@pytest.mark.slow
def test_a_worker_killed_after_retrieving_resumes_only_if_its_evidence_holds(
    db_url: str, tmp_path: Path
) -> None:
    """Real processes: worker A retrieves (its evidence written with its claim's token) and is
    SIGKILLed inside the next step. A document of one job changes meanwhile: worker B refuses
    that resume (`evidence_changed`); the other job resumes and its evidence is B's token."""
    (tmp_path / "library.json").write_text(json.dumps({"alpha": "v1", "beta": "v1"}))
    ledger = tenure.connect(db_url)
    env = {"TENURE_TEST_KILL_AT": "cite_drafting"}
    try:
        changed, kept = (ledger.submit("cite", {}, principal="user:ana") for _ in range(2))
        doomed = start_worker(db_url, tmp_path, "A", env)
        poll(lambda: len(list(tmp_path.glob(f"at-cite_drafting-{doomed.pid}"))) == 1, 30, "A")
        # A is inside one job's draft; the other job waits for a slot (concurrency 1).
        first = next(j for j in (changed, kept) if ledger.get(j).step == 0
                     and ledger.stages(j))  # fmt: skip
        (a_token,) = claimed(ledger, first)
        assert [(doc(e).source, e.token) for e in ledger.evidence(first)] == [
            ("lib://alpha", a_token),
            ("lib://beta", a_token),
        ]
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        (tmp_path / "library.json").write_text(json.dumps({"alpha": "v2", "beta": "v1"}))
        (tmp_path / "release-cite_drafting").touch()
        rescuer = start_worker(db_url, tmp_path, "B", {})
        try:
            refused = ended(ledger, first)
            other = ended(ledger, kept if first == changed else changed)
        finally:
            rescuer.send_signal(signal.SIGTERM)
            rescuer.wait(15)
        assert (refused.state, refused.error["code"]) == (JobState.FAILED, "evidence_changed")
        assert "lib://alpha" in refused.error["message"]
        assert other.state is JobState.SUCCEEDED
        assert other.result == ["lib://alpha", "lib://beta"]
        # Its retrieval ran after the change: a new index version, a miss, the new version.
        assert [(doc(e).source, doc(e).version, e.token) for e in other.evidence] == [
            ("lib://alpha", "v2", other.token),
            ("lib://beta", "v1", other.token),
        ]
    finally:
        ledger.close()


def start_worker(db_url: str, folder: Path, name: str, env: dict[str, str]) -> Any:
    log = folder / f"{name}.log"
    proc = spawn_worker(
        "tests.support.apps:app",
        db_url,
        log,
        "--poll",
        "0.05",
        "--concurrency",
        "1",
        env={"PYTHONPATH": str(ROOT), "TENURE_TEST_DIR": str(folder), **env},
        cwd=ROOT,
    )
    wait_started(proc, log)
    return proc
