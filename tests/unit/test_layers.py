"""The architecture as a checked property: each part imports only what its row of an
allow-list names (errors/types ← storage ← ledger ← runtime, service, cli; no cycle), psycopg
only in the PostgreSQL store, and no module or SQL file of the package past ~600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "tenure"
MAX_LINES = 600

# What each part of the package may import of tenure (besides itself): an allow-list, so a
# new import across layers is a decision made here. Every part has a row. FACE marks the
# package face (`import tenure`), for code written as a user writes it (the demo, chaos).
FACE = "tenure"
GROUND = {
    "errors",
    "_version",
    "keys",
    "logs",
    "extras",
    "checks",
    "clock",
    "awaitable",
    "asgi",
    "backoff",
    "options",
    "database_url",
}
DOMAIN = {
    "ids",
    "validation",
    "schedules",
    "rates",
    "budgets",
    "labels",
    "evidence",
    "principals",
    "asking",
    "types",
    "waits",
    "retrieval",
    "tooltypes",
    "timeline",
    "runtree",
    "pages",
    "port",
    "wait_state",
}
ALLOWED: dict[str, set[str]] = {
    **{part: set() for part in GROUND},
    "validation": {"errors"},
    "ids": {"clock"},
    "labels": {"errors"},
    "evidence": {"errors"},
    "principals": {"errors", "evidence"},
    "tooltypes": {"errors"},
    "asking": {"errors", "validation"},
    "wait_state": {"asking"},
    "types": {"errors", "evidence", "wait_state"},
    "timeline": {"types"},
    "runtree": {"errors", "types", "wait_state"},
    "pages": {"runtree", "timeline"},
    "waits": {"asking", "errors", "types", "validation", "wait_state"},
    "schedules": {"errors", "types"},
    "rates": {"errors", "validation"},
    "budgets": {"errors", "validation"},
    "port": {"budgets", "errors", "evidence", "rates", "types", "waits"},
    "retrieval": {"errors", "evidence", "validation"},
    "tracing": {"_version", "errors", "types"},
    "storage": {"budgets", "clock", "database_url", "errors", "evidence", "ids", "logs", "rates",
                "types", "validation", "wait_state", "waits"},
    "testing": {"app", "backoff", "budgets", "clock", "errors", "evidence", "fence", "ids", "rates",
                "runtime",
                "storage",
                "types", "validation", "wait_state", "waits"},
    "fence": {"asgi", "clock", "errors", "storage", "tracing", "types", "validation"},
    "ledger": GROUND | DOMAIN | {"storage", "tracing"},
    "app": {"asking", "database_url", "errors", "labels", "ledger", "options", "rates",
            "retrieval", "schedules", "tooltypes", "types", "validation", "waits"},
    "runtime": GROUND | DOMAIN | {"app", "ledger", "tracing"},
    "replay": GROUND | DOMAIN | {"app", "ledger", "runtime"},
    "evaluation": GROUND | DOMAIN | {"app", "ledger", "replay"},
    "client": GROUND | DOMAIN | {"tracing"},
    "integrations": GROUND | DOMAIN | {"app", "client", "ledger"},
    "mcp": GROUND | DOMAIN | {"app", "integrations", "ledger"},
    "service": GROUND | DOMAIN | {"ledger"},
    "demo": {FACE, "clock", "errors", "fence", "pages", "storage", "testing"},
    "chaos": {FACE, "clock", "errors", "fence", "storage", "testing"},
    "cli": GROUND | DOMAIN | {"app", "chaos", "demo", "evaluation", "ledger", "mcp", "replay",
                              "runtime", "service", "storage"},
    "__init__": {FACE, *GROUND, *DOMAIN, "app", "client", "fence", "ledger", "replay",
                 "retrieval", "runtime"},
}  # fmt: skip

# The frameworks each integration is written against: imported by that module alone.
FRAMEWORKS = {
    "integrations/openai_agents.py": {"agents"},
    "integrations/langgraph.py": {"langgraph", "langchain_core"},
    "integrations/pydantic_ai.py": {"pydantic_ai"},
    "integrations/fastmcp.py": {"fastmcp"},
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


def _tenure_parts(path: Path) -> set[str]:
    """The parts of tenure a module imports (FACE for the package face itself; a submodule
    imported as `from tenure import fence` is that part)."""
    parts: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == FACE:
                names = [f"{FACE}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if _within(name, FACE):
                head = name.split(".")[1] if "." in name else FACE
                parts.add(head if head in ALL_PARTS else FACE)
    return parts


ALL_PARTS = {_part(path) for path in _modules()}


def test_every_part_has_a_row() -> None:
    assert set(ALLOWED) == ALL_PARTS


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_a_part_imports_only_what_its_row_allows(part: str) -> None:
    """No module imports a part its row does not name (a layer above it, or the face)."""
    wrong = {
        f"{path.relative_to(PACKAGE)} imports {other}"
        for path in _modules()
        if _part(path) == part
        for other in _tenure_parts(path) - ALLOWED[part] - {part}
    }
    assert wrong == set()


def test_the_allow_list_has_no_cycle() -> None:
    """Between parts, dependencies point one way (a part never allows a part that allows it,
    through any chain), the package face aside."""
    for part, allowed in ALLOWED.items():
        seen: set[str] = set()
        todo = [other for other in allowed if other != FACE]
        while todo:
            other = todo.pop()
            assert other != part, f"{part} reaches itself through {sorted(seen)}"
            if other not in seen:
                seen.add(other)
                todo.extend(x for x in ALLOWED.get(other, ()) if x != FACE)


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
    """Every module and every SQL file reads in one sitting: at most ~600 lines."""
    files = [*_modules(), *sorted(PACKAGE.rglob("*.sql"))]
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in files
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


# The ledger's faces. The application holds a `Ledger`, the worker runtime a `LeasePort`; what
# a ledger is made of (its store, its watch of ended jobs, its parts) is reached from
# src/tenure/ledger/ alone. Attribute access is what the import rows above cannot see.
LEDGER_INSIDES = {
    "store",
    "ended",
    "_store",
    "_ended",
    "_core",
    "_port",
    "_operations",
    "_submission",
    "_leases",
    "_reading",
    "_waits",
    "_evidence",
    "_rollouts",
}
# The composition root: the one runtime module that opens a ledger and hands its port on.
RUNTIME_ROOT = "runtime/worker.py"


def _names_a_ledger(node: ast.expr) -> bool:
    """`ledger`, `self.ledger`, `self._ledger()`, `live.ledger`, `worker_ledger`, ..."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return "ledger" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "ledger" in node.attr.lower()
    return False


