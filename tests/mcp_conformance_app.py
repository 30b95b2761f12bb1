"""The fixtures of the official MCP conformance suite (`@modelcontextprotocol/conformance`)
as tenure jobs, for `tenure mcp tests.mcp_conformance_app:app --transport streamable-http
--no-auth` with a `tenure worker` beside it (tests/integration/test_mcp_conformance.py). Only
the fixtures a JSON result can express are here; the rest are listed, with the reason, in
tests/mcp-conformance-baseline.yml."""

from __future__ import annotations

import base64
import io
import time
import wave
from typing import Any

import tenure

app = tenure.App()
QUICK: dict[str, Any] = {"lease": 10.0, "heartbeat": 2.0, "jitter": 2.0, "max_attempts": 1}
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}


def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": sorted(properties)}


@app.job("test_simple_text", tool=True, input_schema=NO_ARGUMENTS, **QUICK)
def simple_text(ctx: tenure.JobContext, payload: Any) -> str:
    """Answers with a simple text."""
    return "This is a simple text response for testing."


@app.job("test_error_handling", tool=True, input_schema=NO_ARGUMENTS, **QUICK)
def error_handling(ctx: tenure.JobContext, payload: Any) -> None:
    """Always reports an error."""
    raise tenure.NonRetryable("This tool intentionally returns an error for testing")


@app.job("test_tool_with_progress", tool=True, input_schema=NO_ARGUMENTS, **QUICK)
def with_progress(ctx: tenure.JobContext, payload: Any) -> str:
    """Three stages, each a progress notification."""
    for part in range(3):
        # Longer than the server's progress read (1 s): each stage is seen on its own.
        ctx.step(f"part_{part}", lambda: time.sleep(1.2))
    return "done in three parts"


@app.job("greet", tool=True, input_schema=_schema(name={"type": "string"}),
         task_support="forbidden", **QUICK)  # fmt: skip
def greet(ctx: tenure.JobContext, payload: Any) -> str:
    """Greets someone by name (never a task)."""
    return f"Hello, {payload['name']}!"


@app.job("slow_compute", tool=True, input_schema=_schema(seconds={"type": "number"}), **QUICK)
def slow_compute(ctx: tenure.JobContext, payload: Any) -> dict[str, Any]:
    """Computes for `seconds`; a cancel ends it cancelled."""
    deadline = time.monotonic() + max(0.0, float(payload["seconds"]))
    while time.monotonic() < deadline:
        ctx.check()
        time.sleep(0.05)
    return {"computed": payload["seconds"]}


@app.job("failing_job", tool=True, input_schema=NO_ARGUMENTS, task_support="required", **QUICK)
def failing_job(ctx: tenure.JobContext, payload: Any) -> None:
    """Reports a tool error after a second (always a task)."""
    time.sleep(1.0)
    raise tenure.NonRetryable("failing_job failed, as it always does")


@app.job("protocol_error_job", tool=True, input_schema=NO_ARGUMENTS, **QUICK)
def protocol_error_job(ctx: tenure.JobContext, payload: Any) -> None:
    """Crashes: an internal failure, not the tool's verdict."""
    raise RuntimeError("protocol_error_job crashed")


@app.job("confirm_delete", tool=True, input_schema=_schema(filename={"type": "string"}),
         **QUICK)  # fmt: skip
def confirm_delete(ctx: tenure.JobContext, payload: Any) -> str:
    """Deletes a file once someone confirms (the task asks for input)."""
    answer = ctx.wait_for("confirm", timeout=300)
    confirmed = isinstance(answer, dict) and answer.get("confirm") is True
    return f"{'deleted' if confirmed else 'kept'} {payload['filename']}"


# SEP-1613: a JSON Schema 2020-12 input schema is listed with every keyword as written.
SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@app.job("json_schema_2020_12_tool", tool=True, input_schema=SCHEMA_2020_12, **QUICK)
def json_schema_2020_12_tool(ctx: tenure.JobContext, payload: Any) -> str:
    """Takes arguments described by a JSON Schema 2020-12 document."""
    return "ok"


# Content that is not text: the handler returns MCP content blocks, the tool's answer as is.
PIXEL_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


def _silence_wav() -> str:
    """A tenth of a second of silence, as a base64 WAV file."""
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(8000)
        sound.writeframes(b"\x00\x00" * 800)
    return base64.b64encode(out.getvalue()).decode()


IMAGE = {"type": "image", "data": PIXEL_PNG, "mimeType": "image/png"}
RESOURCE = {
    "type": "resource",
    "resource": {"uri": "test://embedded", "mimeType": "text/plain", "text": "embedded text"},
}
CONTENT: dict[str, Any] = {"returns_content": True, "input_schema": NO_ARGUMENTS, **QUICK}


