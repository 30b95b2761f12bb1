"""One database for every process of an app: the precedence (`--db` > `App(url)` >
`$TENURE_DATABASE_URL` > sqlite:///tenure.db), the warning a worker, `serve` or `mcp` prints at
start when the environment names another database, `tenure doctor`, and the app target's
errors (a name that is no App, a file given for a module, an exception in the user's module)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tenure import App
from tenure.clock import SYSTEM_CLOCK
from tenure.database_url import (
    ChosenDatabase,
    UrlSource,
    differs_from_environment,
    same_database,
    shown_url,
)
from tests.support.cli import cli_env, tenure_cli, tenure_process
from tests.support.service import free_port
from tests.support.waiting import poll

APP_MODULE = """\
import tenure
app = tenure.App({url})

@app.job("invoice")
def invoice(ctx, payload):
    return {{"ok": True}}
"""


def _write_app(folder: Path, url: str | None) -> None:
    (folder / "okjobs.py").write_text(
        APP_MODULE.format(url="" if url is None else repr(url)), encoding="utf-8"
    )


def _sqlite(folder: Path, name: str) -> str:
    return f"sqlite:///{folder / name}"


@pytest.fixture
def environment_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    url = _sqlite(tmp_path, "environment.db")
    monkeypatch.setenv("TENURE_DATABASE_URL", url)
    yield url


def test_app_url_wins_over_the_environment_and_says_where_it_came_from(
    environment_db: str, tmp_path: Path
) -> None:
    named = App(_sqlite(tmp_path, "named.db"))
    unnamed = App()
    assert (named.url, named.url_source) == (_sqlite(tmp_path, "named.db"), UrlSource.APP)
    assert (unnamed.url, unnamed.url_source) == (environment_db, UrlSource.ENVIRONMENT)


def test_the_warning_names_both_databases_and_no_password(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TENURE_DATABASE_URL", "postgresql://app:s3cret@db.internal/jobs")
    chosen = ChosenDatabase(_sqlite(tmp_path, "tenure.db"), UrlSource.APP)
    warning = differs_from_environment(chosen)
    assert warning is not None
    assert _sqlite(tmp_path, "tenure.db") in warning
    assert "postgresql://app:***@db.internal/jobs" in warning
    assert "s3cret" not in warning
    same = ChosenDatabase("postgres://app@db.internal:5432/jobs?connect_timeout=3", UrlSource.APP)
    assert differs_from_environment(same) is None


def test_urls_of_one_database_are_the_same_and_others_are_not(tmp_path: Path) -> None:
    assert same_database("sqlite:///t.db", f"sqlite:///{tmp_path / 't.db'}", folder=tmp_path)
    assert not same_database("sqlite:///t.db", "sqlite:///u.db", folder=tmp_path)
    assert same_database("postgresql://u@h/db", "postgres://u@h:5432/db?connect_timeout=2")
    assert not same_database("postgresql://u@h/db", "postgresql://u@h/other")
    assert not same_database("postgresql://u@h:6432/db", "postgresql://u@h:5432/db")
    assert shown_url("postgresql://u:p%40ss@h/db?password=x&sslmode=require") == (
        "postgresql://u:***@h/db?password=***&sslmode=require"
    )


def _start_worker(folder: Path, environment: str | None, *extra: str) -> subprocess.Popen[str]:
    env = cli_env(environment)
    return subprocess.Popen(
        [sys.executable, "-m", "tenure.cli", "worker", "okjobs:app", "--app-dir", str(folder),
         "--poll", "0.05", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip


def _lines_until_started(
    process: subprocess.Popen[str], timeout: float = 30.0
) -> list[dict[str, Any]]:
    """The worker's JSON log lines up to `worker_started` (a deadline, not a sleep)."""
    assert process.stderr is not None
    deadline = SYSTEM_CLOCK.monotonic() + timeout
    lines: list[dict[str, Any]] = []
    while SYSTEM_CLOCK.monotonic() < deadline:
        text = process.stderr.readline()
        if not text:
            pytest.fail(f"the worker ended before it started: {lines}")
        line = json.loads(text)
        lines.append(line)
        if line["event"] == "worker_started":
            return lines
    pytest.fail(f"no worker_started within {timeout}s: {lines}")


def _stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait(timeout=30)


@pytest.mark.parametrize("how", ["app url", "--db"])
def test_a_worker_on_another_database_than_the_environment_warns_at_start(
    tmp_path: Path, how: str
) -> None:
    environment = _sqlite(tmp_path, "environment.db")
    own = _sqlite(tmp_path, "own.db")
    _write_app(tmp_path, own if how == "app url" else None)
    process = _start_worker(tmp_path, environment, *(("--db", own) if how == "--db" else ()))
    try:
        lines = _lines_until_started(process)
    finally:
        _stop(process)
    warnings = [line for line in lines if line["event"] == "database_differs"]
    assert len(warnings) == 1
    assert warnings[0]["database"] == own
    assert warnings[0]["environment"] == environment
    assert warnings[0]["source"] == ("App(url)" if how == "app url" else "--db")


def test_a_worker_that_takes_the_environment_does_not_warn(tmp_path: Path) -> None:
    environment = _sqlite(tmp_path, "environment.db")
    _write_app(tmp_path, None)
    process = _start_worker(tmp_path, environment)
    try:
        lines = _lines_until_started(process)
    finally:
        _stop(process)
    assert [line for line in lines if line["event"] == "database_differs"] == []
    assert lines[-1]["database"] == f"SQLite at {tmp_path / 'environment.db'}"


