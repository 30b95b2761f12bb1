"""`tenure eval` and `tenure.evaluation`: the Chinese seed's golden set (examples/golden.py)
recorded by a real worker on both backends, replayed through an identical and a regressed
candidate; the command as a subprocess; bad input refused with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from examples import golden

import tenure
from tenure.evaluation import evaluate
from tenure.ledger import p95
from tests.support.cli import tenure_cli
from tests.support.processes import ROOT

pytestmark = pytest.mark.slow
BASELINE = "examples.golden:app"


@pytest.fixture
def recorded(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The seven golden tickets, run once by a worker; the replies went to a fenced receiver."""
    monkeypatch.setenv("GOLDEN_EXAMPLE_DIR", str(tmp_path))
    with tenure.connect(db_url) as ledger:
        return golden.record(ledger, db_url)


def replies(folder: Path) -> list[str]:
    return (folder / "replies.log").read_text().splitlines()


def eval_cli(db_url: str, folder: Path, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    done = tenure_cli(
        "eval", "--app", BASELINE, *args, "--json", db=db_url, cwd=ROOT,
        env={"GOLDEN_EXAMPLE_DIR": str(folder)},
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_an_identical_candidate_passes_and_a_changed_step_fails_and_nothing_is_sent(
    recorded: list[str], db_url: str, tmp_path: Path
) -> None:
    """Identical: every assertion holds on both sides, no stage differs, exit 0. The candidate
    whose model step now obeys the injected instruction: the injection's refund assertion
    fails, its model stage differs, exit 1. Neither evaluation sent a reply."""
    sent = replies(tmp_path)
    assert sorted(sent) == ["T-1", "T-5", "T-7"]  # success, the duplicate (once), injection
    with tenure.connect(db_url) as ledger:
        same = evaluate(ledger, recorded, golden.app)
    assert (same.recorded_passed, same.replayed_passed, same.assertions) == (21, 21, 21)
    assert not same.regressed and same.totals()["stages_differ"] == 0

    code, report = eval_cli(db_url, tmp_path, "--kind", "support_reply")
    assert code == 0 and report["totals"]["replayed_passed"] == 21
    assert sorted(j["job_id"] for j in report["jobs"]) == sorted(recorded)

    code, report = eval_cli(db_url, tmp_path, "--against", "examples.golden:candidate",
                            "--kind", "support_reply")  # fmt: skip
    assert code == 1
    totals = report["totals"]
    assert (totals["recorded_passed"], totals["replayed_passed"], totals["regressed"]) == (
        21, 20, True,
    )  # fmt: skip
    (worse,) = [job for job in report["jobs"] if job["failures"]]
    assert worse["job_id"] == recorded[-1]  # the injection ticket
    assert worse["differing"] == ["step model"]
    assert worse["failures"] == [
        "no_refund_that_is_not_owed: injection: refunded 1000 EUR that nobody owed"
    ]
    assert (totals["effects_added"], totals["effects_dropped"]) == (0, 0)
    # Three tickets reach the model: recorded with v1's price, replayed with v2's.
    costs = [(j["recorded_tokens"], j["replayed_tokens"]) for j in report["jobs"]]
    assert sorted(costs) == [(0, 0)] * 4 + [(400, 900)] * 3
    assert (totals["recorded_tokens"], totals["replayed_tokens"]) == (1200, 2700)
    assert (totals["recorded_usd"], totals["replayed_usd"]) == pytest.approx((0.006, 0.0135))
    assert replies(tmp_path) == sent


def test_a_jobs_file_names_the_set_and_bad_input_is_refused(
    recorded: list[str], db_url: str, tmp_path: Path
) -> None:
    """A file of ids (one per line, # comments) is the set; a malformed file, an unknown kind,
    an unfinished job, --kind with --jobs: exit 2 with the reason."""
    listed = tmp_path / "golden-jobs.txt"
    listed.write_text(
        "# the injection and the cancelled ticket\n" + recorded[-1] + "\n" + recorded[-2] + "\n"
    )
    code, report = eval_cli(db_url, tmp_path, "--jobs", str(listed))
    assert code == 0 and [j["job_id"] for j in report["jobs"]] == recorded[-2:][::-1]
    assert report["jobs"][1]["recorded_state"] == "cancelled"

    with tenure.connect(db_url) as ledger:
        unfinished = ledger.submit("support_reply", {"ticket": "T-9"}, run_after=3600)
    cases = {
        "not-a-job\n": "entry 1 is not a job id",
        "[1, 2]": "entry 1 is not a job id",
        "[": "not a JSON list",
        "\n# nothing\n": "no job ids",
        f"{unfinished}\n": "only finished jobs",
    }
    for text, reason in cases.items():
        listed.write_text(text)
        done = tenure_cli("eval", "--app", BASELINE, "--jobs", str(listed), db=db_url, cwd=ROOT)
        assert (done.returncode, reason in done.stderr) == (2, True), (text, done.stderr)
    for args, reason in [
        (["--kind", "nothing"], "no finished jobs of kind 'nothing'"),
        (["--jobs", str(tmp_path / "missing.txt")], "cannot read the jobs file"),
        (["--kind", "support_reply", "--jobs", str(listed)], "not allowed with"),
        (["--kind", "support_reply", "--since", "7"], "needs its unit"),
    ]:
        done = tenure_cli("eval", "--app", BASELINE, *args, db=db_url, cwd=ROOT)
        assert (done.returncode, reason in done.stderr) == (2, True), (args, done.stderr)


def test_assertions_are_registered_by_kind_and_checked_at_registration() -> None:
    app = tenure.App()
    with pytest.raises(tenure.InvalidJobClass, match="kind"):
        app.assertion("")
    with pytest.raises(tenure.InvalidJobClass, match="not callable"):
        app.assertion("k")(42)  # type: ignore[type-var]
    assert [check.__name__ for check in golden.app.assertions["support_reply"]] == [
        "the_status_fits_the_case",
        "no_refund_that_is_not_owed",
        "the_reply_goes_to_its_ticket",
    ]
    assert (p95([]), p95([5.0]), p95([float(n) for n in range(1, 101)])) == (None, 5.0, 95.0)
