"""Questions before the job (SEP-2322 rounds, then the job or its task, as SEP-2663's
composition has it): a tool declared with `asks_first` answers a 2026-07-28 call that does not
carry every answer with `input_required` and no job; the call that does makes the job, or its
task, and sends the answers as its first signals. The round's `requestState` holds a nonce
(the job's idempotency key when the caller gives none, so a repeated last round finds the job
it made) and the answers given so far, so a caller may answer some questions now and the rest
later: they are its own answers, checked again each round."""

from __future__ import annotations

import base64
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from tenure.asking import CAPABILITY
from tenure.errors import InvalidArgument
from tenure.mcp.tools import JobTool
from tenure.types import JSON
from tenure.validation import encode_json

FIRST_PREFIX = "tenure-first:"
_NONCE = re.compile(r"[0-9a-f]{32}")
# The answers a round carries to the next (the caller's own, re-checked each round).
MAX_CARRIED_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class FirstRound:
    """A call of a tool that asks first: the questions still unanswered (`input_required`
    with `questions`), or every answer (`answers`) and the key the job is made with. `carried`
    are the responses given so far, which the next round's state hands back."""

    questions: dict[str, Any]
    answers: dict[str, JSON]
    nonce: str
    carried: dict[str, Any]

    @property
    def key(self) -> str:
        return "mcp-first:" + self.nonce

    @property
    def state(self) -> str:
        if not self.carried:
            return FIRST_PREFIX + self.nonce
        packed = json.dumps(self.carried, separators=(",", ":"), ensure_ascii=False)
        return f"{FIRST_PREFIX}{self.nonce}:{base64.urlsafe_b64encode(packed.encode()).decode()}"

    def input_required(self) -> dict[str, Any]:
        return {
            "resultType": "input_required",
            "inputRequests": self.questions,
            "requestState": self.state,
        }


def names_first_round(state: str | None) -> bool:
    """Whether a call's requestState is a first round's (not a job's)."""
    return state is None or state.startswith(FIRST_PREFIX)


def first_round(
    tool: JobTool,
    capabilities: Any,
    responses: dict[str, Any],
    state: str | None,
    max_bytes: int,
) -> FirstRound:
    """The call's questions still to answer (those the client declared it can answer), or its
    answers: this round's responses with those of earlier rounds (an earlier answer stands),
    each checked (`InvalidArgument` for a malformed or oversized one, or an altered state:
    nothing is made)."""
    nonce, earlier = _parsed(state)
    given = {**responses, **earlier}
    questions: dict[str, Any] = {}
    answers: dict[str, JSON] = {}
    for name, ask in tool.asks_first:
        if capabilities is None or getattr(capabilities, CAPABILITY[ask.method], None) is None:
            continue  # left to the job: tenure_signal or tasks/update answers it
        if name in given:
            answers[name] = ask.answer(given[name])
            encode_json(answers[name], "input response", max_bytes)
        else:
            questions[name] = ask.document()
    carried = {name: given[name] for name in answers}
    encode_json(carried, "the answers carried to the next round", MAX_CARRIED_BYTES)
    return FirstRound(questions, answers, nonce, carried)


def _parsed(state: str | None) -> tuple[str, dict[str, Any]]:
    """The round's nonce and the responses its state carries (a new nonce for round 1)."""
    if state is None:
        return uuid.uuid4().hex, {}
    nonce, _, packed = state.removeprefix(FIRST_PREFIX).partition(":")
    try:
        if not _NONCE.fullmatch(nonce) or len(packed) > 2 * MAX_CARRIED_BYTES:
            raise ValueError
        carried = json.loads(base64.b64decode(packed, b"-_", validate=True)) if packed else {}
        if not isinstance(carried, dict):
            raise ValueError
    except (ValueError, TypeError):
        raise InvalidArgument("requestState names no round of this call: it was altered") from None
    return nonce, carried
