"""The HTML pages, each one self-contained: the service's dashboard, and the offline page of
one job's timeline and run tree (`tenure events ID --timeline --html FILE`, `tenure demo
--timeline FILE`). The timeline's script and styles are inlined into both, so neither fetches
anything from a network. No web framework: the offline page needs no `service` extra."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Protocol

from tenure.runtree import TreeSource, read_tree
from tenure.timeline import TimelineSource, read_timeline

# Read as files of the package: importing `tenure.service` would need the `service` extra.
_STATIC = resources.files("tenure").joinpath("service", "static")


def _static(name: str) -> str:
    return _STATIC.joinpath(name).read_text("utf-8")


def _inlined(page: str) -> str:
    page = page.replace("/*TIMELINE_CSS*/", _static("timeline.css"), 1)
    return page.replace("/*TIMELINE_JS*/", _static("timeline.js"), 1)


def dashboard_page() -> str:
    """The dashboard (`/`)."""
    return _inlined(_static("dashboard.html"))


def script_json(value: Any) -> str:
    """`value` as a JSON literal safe inside a <script> element: no `<`, `>` or `&` appears
    as such (so `</script>` cannot end the element early), nor a lone surrogate."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def timeline_page(timeline: dict[str, Any], tree: dict[str, Any] | None) -> str:
    """One job's timeline and run tree as a page that works opened from a file, offline."""
    page = _inlined(_static("timeline.html"))
    return page.replace("/*TIMELINE_DATA*/", script_json({"timeline": timeline, "tree": tree}), 1)


class LifeSource(TimelineSource, TreeSource, Protocol):
    """What a job's page needs of the ledger: the job, its events, its tree."""


def job_life_page(source: LifeSource, job_id: str) -> str:
    """The job's timeline and run tree, read now, as one offline page."""
    timeline = read_timeline(source, job_id)
    tree = read_tree(source, timeline.job.id)
    return timeline_page(timeline.to_dict(), tree.to_dict())
