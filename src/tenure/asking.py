"""What a job asks for while it waits for a signal: a form for a person (MCP elicitation), a
model's answer (MCP sampling) or the client's roots. `ctx.wait_for(name, ask=...)` stores the
question with the wait; `tenure mcp` puts it to the caller (as an input request of a
synchronous call or of a task) and sends the answer as the signal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenure.errors import InvalidArgument
from tenure.validation import encode_json

ELICIT = "elicitation/create"
SAMPLE = "sampling/createMessage"
LIST_ROOTS = "roots/list"
# The client capability each input request needs (MCP's names).
CAPABILITY = {ELICIT: "elicitation", SAMPLE: "sampling", LIST_ROOTS: "roots"}
# A question is stored with the job's wait: it is bounded as a payload is, but smaller.
MAX_ASK_BYTES = 64 * 1024
MAX_TOKENS = 1_000_000


@dataclass(frozen=True, slots=True)
class Ask:
    """One question, as the MCP request that puts it (`method`, `params`). Build it with
    `Ask.form`, `Ask.sample` or `Ask.roots`; each checks its input."""

    method: str
    params: dict[str, Any]

    @classmethod
    def form(cls, message: str, schema: dict[str, Any] | None = None) -> Ask:
        """A form for a person: `message`, and the flat object `schema` of its fields. The
        signal's payload is the filled form, or {"action": "decline"|"cancel"}."""
        schema = {"type": "object", "properties": {}} if schema is None else schema
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise InvalidArgument('a form\'s schema must be an object schema ({"type": "object"})')
        return cls._checked(
            ELICIT, {"mode": "form", "message": _text(message), "requestedSchema": schema}
        )

    @classmethod
    def sample(cls, prompt: str, *, max_tokens: int = 1000, system: str | None = None) -> Ask:
        """A model's answer to `prompt` (the caller's model). The signal's payload is the
        sampling result: {"role", "content": {"type": "text", "text"}, "model", ...}."""
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise InvalidArgument(f"max_tokens must be an integer, got {max_tokens!r}")
        if not 1 <= max_tokens <= MAX_TOKENS:
            raise InvalidArgument(f"max_tokens must be from 1 to {MAX_TOKENS}, got {max_tokens}")
        params: dict[str, Any] = {
            "messages": [{"role": "user", "content": {"type": "text", "text": _text(prompt)}}],
            "maxTokens": max_tokens,
        }
        if system is not None:
            params["systemPrompt"] = _text(system)
        return cls._checked(SAMPLE, params)

    @classmethod
    def roots(cls) -> Ask:
        """The client's roots. The signal's payload is {"roots": [{"uri", "name"?}, ...]}."""
        return cls(LIST_ROOTS, {})

    @classmethod
    def _checked(cls, method: str, params: dict[str, Any]) -> Ask:
        encode_json(params, "question", MAX_ASK_BYTES)
        return cls(method, params)

    def document(self) -> dict[str, Any]:
        """The question as stored with the wait."""
        return {"method": self.method, "params": self.params}

    @classmethod
    def from_document(cls, document: Any) -> Ask | None:
        """The question a stored wait holds, if it holds one this version understands."""
        if not isinstance(document, dict):
            return None
        method, params = document.get("method"), document.get("params")
        if method not in CAPABILITY or not isinstance(params, dict):
            return None
        return cls(method, params)

    def answer(self, response: Any) -> Any:
        """The signal an MCP input response to this question sends. A response of the wrong
        shape raises `InvalidArgument`: nothing is sent, and a valid answer may follow."""
        if self.method == ELICIT:
            return form_answer(response)
        if not isinstance(response, dict):
            raise InvalidArgument(
                f"the answer to {self.method} must be an object, got {type(response).__name__}"
            )
        if self.method == SAMPLE and not isinstance(response.get("content"), (dict, list)):
            raise InvalidArgument("a sampling answer must hold the model's content")
        if self.method == LIST_ROOTS and not isinstance(response.get("roots"), list):
            raise InvalidArgument("a roots answer must hold a list of roots")
        return response


def form_answer(response: Any) -> Any:
    """The signal a form's response sends: the form's content when accepted, else
    {"action": "decline"} or {"action": "cancel"} for the handler to act on."""
    if not isinstance(response, dict):
        raise InvalidArgument(
            f"an input response must be an object with an action, got {type(response).__name__}"
        )
    action = response.get("action")
    if action == "accept":
        content = response.get("content", {})
        if not isinstance(content, dict):
            raise InvalidArgument("an accepted input response's content must be an object")
        return content
    if action in ("decline", "cancel"):
        return {"action": action}
    raise InvalidArgument(
        f"an input response's action must be accept, decline or cancel, got {action!r}"
    )


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"a question's text must be a non-empty string, got {value!r}")
    return value
