"""The named SQL blocks: one family per store method in both dialects, and the fence predicate
on every lease-guarded write (invariant 4) checked rather than trusted."""

from __future__ import annotations

import inspect

import pytest

from tenure.storage.base import FenceTx, Store
from tenure.storage.queries import (
    guards,
    load_queries,
    method_of,
    missing_predicate,
    parse_named_queries,
)

DIALECTS = ["tenure.storage.sqlite", "tenure.storage.postgres"]


def _protocol_methods(protocol: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(protocol, inspect.isfunction)}


STORE_METHODS = _protocol_methods(Store)
FENCE_TX_METHODS = {f"fence_{name}" for name in _protocol_methods(FenceTx)}


def _guarded(package: str) -> set[str]:
    return {name for name, sql in load_queries(package).items() if "lease" in guards(sql)}


@pytest.mark.parametrize("package", DIALECTS)
def test_every_block_belongs_to_a_store_method(package: str) -> None:
    """A block is named after the Store (or FenceTx) method that runs it, or `method__step`."""
    strays = {
        name
        for name in load_queries(package)
        if method_of(name) not in STORE_METHODS | FENCE_TX_METHODS
    }
    assert strays == set()


def test_both_dialects_have_blocks_for_the_same_methods() -> None:
    """Name parity: the methods that run SQL are the same in both dialects."""
    sqlite, postgres = ({method_of(n) for n in load_queries(d)} for d in DIALECTS)
    assert sqlite == postgres


@pytest.mark.parametrize("package", DIALECTS)
def test_every_guarded_block_says_the_whole_fence_predicate(package: str) -> None:
    """Each `-- guard: lease` block names state 'running', owner, token and an unexpired lease."""
    queries = load_queries(package)
    guarded = _guarded(package)
    assert guarded, "no block is marked as lease-guarded"
    assert {name: missing_predicate(queries[name]) for name in guarded} == {
        name: [] for name in guarded
    }


def test_both_dialects_guard_the_same_methods() -> None:
    """The marked sets match: a lease write guarded in one dialect is guarded in the other."""
    sqlite, postgres = ({method_of(n) for n in _guarded(d)} for d in DIALECTS)
    assert sqlite == postgres
    assert {"extend_many", "save_step", "fail", "release", "stage_start", "stage_done"} <= sqlite


def test_the_predicate_check_catches_a_write_that_forgets_the_lease_end() -> None:
    """A guarded block without `lease_until >` is reported, so the check can fail."""
    sql = parse_named_queries(
        "-- name: save_step\n-- guard: lease\nUPDATE tenure_jobs SET step = 1\n"
        "WHERE id = :id AND state = 'running' AND owner_id = :o AND fencing_token = :t;\n"
    )["save_step"]
    assert guards(sql) == {"lease"}
    assert missing_predicate(sql) == ["lease_until >"]


def test_a_query_name_may_not_repeat() -> None:
    """A duplicated `-- name:` block is an error, not a silent override."""
    with pytest.raises(ValueError, match="twice"):
        parse_named_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
