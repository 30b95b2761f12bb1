"""Questions before the job (SEP-2322 rounds, then the job or its task, as SEP-2663's
composition has it): a tool declared with `asks_first` answers a 2026-07-28 call that does not
carry every answer with `input_required` and no job; the call that does makes the job, or its
task, and sends the answers as its first signals. The round's `requestState` holds only a
nonce: the job's idempotency key when the caller gives none, so a repeated last round finds
the job it made."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from tenure.asking import CAPABILITY
from tenure.errors import InvalidArgument
from tenure.mcp.tools import JobTool
from tenure.types import JSON

FIRST_PREFIX = "tenure-first:"
_NONCE = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class FirstRound:
    """A call of a tool that asks first: the questions still unanswered (`input_required`
    with `questions`), or every answer (`answers`) and the key the job is made with."""

    questions: dict[str, Any]
    answers: dict[str, JSON]
    state: str

    @property
    def key(self) -> str:
        return "mcp-first:" + self.state.removeprefix(FIRST_PREFIX)

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
    tool: JobTool, capabilities: Any, responses: dict[str, Any], state: str | None
) -> FirstRound:
    """The call's questions still to answer (those the client declared it can answer), or its
    answers, each checked (`InvalidArgument` for a malformed one or an altered state: nothing
    is made)."""
    if state is None:
        state = FIRST_PREFIX + uuid.uuid4().hex
    elif not _NONCE.fullmatch(state.removeprefix(FIRST_PREFIX)):
        raise InvalidArgument("requestState names no round of this call: it was altered")
    questions: dict[str, Any] = {}
    answers: dict[str, JSON] = {}
    for name, ask in tool.asks_first:
        if capabilities is None or getattr(capabilities, CAPABILITY[ask.method], None) is None:
            continue  # left to the job: tenure_signal or tasks/update answers it
        if name in responses:
            answers[name] = ask.answer(responses[name])
        else:
            questions[name] = ask.document()
    return FirstRound(questions, answers, state)
