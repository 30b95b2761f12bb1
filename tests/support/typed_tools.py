"""Tools written from Python types (a Pydantic model with optional, nested, enum and literal
fields, a TypedDict, a dataclass), for the MCP Inspector's strict schema check
(tests/integration/test_mcp_inspector.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

import tenure

app = tenure.App()


class Method(enum.Enum):
    CARD = "card"
    BANK = "bank"


class Address(BaseModel):
    street: str
    city: str | None = None


class Order(BaseModel):
    order: str = Field(description="the order id")
    cents: int = Field(gt=0)
    method: Method = Method.CARD
    note: str | None = None
    ship_to: Address | None = None
    tags: list[str] = []
    speed: Literal["fast", "slow"] = "fast"


class Receipt(BaseModel):
    order: str
    refunded: int
    memo: str | None = None


class Query(TypedDict):
    text: str
    limit: int


@dataclass
class Point:
    x: float
    y: float


@app.job("refund_typed", tool=True, input_schema=Order)
def refund_typed(ctx: tenure.JobContext, payload: Order) -> Receipt:
    """Refund an order, once."""
    return Receipt(order=payload.order, refunded=payload.cents)


@app.job("search_typed", tool=True, input_schema=Query)
def search_typed(ctx: tenure.JobContext, payload: Query) -> list[str]:
    """Search for text."""
    return [payload["text"]] * payload["limit"]


@app.job("point_typed", tool=True, input_schema=Point)
def point_typed(ctx: tenure.JobContext, payload: Point) -> dict[str, float]:
    """Measure a point."""
    return {"norm": (payload.x**2 + payload.y**2) ** 0.5}
