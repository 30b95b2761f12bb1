"""Labels and metrics on both backends: a submit may set only the label keys its job class
leaves open; /metrics breaks every figure down by kind and labels (a browser tool's expired
lease is not a search call's); a stage past its timeout in a hung (SIGSTOPped) worker shows in
the overdue gauge; a worker's own counters carry kind and labels; values past the cap fold
into `other`; the alerting rules in docs/ pass promtool and name only metrics tenure exports."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import tenure
from tenure import labels as label_rules
from tenure.errors import InvalidArgument, InvalidJobClass
from tests.support import apps
from tests.support.cli import tenure_cli
from tests.support.processes import ROOT
from tests.support.service import LiveServer, free_port
from tests.support.waiting import poll, until_db_time_passes
from tests.support.workers import Workers

ALERTS = ROOT / "docs" / "alerts.yml"
BROWSER = {"kind": "browse", "tool": "browser", "provider": "acme-web", "model": "m-2"}
SEARCH = {"kind": "search", "tool": "search", "provider": "acme-search", "model": "m-2"}


Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(url: str) -> Samples:
    """Prometheus text as {sample name: [(labels, value)]}; a family with no sample yet is
    there with an empty list."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        samples.setdefault(family.name, [])
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`."""
    found = [v for have, v in samples.get(name, []) if labels.items() <= have.items()]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def test_a_submit_sets_only_the_keys_its_class_leaves_open(db_url: str) -> None:
    """The app's connect declares its classes' labels in the database; any process's submit
    (a plain ledger, the CLI) is checked against them; a refused one writes nothing."""
    with apps.app.connect(db_url) as ledger:
        job_id = ledger.submit("browse", {}, labels={"model": "m-2"})
        assert ledger.get(job_id).labels == {"model": "m-2"}
        assert ledger.get(ledger.submit("browse", {})).labels is None
        cases = [
            ({"region": "eu"}, "key 'region' is not declared"),
            ({"tool": "other"}, "'tool' is fixed by the job class"),
            ({"model": "m" * 65}, "printable value of 1 to 64"),
            ({"model": ""}, "printable value"),
            ({"model": 3}, "printable value"),
            (["model"], "must be a mapping"),
        ]
        for labels, reason in cases:
            with pytest.raises(InvalidArgument, match=re.escape(reason)):
                ledger.submit("browse", {}, labels=labels)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="declares no labels"):
            ledger.submit("variant_echo", {}, labels={"model": "m"})
        with pytest.raises(InvalidArgument, match="declares no labels"):
            ledger.submit_many("variant_echo", [{}], labels={"model": "m"})
        assert len(ledger.list(limit=1000)) == 2
    with tenure.connect(db_url) as plain:
        assert plain.get(plain.submit("search", {}, labels={"model": "m-3"})).labels == {
            "model": "m-3"
        }
    ok = tenure_cli("submit", "browse", "--label", "model=m-4", "--json", db=db_url)
    assert ok.returncode == 0, ok.stderr
    refused = tenure_cli("submit", "browse", "--label", "region=eu", db=db_url)
    assert (refused.returncode, "not declared" in refused.stderr) == (2, True)
    malformed = tenure_cli("submit", "browse", "--label", "model", db=db_url)
    assert (malformed.returncode, "KEY=VALUE" in malformed.stderr) == (2, True)


def test_a_job_class_declares_label_keys_a_metric_can_carry() -> None:
    app = tenure.App()
    for labels, reason in [
        ({"Tool": "x"}, "lower case"),
        ({"kind": "x"}, "lower case"),
        ({"tool": "x" * 65}, "printable value"),
        ({f"k{n}": "v" for n in range(9)}, "at most 8"),
    ]:
        with pytest.raises(InvalidJobClass, match=reason):
            app.job("k", labels=labels)(lambda ctx, payload: None)
    assert label_rules.merged({"tool": "b", "model": None}, {"model": "m"}) == {
        "tool": "b",
        "model": "m",
    }


def test_metrics_break_expiries_down_by_tool_and_name_what_the_alerts_use(db_url: str) -> None:
    """A browser job whose lease expires (and is reclaimed) counts under tool="browser", not
    under the search tool's series, which is there at zero; every metric the alerting rules
    name is in the scrape."""
    with apps.app.connect(db_url) as ledger, LiveServer(ledger) as server:
        ledger.submit("browse", {}, labels={"model": "m-2"})
        ledger.submit("search", {}, labels={"model": "m-2"})
        first = ledger.claim("w1", kinds=["browse"], lease_seconds=0.2)
        assert first is not None
        until_db_time_passes(ledger, first.lease_until)
        second = ledger.claim("w2", kinds=["browse"], lease_seconds=30)
        assert second is not None and second.attempt == 2
        ledger.complete(second, {"rendered": True})
        found = ledger.claim("w3", kinds=["search"], lease_seconds=30)
        assert found is not None
        ledger.complete(found, {"found": 1})
        samples = scrape(server.url)
    assert value(samples, "tenure_leases_expired_total", **BROWSER) == 1
    assert value(samples, "tenure_jobs_reclaimed_total", **BROWSER) == 1
    assert value(samples, "tenure_leases_expired_total", **SEARCH) == 0
    expired = [v for labels, v in samples["tenure_leases_expired_total"] if v > 0]
    assert expired == [1]
    assert value(samples, "tenure_jobs", state="succeeded", **SEARCH) == 1

    rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    named = {n for rule in rules for n in re.findall(r"tenure_[a-z_]+", rule["expr"])}
    assert named, "the rules name no tenure metric"
    families = {name.removesuffix("_total") for name in samples} | set(samples)
    assert named <= families, named - families


def test_the_alerting_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI") == "true":
            raise AssertionError("no promtool: .ci/run installs Debian's prometheus package")
        pytest.skip("no promtool (apt-get install prometheus)")
    checked = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout


@pytest.mark.slow
def test_a_stage_past_its_timeout_in_a_hung_worker_shows_in_the_overdue_gauge(
    db_url: str, workers: Workers, tmp_path: Path
) -> None:
    """The worker is SIGSTOPped inside a render whose stage timeout is 2 s (its lease is 30 s,
    so the job stays running): the database alone tells that the stage is overdue."""
    with apps.app.connect(db_url) as ledger, LiveServer(ledger) as server:
        job_id = ledger.submit("stuck_browse", {}, labels={"model": "m-2"})
        worker = workers.start(db_url, "hung", "--kinds", "stuck_browse")
        poll(lambda: list(tmp_path.glob("in-render-*")) or None, 30, "the render to start")
        worker.send_signal(signal.SIGSTOP)
        try:
            labels = {**BROWSER, "kind": "stuck_browse"}
            assert value(scrape(server.url), "tenure_stages_overdue", **labels) == 0
            started = ledger.stages(job_id)[0]
            assert started.status.value == "started"
            poll(
                lambda: value(scrape(server.url), "tenure_stages_overdue", **labels) == 1 or None,
                30,
                "the stage to be overdue",
            )
            samples = scrape(server.url)
            assert value(samples, "tenure_stage_overdue_seconds", **labels) > 0
            assert ledger.get(job_id).state is tenure.JobState.RUNNING
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=30)


@pytest.mark.slow
def test_a_workers_own_counters_carry_kind_and_labels(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'w.db'}"
    port = free_port()
    group = Workers(tmp_path)
    with apps.app.connect(db) as ledger:
        ids = [ledger.submit("browse", {}, labels={"model": "m-2"}) for _ in range(3)]
        group.start(db, "metrics", "--kinds", "browse", "search", "--metrics-port", str(port))
        try:
            poll(lambda: all(ledger.get(i).terminal for i in ids) or None, 30, "the jobs")
            samples = scrape(f"http://127.0.0.1:{port}")
        finally:
            group.stop_all()
    assert value(samples, "tenure_worker_succeeded_total", **BROWSER) == 3
    assert value(samples, "tenure_worker_claimed_total", **BROWSER) == 3
    search = {"kind": "search", "tool": "search", "model": ""}  # known, at zero
    assert value(samples, "tenure_worker_claimed_total", **search) == 0


def test_label_values_past_the_cap_fold_into_other(db_url: str) -> None:
    """25 models on one kind: the 20 with the most jobs keep their series, the rest are one
    `other` series; no job goes uncounted."""
    cap = label_rules.MAX_VALUES_PER_KEY
    with apps.app.connect(db_url) as ledger, LiveServer(ledger) as server:
        for n in range(cap + 5):
            for _ in range(2 if n < cap else 1):  # the first 20 models have more jobs
                ledger.submit("search", {}, labels={"model": f"m-{n}"})
        samples = scrape(server.url)
    queued = [(labels, v) for labels, v in samples["tenure_jobs"] if labels["kind"] == "search"]
    models = {labels["model"] for labels, v in queued if v > 0}
    assert models == {f"m-{n}" for n in range(cap)} | {"other"}
    assert sum(v for _, v in queued) == 2 * cap + 5
    assert value(samples, "tenure_jobs", kind="search", model="other", state="queued") == 5
