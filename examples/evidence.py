"""Evidence by reference, end to end (retrieval filtered by permission, and the provenance of
every answer):

    python examples/evidence.py [--db URL]    # default: SQLite files in a temporary folder

A small knowledge base in a real full-text index (SQLite FTS5 beside the SQLite ledger; with
`--db postgresql://…`, PostgreSQL full-text search in that database), two principals with
different rights, and jobs that retrieve through it. It shows, and checks (exit 0 only if all
hold): a cached result is shared by neither another permission set nor another tenant; a
permission revoked between the search and the return drops the ref; the same query after
the revocation is a miss, not a stale hit; a resume is refused because a document changed;
a code job records a CodeResult with its diff's digest and a real test run's counts; a media
job records a MediaRef with its processor's version. Every reference is shown as stored.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import platform
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import tenure
from tenure import Allowed, CodeResult, DocumentRef, MediaRef

DOCUMENTS = [  # id, group, version, text
    ("handbook", "public", "v4", "Travel policy: book economy, file the expense report in a week."),
    ("q3-forecast", "finance", "v2", "Revenue forecast for Q3: growth of eight percent."),
    ("pricing", "public", "v1", "Public pricing: the revenue plan has three tiers."),
]
GRANTS = {"user:ana": ["finance", "public"], "user:bo": ["public"]}


def sha256(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


class KnowledgeBase:
    """Documents, grants (with a version per principal) and a full-text index."""

    engine = ""
    after_search: Callable[[], None] | None = None  # the race the example stages

    def search(self, query: str, groups: list[str], limit: int) -> list[tuple[str, str, str]]:
        rows = self._search(" OR ".join(re.findall(r"\w+", query)), query, groups, limit)
        if self.after_search is not None:
            hook, self.after_search = self.after_search, None
            hook()
        return rows

    def ref(self, doc: str) -> DocumentRef | None:
        found = self._rows("SELECT version, body FROM kb_docs WHERE id = {}", doc)
        return DocumentRef(f"kb://{doc}", found[0][0], sha256(found[0][1])) if found else None

    def groups(self, principal: str | None) -> tuple[list[str], int]:
        rows = self._rows("SELECT grp FROM kb_grants WHERE principal = {}", principal)
        version = self._rows("SELECT version FROM kb_acl WHERE principal = {}", principal)
        return sorted(row[0] for row in rows), version[0][0] if version else 0

    def may_read(self, principal: str | None, doc: str) -> bool:
        sql = "SELECT 1 FROM kb_docs d JOIN kb_grants g ON g.grp = d.grp AND g.principal = {}"
        return bool(self._rows(sql + " WHERE d.id = {}", principal, doc))

    def revoke(self, principal: str, group: str) -> None:
        self._write("DELETE FROM kb_grants WHERE principal = {} AND grp = {}", principal, group)
        self._write("UPDATE kb_acl SET version = version + 1 WHERE principal = {}", principal)

    def edit(self, doc: str, version: str, text: str) -> None:
        self._write("UPDATE kb_docs SET version = {}, body = {} WHERE id = {}", version, text, doc)

    def load(self) -> None:
        for doc, group, version, text in DOCUMENTS:
            self._write("INSERT INTO kb_docs (id, grp, version, body) VALUES ({}, {}, {}, {})",
                        doc, group, version, text)  # fmt: skip
        for principal, groups in GRANTS.items():
            self._write("INSERT INTO kb_acl (principal, version) VALUES ({}, 1)", principal)
            for group in groups:
                self._write("INSERT INTO kb_grants VALUES ({}, {})", principal, group)

    def _search(self, words: str, query: str, groups: list[str], limit: int) -> list[Any]:
        raise NotImplementedError

    def _rows(self, sql: str, *args: Any) -> list[Any]:
        raise NotImplementedError

    def _write(self, sql: str, *args: Any) -> None:
        raise NotImplementedError


class SqliteKnowledgeBase(KnowledgeBase):
    engine = "SQLite FTS5"

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as db:
            db.executescript(
                "CREATE TABLE kb_docs (id TEXT PRIMARY KEY, grp TEXT, version TEXT, body TEXT);"
                "CREATE VIRTUAL TABLE kb_index USING fts5(body, content='kb_docs',"
                " content_rowid='rowid');"
                "CREATE TRIGGER kb_docs_ai AFTER INSERT ON kb_docs BEGIN INSERT INTO kb_index"
                " (rowid, body) VALUES (new.rowid, new.body); END;"
                "CREATE TRIGGER kb_docs_au AFTER UPDATE ON kb_docs BEGIN INSERT INTO kb_index"
                " (kb_index, rowid, body) VALUES ('delete', old.rowid, old.body); INSERT INTO"
                " kb_index (rowid, body) VALUES (new.rowid, new.body); END;"
                "CREATE TABLE kb_grants (principal TEXT, grp TEXT);"
                "CREATE TABLE kb_acl (principal TEXT PRIMARY KEY, version INTEGER);"
            )
        self.load()

    def _search(self, words: str, query: str, groups: list[str], limit: int) -> list[Any]:
        marks = ", ".join("?" for _ in groups) or "NULL"
        sql = (
            "SELECT d.id FROM kb_index JOIN kb_docs d ON d.rowid = kb_index.rowid"
            f" WHERE kb_index MATCH ? AND d.grp IN ({marks}) ORDER BY rank, d.id LIMIT ?"
        )
        with sqlite3.connect(self.path) as db:
            return db.execute(sql, [words, *groups, limit]).fetchall()

    def _rows(self, sql: str, *args: Any) -> list[Any]:
        with sqlite3.connect(self.path) as db:
            return db.execute(sql.replace("{}", "?"), args).fetchall()

    def _write(self, sql: str, *args: Any) -> None:
        with sqlite3.connect(self.path) as db:
            db.execute(sql.replace("{}", "?"), args)


class PostgresKnowledgeBase(KnowledgeBase):
    engine = "PostgreSQL full-text search"

    def __init__(self, url: str) -> None:
        import psycopg  # tenure's own PostgreSQL driver

        self.connect = lambda: psycopg.connect(url, autocommit=True)
        with self.connect() as db:
            db.execute("DROP TABLE IF EXISTS kb_docs, kb_grants, kb_acl")
            db.execute(
                "CREATE TABLE kb_docs (id text PRIMARY KEY, grp text, version text, body text,"
                " tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', body)) STORED)"
            )
            db.execute("CREATE INDEX kb_docs_tsv ON kb_docs USING gin (tsv)")
            db.execute("CREATE TABLE kb_grants (principal text, grp text)")
            db.execute("CREATE TABLE kb_acl (principal text PRIMARY KEY, version integer)")
        self.load()

    def _search(self, words: str, query: str, groups: list[str], limit: int) -> list[Any]:
        sql = (
            "SELECT id FROM kb_docs, to_tsquery('english', %s) AS q"
            " WHERE tsv @@ q AND grp = ANY(%s) ORDER BY ts_rank(tsv, q) DESC, id LIMIT %s"
        )
        with self.connect() as db:
            return db.execute(sql, [words.replace(" OR ", " | "), groups, limit]).fetchall()

    def _rows(self, sql: str, *args: Any) -> list[Any]:
        with self.connect() as db:
            return db.execute(sql.replace("{}", "%s"), args).fetchall()  # type: ignore[arg-type]

    def _write(self, sql: str, *args: Any) -> None:
        with self.connect() as db:
            db.execute(sql.replace("{}", "%s"), args)  # type: ignore[arg-type]


def build_app(url: str, kb: KnowledgeBase, folder: Path) -> tenure.App:
    app = tenure.App(url)

    @app.retriever("kb", index_version=lambda: "kb-index-1")
    def search(query: str, *, allowed: list[str], limit: int) -> list[DocumentRef]:
        return [ref for (doc,) in kb.search(query, allowed, limit) if (ref := kb.ref(doc))]

    @search.permissions
    def permissions(principal: str | None, tenant: str) -> Allowed:
        groups, version = kb.groups(principal)
        return Allowed(groups, f"{principal}#{version}")

    @search.recheck
    def recheck(principal: str | None, refs: list[DocumentRef]) -> list[DocumentRef]:
        return [ref for ref in refs if kb.may_read(principal, ref.source.removeprefix("kb://"))]

    @search.current_version
    def current(ref: DocumentRef) -> DocumentRef | None:
        return kb.ref(ref.source.removeprefix("kb://"))

    @app.job(
        "answer",
        resume_checks=[tenure.checks.evidence_still_valid],
        lease=10,
        heartbeat=2,
        jitter=2,
    )
    def answer(ctx: tenure.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        refs = ctx.retrieve("kb", payload["question"], limit=3)
        if payload.get("review"):
            ctx.step("draft", lambda: f"draft citing {len(refs)} sources")
            ctx.wait_for("review")  # the job waits without a lease; a resume rechecks
        return {"sources": [ref.source for ref in refs]}

    @app.job("code_fix", lease=30, heartbeat=5, jitter=5)
    def code_fix(ctx: tenure.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        result = ctx.step("fix_and_test", lambda: fix_and_test(folder / "project"))
        ctx.evidence(CodeResult(**result))
        return {"tests_passed": result["tests_passed"], "tests_failed": result["tests_failed"]}

    @app.job("transcribe", lease=10, heartbeat=2, jitter=2)
    def transcribe(ctx: tenure.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        audio = Path(payload["file"])
        with wave.open(str(audio)) as sound:
            seconds = sound.getnframes() / sound.getframerate()
        processor = ("python-wave", platform.python_version())
        ctx.evidence(MediaRef(audio.as_uri(), sha256(audio.read_bytes()), *processor))
        return {"seconds": seconds}

    return app


BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = (
    "import unittest\nfrom calc import add\n\n\nclass Add(unittest.TestCase):\n"
    "    def test_small(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
    "    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n"
)


def fix_and_test(project: Path) -> dict[str, Any]:
    """Apply the fix, keep its diff, run the project's tests for real: CodeResult's fields."""
    project.mkdir(exist_ok=True)
    (project / "test_calc.py").write_text(TESTS)
    (project / "calc.py").write_text(FIXED)
    diff = "".join(difflib.unified_diff(BUGGY.splitlines(True), FIXED.splitlines(True),
                                        "a/calc.py", "b/calc.py"))  # fmt: skip
    (project / "fix.diff").write_text(diff)
    command = [sys.executable, "-m", "unittest", "-v", "test_calc"]
    run = subprocess.run(command, cwd=project, capture_output=True, text=True, check=False)
    (project / "tests.log").write_text(run.stderr)
    ran = int(re.search(r"Ran (\d+) test", run.stderr)[1])  # type: ignore[index]
    failed = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", run.stderr))
    return {
        "diff_sha256": sha256(diff),
        "diff_ref": (project / "fix.diff").as_uri(),
        "tests_passed": ran - failed,
        "tests_failed": failed,
        "command": "python -m unittest -v test_calc",
        "log_ref": (project / "tests.log").as_uri(),
    }


def silence(path: Path) -> Path:
    with wave.open(str(path), "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(8000)
        sound.writeframes(b"\x00\x00" * 8000)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="the ledger (default: SQLite in a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        url = args.db or f"sqlite:///{folder / 'tenure.db'}"
        if url.startswith("postgres"):
            kb: KnowledgeBase = PostgresKnowledgeBase(url)
        else:
            kb = SqliteKnowledgeBase(folder / "kb.db")
        app = build_app(url, kb, folder)
        try:
            return run(app, kb, folder)
        finally:
            app.close()


def run(app: tenure.App, kb: KnowledgeBase, folder: Path) -> int:
    ledger = app.ledger
    print(f"index: {kb.engine}")

    def ask(principal: str, tenant: str = "acme", **payload: Any) -> tenure.Job:
        payload.setdefault("question", "revenue forecast")
        job_id = app.submit("answer", payload, tenant=tenant, principal=principal)
        return ledger.wait(job_id, 60)

    def show(label: str, job: tenure.Job) -> dict[str, Any]:
        (event,) = [e for e in ledger.events(job.id) if e.type == "evidence_retrieved"]
        d = event.detail
        dropped = f", dropped {d['dropped_sources']}" if d["dropped"] else ""
        sources = job.result["sources"] if job.result else None
        print(f"{label}: cache {d['cache']}, sources {sources}{dropped}")
        return d

    checks: list[bool] = []
    with tenure.Worker(app, concurrency=2, poll_interval=0.05):
        ana = show("ana (finance, public) asks", ask("user:ana"))
        bo = show("bo (public) asks the same", ask("user:bo"))
        again = show("bo asks again", ask("user:bo"))
        other = show("bo asks in tenant globex", ask("user:bo", tenant="globex"))
        checks += [ana["cache"] == bo["cache"] == other["cache"] == "miss", again["cache"] == "hit"]
        kb.after_search = lambda: kb.revoke("user:ana", "finance")
        question = "forecast of revenue growth"
        raced = show("ana asks anew; finance revoked while the search runs",
                     ask("user:ana", question=question))  # fmt: skip
        after = show("ana asks that again after the revocation", ask("user:ana", question=question))
        checks += [raced["dropped_sources"] == ["kb://q3-forecast"], after["cache"] == "miss"]
        brief_id = app.submit("answer", {"question": "travel policy", "review": True},
                              tenant="acme", principal="user:ana")  # fmt: skip
        while ledger.get(brief_id).state is not tenure.JobState.WAITING:
            time.sleep(0.05)
        kb.edit("handbook", "v5", "Travel policy: book any class, file the report in a month.")
        print("handbook edited to v5 while the brief waited for its review")
        ledger.signal(brief_id, "review", {"ok": True})
        brief = ledger.wait(brief_id, 60)
        print(
            f"brief resumed: {brief.state.value}, {brief.error['code']}: {brief.error['message']}"
        )
        checks.append(brief.error["code"] == "evidence_changed")
        code = ledger.wait(app.submit("code_fix", {}, principal="user:ana"), 120)
        media_file = silence(folder / "call.wav")
        media = ledger.wait(app.submit("transcribe", {"file": str(media_file)}), 60)
    checks += [code.result == {"tests_passed": 2, "tests_failed": 0}, media.result["seconds"] == 1]
    for label, job in (("ana's first answer", ana_job(ledger)), ("code_fix", code),
                       ("transcribe", media)):  # fmt: skip
        print(f"evidence of {label}:")
        for record in ledger.evidence(job.id):
            fields = ", ".join(f"{k}={v}" for k, v in vars_of(record.ref).items())
            print(f"  {record.ref.type}: {fields} (token {record.token})")
    print("all checks held" if all(checks) else f"CHECKS FAILED: {checks}")
    return 0 if all(checks) else 1


def ana_job(ledger: tenure.Ledger) -> tenure.Job:
    jobs = ledger.list(kind="answer", tenant="acme", limit=100)
    return [job for job in jobs if job.principal == "user:ana"][-1]


def vars_of(ref: Any) -> dict[str, Any]:
    shown = {f.name: getattr(ref, f.name) for f in fields(ref) if getattr(ref, f.name) is not None}
    for key in ("sha256", "diff_sha256"):
        if key in shown:
            shown[key] = shown[key][:12] + "…"
    for key in ("diff_ref", "log_ref", "source"):
        if key in shown and shown[key].startswith("file://"):
            shown[key] = "file://…/" + shown[key].rsplit("/", 1)[1]
    return shown


if __name__ == "__main__":
    sys.exit(main())
