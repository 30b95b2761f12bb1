"""The app of bench/mcp_roundtrip.py: one no-op tool."""

from __future__ import annotations

from typing import Any

import tenure

app = tenure.App()


@app.job(
    "noop",
    tool=True,
    description="Do nothing, durably.",
    input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
)
def noop(ctx: tenure.JobContext, payload: Any) -> Any:
    return {"n": payload.get("n")}
