"""A waiting job's `wait` document, parsed: a wait for one signal as stored before
`wait_for_all` existed, and a wait for several as its `pending` shrinks to nothing."""

from __future__ import annotations

from tenure.asking import Ask
from tenure.runtime.stage_names import StageNames
from tenure.wait_state import WaitState

ASK = Ask.roots()


def test_a_wait_for_one_signal_reads_as_before() -> None:
    state = WaitState.parse({"for": "signal", "position": 2, "name": "ok", "ask": ASK.document()})
    assert state is not None
    assert (state.signal, state.signals, state.ask, dict(state.asks)) == (
        "ok",
        ("ok",),
        ASK,
        {"ok": ASK},
    )
    assert state.describe() == "signal ok"


def test_a_wait_for_several_lists_what_is_still_to_come() -> None:
    document = {"for": "signal", "position": 0, "names": ["a", "b"], "asks": {"b": ASK.document()}}
    both = WaitState.parse({**document, "pending": ["a", "b"]})
    one = WaitState.parse({**document, "pending": ["b"]})
    none = WaitState.parse({**document, "pending": []})
    assert both is not None and one is not None and none is not None
    assert (both.signals, both.describe()) == (("a", "b"), "signals a, b")
    assert (one.signal, one.ask, one.describe()) == ("b", ASK, "signal b")
    assert (none.signal, none.describe()) == (None, "signals, all received (resuming)")


def test_stage_names_of_several_signals_cannot_collide() -> None:
    assert StageNames.signals(("a,b",)) != StageNames.signals(("a", "b"))
