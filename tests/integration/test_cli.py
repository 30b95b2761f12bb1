"""The `tenure` command as a user runs it: a real subprocess, exit codes, JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tenure
from tests.support.cli import tenure_cli

pytestmark = pytest.mark.slow


run = tenure_cli


def test_submit_status_events_and_jobs_as_json(db_url: str) -> None:
    """submit prints {id, state}; status the job; events the timeline; jobs a list."""
    out = run(
        "submit", "ocr", "--payload", '{"doc": "a.pdf"}', "--key", "k1", "--json", "--db", db_url
    )
    assert out.returncode == 0, out.stderr
    submitted = json.loads(out.stdout)
    assert submitted["state"] == "queued"
    again = run(
        "--json", "--db", db_url, "submit", "ocr", "--payload", '{"doc":"a.pdf"}', "--key", "k1"
    )
    assert json.loads(again.stdout)["id"] == submitted["id"]
    status = json.loads(run("status", submitted["id"], "--json", db=db_url).stdout)
    assert (status["id"], status["kind"], status["tenant"], status["payload"]) == (
        submitted["id"],
        "ocr",
        "default",
        {"doc": "a.pdf"},
    )
    assert status["stages"] == []
    events = json.loads(run("--json", "events", submitted["id"], db=db_url).stdout)
    assert [e["type"] for e in events] == ["job_submitted"]
    jobs = json.loads(run("jobs", "--json", "--state", "queued", db=db_url).stdout)
    assert [j["id"] for j in jobs] == [submitted["id"]]


def test_cancel_and_requeue(db_url: str) -> None:
    """cancel then requeue change the state; a second cancel fails with exit 1."""
    job_id = run("submit", "ocr", db=db_url).stdout.strip()
    cancelled = run("cancel", job_id, "--json", db=db_url)
    assert json.loads(cancelled.stdout)["state"] == "cancelled"
    twice = run("cancel", job_id, db=db_url)
    assert twice.returncode == 1
    assert twice.stderr.count("\n") == 1 and "already cancelled" in twice.stderr
    requeued = run("requeue", job_id, "--json", db=db_url)
    assert json.loads(requeued.stdout)["state"] == "queued"
    with tenure.connect(db_url) as ledger:
        assert ledger.get(job_id).state is tenure.JobState.QUEUED


def test_human_output(db_url: str) -> None:
    """Without --json: the id alone from submit, a table from jobs, a timeline from events."""
    job_id = run("submit", "report", db=db_url).stdout.strip()
    assert tenure.__name__ and len(job_id) == 36
    assert job_id in run("jobs", db=db_url).stdout
    assert "job_submitted" in run("events", job_id, db=db_url).stdout
    assert "queued" in run("status", job_id, db=db_url).stdout


@pytest.mark.parametrize("backend", ["sqlite"])
def test_usage_errors_exit_2_and_write_nothing(db_url: str) -> None:
    """A payload that is not JSON, or a missing argument, exits 2 and submits nothing."""
    bad = run("submit", "ocr", "--payload", "{not json", db=db_url)
    assert bad.returncode == 2 and "not JSON" in bad.stderr
    assert run("submit", db=db_url).returncode == 2
    assert run("frobnicate", db=db_url).returncode == 2
    # Bad input the ledger finds (an empty kind, a zero limit, a URL without its slashes) is
    # a usage error too: exit 2 with one line that says what to write instead.
    for args in (("submit", " "), ("jobs", "--limit", "0"), ("--db", "redis://x", "jobs")):
        out = run(*args, db=db_url)
        assert out.returncode == 2, args
        assert out.stderr.startswith("tenure: error: ") and out.stderr.count("\n") == 1
    slashes = run("--db", "sqlite:tenure.db", "jobs")
    assert slashes.returncode == 2 and "sqlite:///" in slashes.stderr
    assert json.loads(run("jobs", "--json", db=db_url).stdout) == []


@pytest.mark.parametrize("backend", ["sqlite"])
def test_failures_exit_1_with_one_line(db_url: str) -> None:
    """An unknown id (well-formed or not): exit 1, one line on stderr."""
    for args in (
        ("status", "00000000-0000-4000-8000-000000000000"),
        ("events", "x"),
    ):
        out = run(*args, db=db_url)
        assert out.returncode == 1, args
        assert out.stderr.startswith("tenure: error: ") and out.stderr.count("\n") == 1


def test_default_database_is_tenure_db_in_the_current_folder(tmp_path: Path) -> None:
    """With no --db and no TENURE_DATABASE_URL, the CLI uses ./tenure.db."""
    out = run("migrate", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "tenure.db").exists()


def test_chaos_refuses_bad_arguments(tmp_path: Path) -> None:
    """Unknown fault kinds or a non-positive size are usage errors (exit 2), before anything
    starts."""
    for args in (("--faults", "kill,flood"), ("--jobs", "0"), ("--duration", "-1")):
        out = run("chaos", *args, cwd=tmp_path)
        assert out.returncode == 2, args
        assert out.stderr.startswith("tenure: error:")
    assert list(tmp_path.iterdir()) == []


def test_migrate_on_a_new_database_says_what_it_applied(tmp_path: Path) -> None:
    """`tenure migrate` on a new file reports the versions it applied, then nothing to do."""
    db = f"sqlite:///{tmp_path / 'new.db'}"
    first = run("migrate", "--json", db=db)
    assert first.returncode == 0, first.stderr
    applied = json.loads(first.stdout)["applied"]
    assert applied == list(range(1, len(applied) + 1)) and len(applied) >= 5
    assert json.loads(run("migrate", "--json", db=db).stdout) == {"applied": []}
    assert "up to date" in run("migrate", db=db).stdout


def test_an_unreachable_postgres_prints_one_line() -> None:
    """No server on the port: one `tenure: error:` line, none of the pool's warnings."""
    out = run("jobs", db="postgresql://nobody@127.0.0.1:9/nothing?connect_timeout=1")
    assert out.returncode == 1
    assert out.stderr.startswith("tenure: error: ") and out.stderr.count("\n") == 1, out.stderr


def test_tenant_commands_name_the_next_command_and_take_json_anywhere(tmp_path: Path) -> None:
    """A second `tenant create` names `tenure tenant key NAME`; `tenant --json list` works."""
    db = f"sqlite:///{tmp_path / 't.db'}"
    assert run("tenant", "create", "acme", db=db).returncode == 0
    again = run("tenant", "create", "acme", db=db)
    assert again.returncode == 1 and "tenure tenant key acme" in again.stderr
    for args in (
        ("tenant", "--json", "list"),
        ("tenant", "list", "--json"),
        ("--json", "tenant", "list"),
    ):
        listed = run(*args, db=db)
        assert listed.returncode == 0, (args, listed.stderr)
        assert [t["name"] for t in json.loads(listed.stdout)] == ["acme"]
