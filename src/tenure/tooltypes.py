"""Tools written the way Python developers write them: a Pydantic model, a TypedDict or a
dataclass as a job class's input schema (and, when the handler's payload parameter names it,
the value the handler receives), the docstring as the description, and the return
annotation as the output schema. Pydantic is imported here only, and only when a class names
a type: plain JSON Schema dictionaries need nothing."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass
from typing import Any

from tenure.errors import InvalidJobClass, NonRetryable

JSON = Any


def is_schema_type(value: Any) -> bool:
    """A Pydantic model class, a TypedDict or a dataclass (a type a schema can be made of)."""
    if not isinstance(value, type):
        return False
    model = hasattr(value, "model_json_schema") and hasattr(value, "model_validate")
    # typing's and typing_extensions' TypedDicts alike (typing.is_typeddict knows only its own)
    typed_dict = issubclass(value, dict) and hasattr(value, "__required_keys__")
    return model or typed_dict or dataclasses.is_dataclass(value)


@dataclass(frozen=True, slots=True)
class TypedValue:
    """A schema type with its Pydantic adapter: validates a payload into it, dumps a result
    out of it as JSON."""

    type: Any
    adapter: Any

    def validate(self, payload: JSON) -> Any:
        """The payload as the handler's type; `NonRetryable` (`invalid_payload`) naming the
        fields, never their values, when it does not fit."""
        try:
            return self.adapter.validate_python(payload)
        except Exception as exc:  # pydantic.ValidationError: not importable without pydantic
            errors = getattr(exc, "errors", None)
            if errors is None:
                raise
            problems = [
                f"{'/'.join(map(str, e['loc'])) or '(payload)'}: {e['msg']}"
                for e in errors(include_input=False, include_url=False)
            ]
            raise NonRetryable(
                f"the payload does not fit {self.type.__name__}: {'; '.join(problems)}",
                code="invalid_payload",
            ) from None

    def dump(self, value: Any) -> JSON:
        """A handler's result as JSON (a model, a dataclass, a TypedDict: their fields)."""
        return self.adapter.dump_python(value, mode="json")


def typed_value(kind_type: Any, what: str) -> TypedValue:
    """The adapter of `kind_type`, or `InvalidJobClass` when Pydantic is not installed."""
    try:
        from pydantic import TypeAdapter
    except ImportError:
        raise InvalidJobClass(
            f"{what}: a {kind_type.__name__} as a schema needs pydantic "
            "(pip install 'tenure[mcp]'); or give input_schema as a JSON Schema dictionary"
        ) from None
    try:
        return TypedValue(kind_type, TypeAdapter(kind_type))
    except Exception as exc:  # pydantic.PydanticUserError and friends
        first = str(exc).splitlines()[0]
        raise InvalidJobClass(f"{what}: {kind_type.__name__} cannot be a schema: {first}") from None


def object_schema(value: TypedValue, what: str) -> dict[str, Any]:
    """The JSON Schema of a type that MCP can carry: an object whose every field has a JSON
    Schema (a callable, a set of arbitrary classes… is refused here, at registration)."""
    try:
        schema: dict[str, Any] = value.adapter.json_schema()
    except Exception as exc:  # PydanticInvalidForJsonSchema and friends
        raise InvalidJobClass(
            f"{what}: {value.type.__name__} has a field JSON Schema cannot express "
            f"({str(exc).splitlines()[0]}); "
            "use JSON types (str, int, float, bool, lists, dicts, nested models)"
        ) from None
    if schema.get("type") != "object":
        raise InvalidJobClass(f"{what}: {value.type.__name__} is not an object type")
    return schema


@dataclass(frozen=True, slots=True)
class ToolTypes:
    """What a handler's signature and docstring say about its tool."""

    description: str | None
    input_schema: dict[str, Any] | None
    payload: TypedValue | None
    result: TypedValue | None
    output_schema: dict[str, Any] | None


def tool_types(
    kind: str, handler: Any, input_schema: Any, description: str | None, *, tool: bool
) -> ToolTypes:
    """Read a handler for its tool: `input_schema` a dict (kept as is) or a schema type; the
    payload parameter's annotation (the same type: the handler gets the validated value; with
    no input_schema, a schema type there is the input schema); the return annotation (a
    schema type of an object: the output schema); the docstring (the description, unless
    one is given)."""
    what = f"job class {kind!r}"
    hints = _hints(handler)
    parameters = list(inspect.signature(handler).parameters)
    annotation = hints.get(parameters[1]) if len(parameters) > 1 else None
    declared = input_schema if is_schema_type(input_schema) else None
    if input_schema is None and tool and is_schema_type(annotation):
        declared = annotation
    typed = None if declared is None else typed_value(declared, what)
    schema = input_schema if typed is None else object_schema(typed, what)
    returned = hints.get("return")
    typed_result = (tool or typed is not None) and is_schema_type(returned)
    result = typed_value(returned, what) if typed_result else None
    return ToolTypes(
        description=description if description is not None or not tool else inspect.getdoc(handler),
        input_schema=schema,
        payload=typed if typed is not None and annotation is declared else None,
        result=result,
        output_schema=None if result is None else object_schema(result, what),
    )


def _hints(handler: Any) -> dict[str, Any]:
    """The handler's resolved annotations; none when a forward reference cannot be resolved."""
    try:
        return typing.get_type_hints(handler)
    except (NameError, TypeError):
        return {}
