"""The optional extras: a module that needs one says so with the install command that works,
instead of a bare `No module named …` from deep inside an import."""

from __future__ import annotations

import importlib.util


class MissingExtra(ImportError):
    """An optional dependency of tenure is not installed; the message names the extra."""


def install_hint(extra: str) -> str:
    """How to install an extra, from PyPI and from a clone of the repository."""
    return f"pip install 'tenure[{extra}]' (from a clone of tenure: pip install -e '.[{extra}]')"


def needs(extra: str, *modules: str, what: str) -> None:
    """Raise `MissingExtra` unless every module of the extra can be imported."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(
                f"{what} needs the {extra} extra ({module} is not installed): "
                f"{install_hint(extra)}",
                name=module,
            )