@app.job("test_image_content", tool=True, **CONTENT)
def image_content(ctx: tenure.JobContext, payload: Any) -> list[dict[str, Any]]:
    """Answers with an image."""
    return [IMAGE]


@app.job("test_audio_content", tool=True, **CONTENT)
def audio_content(ctx: tenure.JobContext, payload: Any) -> list[dict[str, Any]]:
    """Answers with a sound."""
    return [{"type": "audio", "data": _silence_wav(), "mimeType": "audio/wav"}]


@app.job("test_embedded_resource", tool=True, **CONTENT)
def embedded_resource(ctx: tenure.JobContext, payload: Any) -> list[dict[str, Any]]:
    """Answers with an embedded resource."""
    return [RESOURCE]


@app.job("test_multiple_content_types", tool=True, **CONTENT)
def multiple_content_types(ctx: tenure.JobContext, payload: Any) -> list[dict[str, Any]]:
    """Answers with text, an image and a resource."""
    return [{"type": "text", "text": "several kinds of content"}, IMAGE, RESOURCE]


# SEP-2322 (input on a synchronous call): each job asks its caller through `ctx.wait_for(...,
# ask=...)`; `tenure mcp` answers the call `input_required` and sends the retried call's answer
# as the signal. The requestState is the job's id, checked against the caller and the call.
def _form(message: str, **fields: str) -> tenure.Ask:
    properties = {name: {"type": kind} for name, kind in fields.items()}
    return tenure.Ask.form(
        message, {"type": "object", "properties": properties, "required": sorted(fields)}
    )


ASKING: dict[str, Any] = {"input_schema": NO_ARGUMENTS, **QUICK}


