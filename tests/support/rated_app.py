"""An app with a rate-limited kind, for tests/integration/test_rates.py's worker processes:
`call` may be claimed 10 times a second across every worker of the database."""

from __future__ import annotations

from typing import Any

import tenure

app = tenure.App()


@app.job("call", rate=tenure.Rate(10, per=1.0))
def call(ctx: tenure.JobContext, payload: Any) -> Any:
    return payload
