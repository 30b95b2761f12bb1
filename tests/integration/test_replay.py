"""Replay, on both backends: a recorded job re-run through a changed handler with effects
switched off, compared per stage and by result; as `tenure replay` too."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tenure
from tenure import JobState
from tenure.replay import replay
from tests.support.cli import tenure_cli

APPS = """
import os
import tenure

SENT = []
old_app = tenure.App()
new_app = tenure.App()


@old_app.job("answer")
def old_answer(ctx, payload):
    draft = ctx.step("draft", lambda: {"text": "Invoice 17 is 120 EUR", "model": "m1"})
    receipt = ctx.effect("send", lambda fx: SENT.append(fx.key) or {"message_id": "m-1"})
    return {"draft": draft["text"], "receipt": receipt["message_id"]}


@new_app.job("answer")
def new_answer(ctx, payload):
    draft = ctx.step("draft", lambda: {"text": "Invoice 17 is 120.00 EUR", "model": "m2"})
    receipt = ctx.effect("send", lambda fx: SENT.append(fx.key) or {"message_id": "NEW"})
    check = ctx.step("check", lambda: {"ok": True})
    return {"draft": draft["text"], "receipt": receipt["message_id"], "checked": check["ok"]}
"""


@pytest.fixture
def apps_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    (tmp_path / "replay_apps.py").write_text(textwrap.dedent(APPS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "replay_apps", raising=False)
    import importlib

    return importlib.import_module("replay_apps")


def recorded_job(module: object, db_url: str) -> str:
    app: tenure.App = module.old_app  # type: ignore[attr-defined]
    app.url = db_url
    job_id = app.submit("answer", {"invoice": 17})
    with tenure.Worker(app, concurrency=1):
        job = app.ledger.wait(job_id, 30)
    assert job.state is JobState.SUCCEEDED
    app.close()
    return job_id


def test_replay_compares_each_stage_and_never_acts(apps_module: object, db_url: str) -> None:
    """A replay diffs each recorded stage against the new code and sends no effect."""
    job_id = recorded_job(apps_module, db_url)
    sent = apps_module.SENT  # type: ignore[attr-defined]
    assert len(sent) == 1
    with tenure.connect(db_url) as ledger:
        same = replay(ledger, job_id, apps_module.old_app)  # type: ignore[attr-defined]
        changed = replay(ledger, job_id, apps_module.new_app)  # type: ignore[attr-defined]
        events_before = len(ledger.events(job_id))
        assert len(ledger.events(job_id)) == events_before
    assert len(sent) == 1  # no replay sent anything
    assert same.differences == 0 and not same.result_differs
    assert [(s.name, s.kind, s.differs) for s in changed.stages] == [
        ("draft", "step", True),
        ("send", "effect", False),
        ("check", "step", True),
    ]
    draft, send, check = changed.stages
    assert draft.recorded == {"text": "Invoice 17 is 120 EUR", "model": "m1"}
    assert draft.replayed == {"text": "Invoice 17 is 120.00 EUR", "model": "m2"}
    assert send.replayed == {"message_id": "m-1"}  # the recorded result, not "NEW"
    assert check.note.startswith("new")
    assert changed.replayed_result == {
        "draft": "Invoice 17 is 120.00 EUR",
        "receipt": "m-1",
        "checked": True,
    }
    assert changed.result_differs and changed.differences == 3


def test_only_a_finished_job_replays(apps_module: object, db_url: str) -> None:
    """A job that has not finished, or whose kind has no class, cannot be replayed."""
    with tenure.connect(db_url) as ledger:
        job_id = ledger.submit("answer", {})
        with pytest.raises(tenure.InvalidArgument, match="finished"):
            replay(ledger, job_id, apps_module.new_app)  # type: ignore[attr-defined]
        ledger.cancel(job_id)
        with pytest.raises(tenure.InvalidArgument, match="no job class"):
            replay(ledger, job_id, tenure.App())


def test_tenure_replay_command(apps_module: object, db_url: str, tmp_path: Path) -> None:
    """`tenure replay` prints the per-stage diff, --json the report, and exit 2 (a usage error)
    for an --app that names no App."""
    job_id = recorded_job(apps_module, db_url)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return tenure_cli("replay", job_id, "--db", db_url, *args, cwd=tmp_path)

    text = run("--app", "replay_apps:old_app", "--against", "replay_apps:new_app")
    assert text.returncode == 0, text.stderr
    assert "#0 step   draft" in text.stdout and "differs" in text.stdout
    assert '"Invoice 17 is 120.00 EUR"' in text.stdout
    assert "3 difference(s)" in text.stdout
    report = json.loads(run("--app", "replay_apps:old_app", "--json").stdout)
    assert report["differences"] == 0 and report["job_id"] == job_id
    missing = run("--app", "replay_apps:nothing")
    assert missing.returncode == 2 and "not a tenure.App" in missing.stderr
    assert "replay_apps has no attribute 'nothing'" in missing.stderr
