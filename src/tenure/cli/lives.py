"""`tenure events ID --timeline [--html FILE]`: a job's life drawn for a terminal, as JSON,
or as one offline page."""

from __future__ import annotations

import json
from pathlib import Path

from tenure.cli.common import shown
from tenure.cli.timeline_text import render_timeline
from tenure.ledger import Ledger
from tenure.pages import job_life_page
from tenure.timeline import read_timeline


def show_timeline(ledger: Ledger, job_id: str, as_json: bool, html: Path | None) -> int:
    """Print the timeline (text or JSON), or write it as a page and say where."""
    if html is not None:
        html.write_text(job_life_page(ledger, job_id), encoding="utf-8")
        print(shown(f"wrote {html} (open it in a browser: it works offline)"))
        return 0
    timeline = read_timeline(ledger, job_id)
    if as_json:
        print(json.dumps(timeline.to_dict(), indent=2, sort_keys=True))
    else:
        for line in render_timeline(timeline):
            print(shown(line))
    return 0
