"""Fixtures shared by the test modules (registered in conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import tenure


@pytest.fixture
def make_app(db_url: str) -> Iterator[Callable[[], tenure.App]]:
    """Apps on the test's database; each is closed at the end of the test."""
    apps: list[tenure.App] = []

    def make() -> tenure.App:
        app = tenure.App(db_url)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()