def _reach_arounds(text: str, where: str) -> list[str]:
    return [
        f"{where}:{node.lineno} reads .{node.attr} of a ledger"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Attribute)
        and node.attr in LEDGER_INSIDES
        and _names_a_ledger(node.value)
    ]


def test_nothing_outside_the_ledger_reaches_into_a_ledger() -> None:
    """No `.store`, `.ended` or part of a ledger is read outside src/tenure/ledger/."""
    found = [
        hit
        for path in _modules()
        if _part(path) != "ledger"
        for hit in _reach_arounds(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE)))
    ]
    assert found == []


def test_the_reach_around_check_sees_attribute_access() -> None:
    """The check above finds what an import check cannot (so that it can fail)."""
    text = "def f(ledger, self):\n    ledger.store.where\n    self._ledger()._ended\n"
    assert sorted(_reach_arounds(text, "sample.py")) == [
        "sample.py:2 reads .store of a ledger",
        "sample.py:3 reads ._ended of a ledger",
    ]


def test_the_runtime_is_typed_against_the_port_alone() -> None:
    """Of tenure.runtime, only the composition root imports tenure.ledger; the rest use
    `tenure.port.LeasePort` (so a handler test can run on an in-memory port)."""
    importers = {
        str(path.relative_to(PACKAGE))
        for path in _modules()
        if _part(path) == "runtime"
        and any(_within(name, "tenure.ledger") for name in _imports(path))
    }
    assert importers == {RUNTIME_ROOT}


def test_the_ledger_shows_the_application_face_alone() -> None:
    """`Ledger`'s public attributes are the calls the tutorials teach; operations and the
    worker's protocol are elsewhere (old names answer through a deprecation, not the class)."""
    import tenure

    public = {name for name in dir(tenure.Ledger) if not name.startswith("_")}
    assert public == {
        "cancel",
        "children",
        "claim",
        "close",
        "complete",
        "events",
        "evidence",
        "extend",
        "fail",
        "get",
        "job_cost",
        "list",
        "max_payload_bytes",
        "migrate",
        "now",
        "operations",
        "release",
        "requeue",
        "save_step",
        "signal",
        "stages",
        "submit",
        "submit_many",
        "submit_or_find",
        "wait",
    }
