"""Headless Chromium for the dashboard's tests (Debian's, driven by Playwright): the `browser`
fixture (skipped without Chromium, except under CI=true, where .ci/run installs it), screenshots
kept for the docs, and a worker process of the test apps for the page to watch."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure.testing.process import spawn_worker, wait_started
from tests.support.processes import ROOT

CHROMIUM = Path(os.environ.get("TENURE_TEST_CHROMIUM", "/usr/bin/chromium"))


@pytest.fixture
def browser() -> Iterator[Any]:
    sync_api: Any = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            raise AssertionError(f"no Chromium at {CHROMIUM}: .ci/run installs Debian's chromium")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield launched
        finally:
            launched.close()


def screenshot(target: Any, folder: Path, name: str) -> Path:
    """Save a screenshot of a page (whole) or a region of it; also into $TENURE_SCREENSHOT_DIR
    when set, for people to look at (docs/images)."""
    path = folder / f"{name}.png"
    if hasattr(target, "goto"):
        target.screenshot(path=str(path), full_page=True)
    else:
        target.screenshot(path=str(path))
    assert path.stat().st_size > 0
    keep = os.environ.get("TENURE_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)
    return path


def apps_worker(db: str, folder: Path, *kinds: str) -> subprocess.Popen[bytes]:
    """A started `tenure worker tests.support.apps:app` running only `kinds`."""
    log = folder / "worker.log"
    worker = spawn_worker(
        "tests.support.apps:app",
        db,
        log,
        "--poll",
        "0.05",
        "--kinds",
        *kinds,
        env={"PYTHONPATH": str(ROOT), "TENURE_TEST_DIR": str(folder)},
    )
    wait_started(worker, log)
    return worker
