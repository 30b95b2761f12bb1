"""The architecture as a checked property: dependencies point down (errors/types ← storage ←
ledger ← runtime, service, cli), psycopg only in the PostgreSQL store, and no module of the
package past ~600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tenure"
MAX_LINES = 600

# What each part of the package may not import (at module level or lazily).
FORBIDDEN = {
    "errors": {"tenure"},
    "types": {"tenure.storage", "tenure.ledger", "tenure.runtime", "tenure.service"},
    "evidence": {"tenure.storage", "tenure.ledger", "tenure.runtime", "tenure.service"},
    "retrieval": {"tenure.storage", "tenure.ledger", "tenure.runtime", "tenure.service"},
    "checks": {"tenure.storage", "tenure.ledger", "tenure.service"},
    "storage": {"tenure.ledger", "tenure.runtime", "tenure.service", "tenure.app", "tenure.cli"},
    "ledger": {"tenure.runtime", "tenure.service", "tenure.app", "tenure.cli"},
    "fence": {"tenure.runtime", "tenure.ledger", "tenure.app", "tenure.service"},
    "runtime": {"tenure.service", "tenure.cli"},
    "service": {"tenure.runtime", "tenure.cli"},
    "mcp": {"tenure.runtime", "tenure.service", "tenure.cli"},
    "integrations": {"tenure.runtime", "tenure.service", "tenure.cli", "tenure.mcp"},
}

# The frameworks each integration is written against: imported by that module alone.
FRAMEWORKS = {
    "integrations/openai_agents.py": {"agents"},
    "integrations/langgraph.py": {"langgraph", "langchain_core"},
    "integrations/pydantic_ai.py": {"pydantic_ai"},
}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _part(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_dependencies_point_down(part: str) -> None:
    """No module of a layer imports a layer above it."""
    wrong = {
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in _modules()
        if _part(path) == part
        for name in _imports(path)
        if any(_within(name, banned) for banned in FORBIDDEN[part])
    }
    assert wrong == set()


def test_psycopg_is_imported_only_by_the_postgres_store() -> None:
    """The driver stays behind the storage boundary: only storage/postgres imports psycopg."""
    users = {
        str(path.relative_to(PACKAGE))
        for path in _modules()
        if any(_within(name, "psycopg") or _within(name, "psycopg_pool") for name in _imports(path))
    }
    assert users and all(user.startswith("storage/postgres/") for user in users), users


def test_an_agent_framework_is_imported_only_by_its_integration() -> None:
    """`import tenure` needs no agent framework: each is behind its own optional module."""
    frameworks = set().union(*FRAMEWORKS.values())
    users = {
        str(path.relative_to(PACKAGE)): found
        for path in _modules()
        if (found := {n.split(".")[0] for n in _imports(path)} & frameworks)
    }
    assert users == FRAMEWORKS


def test_no_module_is_a_god_module() -> None:
    """Every module reads in one sitting: at most ~600 lines."""
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in _modules()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_submodules_the_readme_names_are_there_after_import_tenure() -> None:
    """In a fresh process, `import tenure` alone makes `tenure.fence.headers` and
    `tenure.replay.replay` reachable (an AttributeError in a handler would be a retry loop)."""
    import subprocess
    import sys

    code = "import tenure; print(tenure.fence.headers.__name__, tenure.replay.replay.__name__)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["headers", "replay"]