@app.job("test_input_required_result_elicitation", tool=True, **ASKING)
def input_elicitation(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks the caller's name and greets them."""
    answer = ctx.wait_for("user_name", timeout=300, ask=_form("What is your name?", name="string"))
    return f"Hello, {answer.get('name', 'stranger')}!"


@app.job("test_input_required_result_sampling", tool=True, **ASKING)
def input_sampling(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks the caller's model a question and answers with its words."""
    ask = tenure.Ask.sample("What is the capital of France?", max_tokens=100)
    answer = ctx.wait_for("capital_question", timeout=300, ask=ask)
    return f"The model said: {answer['content'].get('text', '')}"


@app.job("test_input_required_result_capabilities", tool=True, **ASKING)
def input_capabilities(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks the caller's model (a client without sampling is asked nothing)."""
    ask = tenure.Ask.sample("Say something.", max_tokens=50)
    answer = ctx.wait_for("said", timeout=300, ask=ask)
    return f"The model said: {answer['content'].get('text', '')}"


@app.job("test_input_required_result_list_roots", tool=True, **ASKING)
def input_list_roots(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks the caller's roots and names them."""
    answer = ctx.wait_for("client_roots", timeout=300, ask=tenure.Ask.roots())
    return "roots: " + ", ".join(str(root.get("uri")) for root in answer["roots"])


@app.job("test_input_required_result_request_state", tool=True, **ASKING)
def input_request_state(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks for a confirmation; the retried call finds this job by its requestState."""
    ctx.wait_for("confirm", timeout=300, ask=_form("Please confirm", ok="boolean"))
    return "state-ok: the retried call resumed this job"


@app.job("test_input_required_result_tampered_state", tool=True, **ASKING)
def input_tampered_state(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks for a confirmation; an altered requestState names no job and is refused."""
    ctx.wait_for("confirm", timeout=300, ask=_form("Please confirm", ok="boolean"))
    return "confirmed"


@app.job("test_input_required_result_multi_round", tool=True, **ASKING)
def input_multi_round(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks two questions in turn."""
    name = ctx.wait_for(
        "step1", timeout=300, ask=_form("Step 1: What is your name?", name="string")
    )
    color = ctx.wait_for(
        "step2", timeout=300, ask=_form("Step 2: What is your favorite color?", color="string")
    )
    return f"{name.get('name')} likes {color.get('color')}"


@app.job("test_input_required_result_multiple_inputs", tool=True, **ASKING)
def input_multiple(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks three questions at once: a form, the caller's model and its roots."""
    answers = ctx.wait_for_all(
        {
            "user_name": _form("What is your name?", name="string"),
            "greeting": tenure.Ask.sample("Generate a greeting", max_tokens=50),
            "client_roots": tenure.Ask.roots(),
        },
        timeout=300,
    )
    said, roots = answers["greeting"]["content"].get("text", ""), answers["client_roots"]["roots"]
    return f"{said} {answers['user_name'].get('name')} ({len(roots)} roots)"


@app.job("multi_input", tool=True, input_schema=NO_ARGUMENTS, task_support="required", **QUICK)
def multi_input(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks two forms at once; the task waits until both are answered, in any order."""
    form = {"name": "string", "confirm": "boolean"}
    answers = ctx.wait_for_all(
        {"first": _form("First input", **form), "second": _form("Second input", **form)},
        timeout=300,
    )
    return " and ".join(str(answers[key].get("name")) for key in ("first", "second"))


# SEP-2663's composition: the caller's name is asked first, in a round without a task; the
# call that answers it makes the task (and the answer is the job's signal).
USER_NAME = {"user_name": _form("What is your name?", name="string")}


@app.job("test_tool_with_task", tool=True, task_support="required", asks_first=USER_NAME,
         **ASKING)  # fmt: skip
def tool_with_task(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks the caller's name before its task, then greets them from the task."""
    answers = ctx.wait_for_all(USER_NAME, timeout=300)
    return f"Hello from the task, {answers['user_name'].get('name')}!"


# Protocols before 2026-07-28 (tools-call-*, elicitation-sep*): the same `ctx.wait_for(...,
# ask=...)`, which `tenure mcp` puts to the caller as a request on the call's own stream; its
# answer is the signal. The job's progress goes out as log messages at the client's level.
@app.job("test_tool_with_logging", tool=True, input_schema=NO_ARGUMENTS, **QUICK)
def with_logging(ctx: tenure.JobContext, payload: Any) -> str:
    """Two stages: the caller that set a log level hears of each, and of the job's state."""
    ctx.step("started", lambda: "started")
    ctx.step("processed", lambda: time.sleep(0.05))
    return "Tool with logging executed successfully"


@app.job("test_sampling", tool=True, input_schema=_schema(prompt={"type": "string"}), **QUICK)
def sampling(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks the caller's model to answer the prompt."""
    ask = tenure.Ask.sample(payload["prompt"], max_tokens=100)
    answer = ctx.wait_for("sampled", timeout=300, ask=ask)
    return f"LLM response: {answer['content'].get('text', '')}"


@app.job("test_elicitation", tool=True, input_schema=_schema(message={"type": "string"}), **QUICK)
def elicitation(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks the caller for a username and an email."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answer = ctx.wait_for("details", timeout=300, ask=tenure.Ask.form(payload["message"], schema))
    return f"User response: {answer}"


@app.job("test_elicitation_sep1034_defaults", tool=True, **ASKING)
def elicitation_defaults(ctx: tenure.JobContext, payload: Any) -> str:
    """A form whose fields carry defaults of each primitive type (SEP-1034)."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {
                "type": "string",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "default": True},
        },
    }
    answer = ctx.wait_for("profile", timeout=300, ask=tenure.Ask.form("Your profile", schema))
    return f"Elicitation completed: {answer}"


def _titled(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"const": value, "title": title} for value, title in pairs]


@app.job("test_elicitation_sep1330_enums", tool=True, **ASKING)
def elicitation_enums(ctx: tenure.JobContext, payload: Any) -> str:
    """A form with each enum shape of SEP-1330: untitled and titled, single and multiple."""
    options = ["option1", "option2", "option3"]
    single = _titled(
        ("value1", "First Option"), ("value2", "Second Option"), ("value3", "Third Option")
    )
    multi = _titled(
        ("value1", "First Choice"), ("value2", "Second Choice"), ("value3", "Third Choice")
    )
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {"type": "string", "oneOf": single},
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {"type": "array", "items": {"anyOf": multi}},
        },
    }
    answer = ctx.wait_for("choices", timeout=300, ask=tenure.Ask.form("Choose", schema))
    return f"Elicitation completed: {answer}"


# SEP-2575's diagnostics (server-stateless, 2026-07-28): answered within half a second.
@app.job("test_logging_tool", tool=True, input_schema=NO_ARGUMENTS, **QUICK)
def logging_tool(ctx: tenure.JobContext, payload: Any) -> str:
    """A quick job: a request without a log level hears no log message of it."""
    return "logged nothing"


@app.job("test_streaming_elicitation", tool=True, **ASKING)
def streaming_elicitation(ctx: tenure.JobContext, payload: Any) -> str:
    """Asks at once: the answer is `input_required`, never a request on the stream."""
    answer = ctx.wait_for("name", timeout=300, ask=_form("What is your name?", name="string"))
    return f"Hello, {answer.get('name')}!"


@app.job("test_missing_capability", tool=True, needs=["sampling"], **ASKING)
def missing_capability(ctx: tenure.JobContext, payload: Any) -> str:
    """Needs the caller's model: a client without sampling is refused before any job."""
    answer = ctx.wait_for("said", timeout=300, ask=tenure.Ask.sample("Say hi.", max_tokens=10))
    return f"The model said: {answer['content'].get('text', '')}"
