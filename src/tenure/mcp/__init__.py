"""`tenure mcp MODULE:APP`: an app's tool job classes as an MCP server (extra `tenure[mcp]`),
with SEP-2663 durable tasks whose ids are job ids."""

from tenure.extras import needs

needs("mcp", "mcp", "jsonschema", "uvicorn", what="tenure mcp")

from tenure.mcp.serve import http_app, run_mcp
from tenure.mcp.server import KEY_META, TenureMcp
from tenure.mcp.tasks import TASKS

__all__ = ["KEY_META", "TASKS", "TenureMcp", "http_app", "run_mcp"]
