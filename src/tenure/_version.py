"""The installed version of tenure, from the package's metadata (the ground floor: imports
nothing of tenure, so any layer may read it)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tenure")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"