def test_doctor_lists_each_process_and_fails_on_a_split(tmp_path: Path) -> None:
    environment = _sqlite(tmp_path, "environment.db")
    _write_app(tmp_path, _sqlite(tmp_path, "own.db"))
    split = tenure_cli("doctor", "okjobs:app", "--json", db=None, cwd=tmp_path,
                       env={"TENURE_DATABASE_URL": environment})  # fmt: skip
    assert split.returncode == 1, split.stderr
    report = json.loads(split.stdout)
    assert report["one_database"] is False
    assert [(p["database"], p["source"]) for p in report["processes"]] == [
        (environment, "$TENURE_DATABASE_URL"),
        (_sqlite(tmp_path, "own.db"), "App(url)"),
    ]
    assert not (tmp_path / "own.db").exists()  # asked, not created
    unnamed = tmp_path / "unnamed"
    unnamed.mkdir()
    _write_app(unnamed, None)
    one = tenure_cli("doctor", "okjobs:app", cwd=unnamed, env={"TENURE_DATABASE_URL": environment})
    assert one.returncode == 0, one.stdout + one.stderr
    assert "problem" not in one.stdout
    assert f"okjobs:app  {environment}  (from $TENURE_DATABASE_URL)" in one.stdout


def test_doctor_says_when_a_database_does_not_answer(tmp_path: Path) -> None:
    refused = tenure_cli("doctor", "--db", "postgresql://nobody@127.0.0.1:1/none", cwd=tmp_path)
    assert refused.returncode == 1
    assert "does not answer" in refused.stdout
    assert "Traceback" not in refused.stderr


def test_app_targets_that_name_no_app_are_usage_errors_in_one_line(tmp_path: Path) -> None:
    _write_app(tmp_path, None)
    (tmp_path / "broken.py").write_text("import tenure\nratio = 1 / 0\n", encoding="utf-8")
    cases = {
        ("okjobs:ap",): (2, "okjobs has no attribute 'ap'; its App is okjobs:app"),
        ("okjobs:tenure",): (2, "okjobs has module as 'tenure'"),
        ("okjobs.py:app",): (2, "use okjobs:app"),
        ("sub/okjobs.py:app",): (2, "use okjobs:app --app-dir sub"),
        ("nomodule:app",): (2, "no module 'nomodule'"),
        ("broken:app",): (1, f"division by zero ({tmp_path / 'broken.py'}, line 2)"),
    }  # fmt: skip
    for (target,), (code, said) in cases.items():
        result = tenure_cli("worker", target, cwd=tmp_path)
        assert result.returncode == code, (target, result.stderr)
        assert said in result.stderr, (target, result.stderr)
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_concurrency_below_one_is_a_usage_error(tmp_path: Path) -> None:
    _write_app(tmp_path, None)
    for command in (["worker", "okjobs:app"], ["chaos"]):
        result = tenure_cli(*command, "--concurrency", "0", cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "--concurrency: must be at least 1, got 0" in result.stderr


def test_serve_on_another_database_than_the_environment_warns_at_start(tmp_path: Path) -> None:
    environment = _sqlite(tmp_path, "environment.db")
    own = _sqlite(tmp_path, "own.db")
    log = tmp_path / "serve.log"
    port = free_port()
    with open(log, "wb") as output:
        process = tenure_process(
            "serve", "--db", own, "--port", str(port), output=output, db=environment
        )

    def answering() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        except httpx.TransportError:
            assert process.poll() is None, log.read_text()
            return False

    try:
        poll(answering, 60, "tenure serve to answer")
        line = _logged(log, "database_differs")
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert line is not None, log.read_text()
    assert (line["database"], line["source"], line["environment"]) == (own, "--db", environment)


def _logged(log: Path, event: str) -> dict[str, Any] | None:
    for text in log.read_text(encoding="utf-8").splitlines():
        if text.startswith("{") and json.loads(text)["event"] == event:
            return dict(json.loads(text))
    return None


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://db?password=s3cret",
        "postgresql://?host=db&user=app&password=s3cret",
        "postgresql://app:ab/s3cret@db/prod",
        "postgresql://app@db/prod?sslpassword=s3cret&%70assword=s3cret",
        "host=db user=app password=s3cret dbname=jobs",
        "host=db password='s3cret with spaces' dbname=jobs",
    ],
)
def test_no_form_of_a_url_shows_its_password(
    url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert "s3cret" not in shown_url(url)
    monkeypatch.setenv("TENURE_DATABASE_URL", url)
    warning = differs_from_environment(ChosenDatabase(_sqlite(tmp_path, "t.db"), UrlSource.APP))
    assert warning is not None and "s3cret" not in warning


def test_doctor_says_a_sqlite_url_that_cannot_work_does_not_answer(tmp_path: Path) -> None:
    for url in ("sqlite:///no/such/folder/x.db", "sqlite://host.db"):
        result = tenure_cli("doctor", "--db", url, cwd=tmp_path)
        assert result.returncode == 1, (url, result.stdout)
        assert "does not answer" in result.stdout


def test_a_missing_dependency_of_the_app_is_not_a_missing_app(tmp_path: Path) -> None:
    """`openai_tasks` that imports a missing `openai`: the import error, not "no module"."""
    (tmp_path / "absentdep_tasks.py").write_text("import absentdep\n", encoding="utf-8")
    result = tenure_cli("worker", "absentdep_tasks:app", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "cannot import 'absentdep_tasks': No module named 'absentdep'" in result.stderr
