"""Structured logging: one line per event, ids and numbers only (invariant 14).

Every tenure log record carries its event name and fields; `JsonFormatter` renders them as one
JSON object per line. Without it, the message reads `event key=value …`.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

FIELDS = "tenure_fields"
EVENT = "tenure_event"


def emit(logger: logging.Logger, level: int, event: str, **fields: Any) -> None:
    """Log `event` with `fields` (never payloads, results or prompts: ids, sizes, hashes)."""
    if not logger.isEnabledFor(level):
        return
    text = " ".join(f"{key}={_plain(value)}" for key, value in fields.items())
    logger.log(level, "%s %s", event, text, extra={EVENT: event, FIELDS: fields})


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, event and its fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "event": getattr(record, EVENT, None) or record.getMessage(),
        }
        for key, value in (getattr(record, FIELDS, None) or {}).items():
            line[key] = _plain(value)
        if record.exc_info and record.exc_info[0] is not None:
            line["error_type"] = record.exc_info[0].__name__
        return json.dumps(line, default=str)


def configure_json_logging(level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Send tenure's logs to `stream` (stderr) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tenure")
    logger.handlers = [h for h in logger.handlers if not isinstance(h, logging.StreamHandler)]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
