"""A job's timeline and run tree at each door: HTTP (`/v1/jobs/{id}/timeline`, `/tree`) and the
command line (`tenure events ID --timeline`, `--json`, `--html`, `tenure demo --timeline`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import tenure
from tenure import keys
from tenure.ledger import lease_port
from tenure.service import ServiceSettings
from tests.support.cli import kept_demo, tenure_cli
from tests.support.service import LiveServer

CONTENT = "PAYLOAD-QUESTION-4410"


@pytest.fixture
def served(ledger: tenure.Ledger) -> Iterator[tuple[LiveServer, httpx.Client, httpx.Client]]:
    admin = keys.new_admin_key()
    with LiveServer(ledger, ServiceSettings(admin_key_sha256=admin.key_sha256)) as server:
        acme = server.client(ledger.operations.create_tenant("acme"))
        globex = server.client(ledger.operations.create_tenant("globex"))
        yield server, acme, globex
        acme.close()
        globex.close()


def _family(ledger: tenure.Ledger) -> tuple[str, str]:
    root = ledger.submit("research", {"q": CONTENT}, tenant="acme")
    lease = ledger.claim("w", kinds=["research"], lease_seconds=30)
    assert lease is not None
    child, _ = lease_port(ledger).spawn(lease, "first", "search", {"q": CONTENT})
    return root, child


def test_the_timeline_over_http_is_the_tenants_own(
    ledger: tenure.Ledger, served: tuple[LiveServer, httpx.Client, httpx.Client]
) -> None:
    _, acme, globex = served
    root, child = _family(ledger)
    answer = acme.get(f"/v1/jobs/{root}/timeline")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["job"]["id"] == root
    [lane] = body["lanes"]
    assert (lane["owner"], lane["ended_by"]) == ("w", "running")
    assert [m["type"] for m in lane["marks"]] == ["child_spawned"]
    assert lane["marks"][0]["detail"]["child"] == child
    assert CONTENT not in answer.text

    tree = acme.get(f"/v1/jobs/{child}/tree")
    assert tree.status_code == 200, tree.text
    assert tree.json()["root"]["id"] == root
    assert [c["id"] for c in tree.json()["root"]["children"]] == [child]
    assert tree.json()["focus"] == child

    for path in (f"/v1/jobs/{root}/timeline", f"/v1/jobs/{child}/tree"):
        hidden = globex.get(path)
        assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "not_found"
    # Not ids: a word, a nil-looking one, NUL, a lone surrogate's bytes, an emoji, a long one.
    for bad in ("nope", "0" * 36, "%00", "%ED%A0%80", "%F0%9F%92%A9", "x" * 5000):
        for route in ("timeline", "tree"):
            refused = acme.get(f"/v1/jobs/{bad}/{route}")
            assert refused.status_code in (404, 414, 422), refused.text
            assert refused.headers["content-type"].startswith("application/json")


def test_the_command_line_draws_writes_and_refuses(
    ledger: tenure.Ledger, db_url: str, tmp_path: Path
) -> None:
    root, _ = _family(ledger)
    drawn = tenure_cli("events", root, "--timeline", db=db_url)
    assert drawn.returncode == 0, drawn.stderr
    assert "lane 1  token" in drawn.stdout and "owner w" in drawn.stdout
    assert "child_spawned" in drawn.stdout and CONTENT not in drawn.stdout

    as_json = tenure_cli("events", root, "--timeline", "--json", db=db_url)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["lanes"][0]["owner"] == "w"

    page = tmp_path / "job.html"
    written = tenure_cli("events", root, "--timeline", "--html", str(page), db=db_url)
    assert written.returncode == 0, written.stderr
    html = page.read_text("utf-8")
    assert root in html and CONTENT not in html
    assert "<script src" not in html and "<link" not in html  # nothing fetched

    no_timeline = tenure_cli("events", root, "--html", str(page), db=db_url)
    assert no_timeline.returncode == 2 and "--timeline" in no_timeline.stderr
    nowhere = tenure_cli("events", root, "--timeline", "--html", "/no/such/dir/x.html", db=db_url)
    assert nowhere.returncode == 2 and "Traceback" not in nowhere.stderr
    missing = tenure_cli("events", "0" * 36, "--timeline", db=db_url)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr


def test_the_demo_writes_its_jobs_timeline(tmp_path: Path) -> None:
    page = tmp_path / "demo.html"
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    played = kept_demo(db, page, tmp_path)
    assert played.returncode == 0, played.stdout + played.stderr
    assert f"The job's lease timeline, drawn: {page}" in played.stdout
    html = page.read_text("utf-8")
    assert "effect_refused" in html and "INV-1042" not in html
    with tenure.connect(db) as ledger:
        [job] = ledger.list()
        timeline = tenure_cli("events", job.id, "--timeline", "--json", db=db)
    lanes = json.loads(timeline.stdout)["lanes"]
    assert [lane["ended_by"] for lane in lanes] == ["expired", "succeeded"]
    assert "effect_refused" in [m["type"] for m in lanes[0]["marks"]]
