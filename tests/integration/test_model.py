"""The protocol's model (model/, invariant 18): spin checks every configuration, and every
lease-guarded SQL block names the model action it implements, as tests/unit/test_queries.py checks
the fence predicate on the same blocks."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "model"
SQL_FILES = sorted((ROOT / "src" / "tenure" / "storage").glob("*/*.sql"))
# A guard line: `-- guard: lease (model: ACTION)`, nothing else.
GUARD_LINE = re.compile(r"^--\s*guard:.*$", re.MULTILINE)
GUARD_FORM = re.compile(r"^-- guard: lease \(model: ([a-z_]+)\)$")
BLOCK_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$")
# The model's list of actions: lines `action NAME: what it models` in tenure.pml.
ACTION_LINE = re.compile(r"^\s*action ([a-z_]+): ", re.MULTILINE)


def _checker() -> Any:
    """model/check, loaded as a module (its configurations)."""
    loader = SourceFileLoader("tenure_model_check", str(MODEL / "check"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up while it loads
    loader.exec_module(module)
    return module


def _guards() -> list[tuple[str, str, str]]:
    """(file, block, guard line) for every guard line of every .sql file."""
    found: list[tuple[str, str, str]] = []
    for path in SQL_FILES:
        block = "(before any block)"
        for line in path.read_text(encoding="utf-8").splitlines():
            named = BLOCK_NAME.match(line)
            if named:
                block = named.group(1)
            elif GUARD_LINE.match(line):
                found.append((str(path.relative_to(ROOT)), block, line))
    return found


def _actions() -> set[str]:
    return set(ACTION_LINE.findall((MODEL / "tenure.pml").read_text(encoding="utf-8")))


def test_the_model_lists_its_guarded_actions() -> None:
    """The model names the actions a guard line may point at (else the next test is vacuous)."""
    assert _actions() >= {"complete", "extend", "record", "fail", "release", "wait"}
    assert len(_guards()) >= 20


def test_every_guard_line_names_a_model_action() -> None:
    """Each `-- guard:` line reads `-- guard: lease (model: ACTION)` with an action the model
    defines: a guard in the SQL has its action in the model (style habit 20)."""
    actions = _actions()
    wrong = {
        (file, block): line
        for file, block, line in _guards()
        if (form := GUARD_FORM.match(line)) is None or form.group(1) not in actions
    }
    assert wrong == {}, f"write `-- guard: lease (model: ACTION)`, ACTION one of {sorted(actions)}"


def test_every_model_action_guards_blocks_in_both_dialects() -> None:
    """No model action is left without the SQL it stands for, in either dialect."""
    named: dict[str, set[str]] = {}
    for file, _block, line in _guards():
        form = GUARD_FORM.match(line)
        if form is not None:
            named.setdefault(form.group(1), set()).add(file.split("/")[-2])
    assert {action: named.get(action, set()) for action in _actions()} == {
        action: {"postgres", "sqlite"} for action in _actions()
    }


def test_every_model_action_has_a_configuration_without_its_guard() -> None:
    """model/check runs each action without its guard and expects spin to refute it: a guard
    whose removal the model cannot catch is no check."""
    configs = _checker().CONFIGS
    removed = {
        action: [
            config.name
            for config in configs
            if f"NO_GUARD_{action.upper()}" in config.model.split(",") and config.refuted
        ]
        for action in _actions()
    }
    assert {action: bool(names) for action, names in removed.items()} == {
        action: True for action in removed
    }


@pytest.mark.timeout(600)
def test_spin_checks_every_configuration() -> None:
    """`model/check --quick`: every configuration meant to hold holds, every guard removed is
    refuted (CI's .ci/model runs the full bounds)."""
    missing = [tool for tool in ("spin", "gcc") if shutil.which(tool) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{', '.join(missing)} not installed: .ci/model installs spin")
        pytest.skip(f"{', '.join(missing)} not installed (apt-get install spin)")
    done = subprocess.run(
        [sys.executable, str(MODEL / "check"), "--quick"],
        capture_output=True,
        text=True,
        timeout=570,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 unexpected" in done.stdout


def _spin_small(tmp_path: Path, name: str, *defines: str) -> str:
    """One of the small models (model/signals.pml, model/budgets.pml) through spin and a
    safety verifier: its report."""
    for tool in ("spin", "gcc"):
        if shutil.which(tool) is None:
            if os.environ.get("CI") == "true":
                pytest.fail(f"{tool} not installed: .ci/model installs spin")
            pytest.skip(f"{tool} not installed (apt-get install spin)")
    model = tmp_path / name
    model.write_text((MODEL / name).read_text(encoding="utf-8"), encoding="utf-8")
    steps = [
        ["spin", "-a", *defines, model.name],
        ["gcc", "-O0", "-DSAFETY", "-o", "pan", "pan.c"],
        ["./pan", "-m10000"],
    ]
    report = ""
    for step in steps:
        done = subprocess.run(
            step, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )
        report = done.stdout + done.stderr
        assert done.returncode == 0 or step[0] == "./pan", report
    return report


def test_a_wait_for_several_signals_is_woken_once_by_its_last_signal(tmp_path: Path) -> None:
    """model/signals.pml: the `pending` names in the job's row wake it exactly once, by the
    last signal, in every interleaving; the design that decides from tenure_signals as the
    statement's snapshot shows it loses the wake-up of two signals sent at once."""
    holds = _spin_small(tmp_path, "signals.pml")
    assert "errors: 0" in holds and "states, stored" in holds, holds
    refuted = _spin_small(tmp_path, "signals.pml", "-DSNAPSHOT")
    assert "errors: 1" in refuted and "assertion violated" in refuted, refuted


def test_a_budget_is_overspent_by_at_most_one_call_per_job_and_no_hold_outlives_a_raise(
    tmp_path: Path,
) -> None:
    """model/budgets.pml: with the chain's rows locked for each charge, the calls a run makes
    stay within its budget plus one per job running when it ran out; a job held for its
    budget is released by a raise however the two interleave. Each half refuted without its
    mechanism: a charge that reads and writes back in two statements, a hold that does not
    look again."""
    holds = _spin_small(tmp_path, "budgets.pml")
    assert "errors: 0" in holds and "states, stored" in holds, holds
    unlocked = _spin_small(tmp_path, "budgets.pml", "-DNO_CHAIN_LOCK")
    assert "errors: 1" in unlocked and "assertion violated (calls<=" in unlocked, unlocked
    unchecked = _spin_small(tmp_path, "budgets.pml", "-DNO_RECHECK")
    assert "errors: 1" in unchecked and "held&&" in unchecked, unchecked
