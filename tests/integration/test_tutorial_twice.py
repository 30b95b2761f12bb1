"""The first-job tutorial's ledger snippet, run twice as a reader would (`python snippet.py`,
then again): the second run ends as well as the first, with the same job."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.cli import cli_env

ROOT = Path(__file__).resolve().parents[2]


def test_the_ledger_snippet_of_first_job_runs_twice(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "tutorials" / "first-job.md").read_text(encoding="utf-8")
    snippets = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(snippets) == 1, "the page's ledger snippet"
    (tmp_path / "snippet.py").write_text(snippets[0], encoding="utf-8")
    runs = [
        subprocess.run(
            [sys.executable, "snippet.py"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=cli_env(),
            timeout=60,
            check=False,
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert run.stderr == ""
    first, second = (run.stdout.splitlines() for run in runs)
    assert [line.split()[1] for line in first] == [
        "job_submitted",
        "job_claimed",
        "step_saved",
        "job_succeeded",
    ]
    assert second == first, "the same key returns the same job, and nothing new happened"
