"""Issue 42, the injected clock: every module that keeps time takes a `tenure.clock.Clock`
(`clock: Clock = SYSTEM_CLOCK`) and reads, sleeps and stamps through it; only `tenure/clock.py`
and `tenure/testing/clock.py` call `time` themselves. Checked on the source (`ast`), and shown
to work where the wall clock was read before: deadlines and pauses a `FakeClock` drives pass in
no real time."""

from __future__ import annotations

import ast
import io
import threading
from pathlib import Path

import pytest

import tenure
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.demo.run import Timeline
from tenure.testing.clock import FakeClock

PACKAGE = Path(tenure.__file__).resolve().parent
# The two modules that may read the machine's clocks: the system's clock, and the test's.
CLOCK_MODULES = frozenset({"clock.py", "testing/clock.py"})
# The functions of `time` that read or wait on a clock (the _ns forms are the same clocks).
CLOCK_FUNCTIONS = frozenset(
    {"monotonic", "monotonic_ns", "time", "time_ns", "sleep", "perf_counter", "perf_counter_ns"}
)


def clock_reads(source: str) -> list[tuple[int, str]]:
    """(line, what) for every use of a clock function of `time` in `source`: `time.X` (under
    any name `time` is imported as), `from time import X` and the calls of what it bound."""
    tree = ast.parse(source)
    modules: set[str] = set()
    functions: dict[str, str] = {}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name == "time")
        elif isinstance(node, ast.ImportFrom) and node.module == "time" and not node.level:
            for alias in node.names:
                if alias.name in CLOCK_FUNCTIONS or alias.name == "*":
                    functions[alias.asname or alias.name] = alias.name
                    found.append((node.lineno, f"from time import {alias.name}"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr in CLOCK_FUNCTIONS
        ):
            found.append((node.lineno, f"time.{node.attr}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in functions
        ):
            found.append((node.lineno, f"{node.func.id}() (time.{functions[node.func.id]})"))
    return sorted(found)


def package_clock_reads() -> dict[str, list[tuple[int, str]]]:
    """Every module of the package (its path under src/tenure) with the clock reads in it."""
    reads = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found = clock_reads(path.read_text(encoding="utf-8"))
        if found:
            reads[path.relative_to(PACKAGE).as_posix()] = found
    return reads


def test_no_module_reads_the_time_itself() -> None:
    """Outside the two clock modules, no module calls
    time.monotonic, time.time, time.sleep or time.perf_counter: each takes a Clock."""
    offenders = [
        f"src/tenure/{module}:{line}: {what}"
        for module, found in package_clock_reads().items()
        if module not in CLOCK_MODULES
        for line, what in found
    ]
    assert not offenders, (
        "these read the machine's clock themselves; take a `clock: Clock = SYSTEM_CLOCK` "
        "(tenure.clock) and call it instead:\n  " + "\n  ".join(offenders)
    )


def test_the_exempt_modules_are_the_clocks() -> None:
    """The exemption names modules that exist; the system's clock is the one that reads."""
    assert all((PACKAGE / module).is_file() for module in CLOCK_MODULES)
    assert set(package_clock_reads()) == {"clock.py"}


def test_the_check_finds_every_form_of_a_clock_read() -> None:
    source = (
        "import time\n"
        "import time as t\n"
        "from time import monotonic, sleep as nap, strftime\n"
        "a = time.monotonic()\n"
        "b = t.perf_counter()\n"
        "c = monotonic()\n"
        "nap(1)\n"
        "d = time.strftime('%Y')\n"
        "e = clock.monotonic()\n"
        "f = '''time.sleep(1)'''\n"
        "g = field(default_factory=time.time)\n"
    )
    assert clock_reads(source) == [
        (3, "from time import monotonic"),
        (3, "from time import sleep"),
        (4, "time.monotonic"),
        (5, "time.perf_counter"),
        (6, "monotonic() (time.monotonic)"),
        (7, "nap() (time.sleep)"),
        (11, "time.time"),
    ]


# -- the clocks ---------------------------------------------------------------------------------


def test_both_clocks_are_clocks() -> None:
    clocks: list[Clock] = [SYSTEM_CLOCK, FakeClock()]
    for clock in clocks:
        assert clock.monotonic() <= clock.monotonic()
        assert clock.wall() > 1_600_000_000  # seconds since the epoch
        clock.sleep(0.0)


def test_a_fake_sleep_moves_the_clock_and_wakes_the_waits_it_passes() -> None:
    clock = FakeClock(start=50.0, wall_start=1_800_000_000.0)
    event = threading.Event()
    ended: list[bool] = []
    waiter = threading.Thread(target=lambda: ended.append(clock.wait(event, 30.0)))
    waiter.start()
    clock.sleep(10.0)
    waiter.join(0.2)
    assert waiter.is_alive() and not ended
    clock.sleep(20.0)
    waiter.join(5)
    assert ended == [False]
    assert (clock.monotonic(), clock.wall()) == (80.0, 1_800_000_030.0)
    with pytest.raises(ValueError):
        clock.sleep(-1.0)


# -- injection where the wall clock was read --------------------------------------------------


def test_the_demo_stamps_its_lines_by_its_clock() -> None:
    clock = FakeClock(wall_start=1_800_000_000.0)
    out = io.StringIO()
    timeline = Timeline(out, colour=False, clock=clock)
    clock.advance(2.5)
    timeline.demo("W1 started")
    assert timeline.lines[0].at == 1_800_000_002.5
    timeline.render()
    assert "  2.50s  demo  W1 started" in out.getvalue()
