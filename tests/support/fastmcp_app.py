"""A FastMCP server whose tools are tenure jobs, written as a FastMCP user writes one, for
tests/integration/test_fastmcp.py: `fastmcp run tests/support/fastmcp_app.py:mcp` serves it,
`tenure worker tests.support.fastmcp_app:app` runs its jobs (both on $TENURE_DATABASE_URL or
the worker's --db). `pay` charges the test's fenced bank as tests.support.apps's `pay` does,
and stops where the test says ($TENURE_TEST_KILL_AT), for it to kill the worker there or
cancel the call."""

from __future__ import annotations

from typing import Annotated, Any

from fastmcp import FastMCP
from pydantic import Field

import tenure
from tenure.integrations.fastmcp import durable
from tests.support.apps import NAME, kill_point, post
from tests.support.timing import FAST

app = tenure.App()
mcp = FastMCP("payments")


@mcp.tool
@durable(app, **FAST)
def pay(
    ctx: tenure.JobContext, amount: Annotated[int, Field(ge=1)], memo: str = ""
) -> dict[str, Any]:
    """Pay an amount, once."""
    ctx.step("quote", lambda: amount)

    def charge(fx: tenure.Effect) -> Any:
        kill_point("before_send")
        receipt = post("charge", fx, fx.job_id, {"amount_cents": amount})
        kill_point("in_effect")
        return receipt

    receipt = ctx.effect("charge", charge)
    return {"paid": receipt["amount_cents"], "by": NAME}


@mcp.tool
@durable(app, max_attempts=1, **FAST)
async def refund(ctx: tenure.JobContext, order: str) -> dict[str, Any]:
    """Refund an order (never paid here: the job fails)."""
    raise tenure.NonRetryable(f"order {order} was never paid", code="not_paid")


@mcp.tool
@durable(app, **FAST)
def keep(ctx: tenure.JobContext, note: Any) -> dict[str, Any]:
    """Keep a note: any JSON value (the tests' deep and odd arguments)."""
    return {"kept": True}
