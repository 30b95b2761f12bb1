"""Job classes that worker processes run in the fault tests: `tenure worker
tests.support.apps:app`. They talk to the test through marker files in $TENURE_TEST_DIR."""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import tenure
from tests.support.timing import FAST

DIR = Path(os.environ.get("TENURE_TEST_DIR", "."))
RECEIVER = os.environ.get("TENURE_TEST_RECEIVER", "")
NAME = os.environ.get("TENURE_TEST_NAME", f"pid-{os.getpid()}")

app = tenure.App()


def mark(name: str, text: str = "") -> None:
    """Append a line to a marker file (O_APPEND: safe across processes)."""
    with open(DIR / name, "a") as handle:
        handle.write(text + "\n")


def wait_for(name: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not (DIR / name).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(name)
        time.sleep(0.01)


def post(effect: str, fx: tenure.Effect, scope: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(  # noqa: S310 - the test receiver on loopback
        f"{RECEIVER}/{effect}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Idempotency-Key": fx.key,
            "X-Execution-Fence": str(fx.token),
            "X-Execution-Scope": scope,
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback only
        return json.loads(response.read())


@app.job("three_stages", **FAST)
def three_stages(ctx: tenure.JobContext, payload: Any) -> Any:
    """Stage two announces itself, then waits for the test (which may kill -9 us there)."""
    ctx.step("one", lambda: mark("ran", "1"))

    def two() -> None:
        mark("ran", "2")
        mark(f"in-two-{os.getpid()}")
        wait_for("go-two")

    ctx.step("two", two)
    ctx.step("three", lambda: mark("ran", "3"))
    return {"by": NAME}


@app.job("charge", lease=2.0, heartbeat=0.4, missed=1, jitter=0.5, backoff=0.01)
def charge(ctx: tenure.JobContext, payload: Any) -> Any:
    """The seed's unpleasant test. W1 sends the charge, then stalls inside the effect until
    the test lets it go; a naive handler, it carries on and tries a second effect."""

    def send(fx: tenure.Effect) -> Any:
        receipt = post("charge", fx, ctx.job_id, {"amount_cents": payload["amount"]})
        mark(f"charged-{NAME}", json.dumps({"token": fx.token, "in_doubt": fx.in_doubt}))
        if NAME == "W1":
            wait_for("W1-continue")
        return receipt

    try:
        receipt = ctx.effect("charge", send)
    except tenure.JobCancelled:
        receipt = None
    if NAME == "W1":
        try:
            ctx.effect("notify", lambda fx: post("notify", fx, ctx.job_id, {"amount_cents": 0}))
            mark("W1-notify-sent")
        except (tenure.JobCancelled, tenure.OwnershipUnknown) as exc:
            mark("W1-notify-refused", f"{type(exc).__name__}:{ctx.cancel_reason}")
    return {"by": NAME, "receipt": receipt}


@app.job("tally", **FAST)
def tally(ctx: tenure.JobContext, payload: Any) -> Any:
    """One effect, a line in `tally` per key; asked again in doubt, it looks before it adds
    (as a tool that can be queried does). Each run notes its claim (job, token) in `claims`.
    The failover tests count the lines of both."""

    mark("claims", f"{ctx.job_id} {ctx.token} {os.urandom(8).hex()}")

    def apply(fx: tenure.Effect) -> Any:
        ledger_file = DIR / "tally"
        if fx.in_doubt and ledger_file.exists() and fx.key in ledger_file.read_text().split():
            return {"replayed": True}
        mark("tally", fx.key)
        return {"applied": True}

    ctx.effect("tally", apply)
    time.sleep(float(payload.get("nap", 0)))
    return {"by": NAME, "token": ctx.token}


@app.job("long_stage", **FAST)
def long_stage(ctx: tenure.JobContext, payload: Any) -> Any:
    """A long cooperative stage: it ends when told to stop or when the test says finish."""
    ctx.step("first", lambda: mark("ran", "first"))

    def long() -> str:
        mark(f"in-long-{os.getpid()}")
        while not ctx.cancelled.is_set():
            if (DIR / "finish").exists():
                return "finished"
            time.sleep(0.01)
        return "stopped"

    return ctx.step("long", long)


@app.job("clocked", **FAST)
def clocked(ctx: tenure.JobContext, payload: Any) -> Any:
    """Record this process's wall clock, then work for over two lease lengths."""
    wall = ctx.step("wall", time.time)
    time.sleep(2.5 * FAST["lease"])
    return {"wall": wall, "by": NAME}


@app.job("tick")
def tick(ctx: tenure.JobContext, payload: Any) -> None:
    """A no-op: the fairness test counts who runs how many."""


# -- runs that wait (tests/faults/test_waits_faults.py) --------------------------------------
KILL_AT = os.environ.get("TENURE_TEST_KILL_AT", "")


def kill_point(point: str) -> None:
    """At the point the test named, say so and block: the test kills this process here, or
    lets it go on by creating `release-POINT`."""
    if point == KILL_AT:
        mark(f"at-{point}-{os.getpid()}")
        wait_for(f"release-{point}", timeout=600)


@app.job("wait_child", **FAST)
def wait_child(ctx: tenure.JobContext, payload: Any) -> Any:
    """A fenced effect at the test's receiver (a bank on loopback): applied once per key."""

    def charge(fx: tenure.Effect) -> Any:
        kill_point("child_running")
        return post("charge", fx, fx.job_id, {"amount_cents": payload["n"] * 10})

    return {"n": payload["n"], "charged": ctx.effect("charge", charge)["amount_cents"]}


@app.job("wait_parent", spawns=["wait_child"], **FAST)
def wait_parent(ctx: tenure.JobContext, payload: Any) -> Any:
    """Spawns two children, waits for both, builds its result from theirs."""
    ctx.step("plan", lambda: mark("planned", ctx.job_id))
    kill_point("before_spawn")
    first = ctx.spawn("wait_child", {"n": 1})
    second = ctx.spawn("wait_child", {"n": 2})
    kill_point("between")
    results = ctx.wait_job([first, second], timeout=120)
    kill_point("after_children")
    return {"total": sum(r["charged"] for r in results)}


@app.job("approval", **FAST)
def approval(ctx: tenure.JobContext, payload: Any) -> Any:
    """Code before the wait runs once (its step is replayed); the answer comes by signal."""
    ctx.step("before", lambda: mark("before-wait", NAME))
    answer = ctx.wait_for("approval", timeout=300)
    return {"answer": answer, "resumed_by": NAME}


# -- the MCP server (tests/integration/test_mcp.py) ------------------------------------------
AMOUNT = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1}},
    "required": ["amount"],
    "additionalProperties": False,
}


@app.job("pay", tool=True, description="Pay an amount, once.", input_schema=AMOUNT, **FAST)
def pay(ctx: tenure.JobContext, payload: Any) -> Any:
    """A fenced charge at the test's bank; the test may kill -9 us inside the effect, after the
    bank applied it, or hold the effect until it cancelled the job."""
    ctx.step("quote", lambda: payload["amount"])

    def charge(fx: tenure.Effect) -> Any:
        kill_point("before_send")
        receipt = post("charge", fx, fx.job_id, {"amount_cents": payload["amount"]})
        kill_point("in_effect")
        return receipt

    receipt = ctx.effect("charge", charge)
    return {"paid": receipt["amount_cents"], "by": NAME}


@app.job(
    "pay_approved",
    tool=True,
    description="Ask for approval, then pay.",
    input_schema=AMOUNT,
    **FAST,
)
def pay_approved(ctx: tenure.JobContext, payload: Any) -> Any:
    answer = ctx.wait_for("approval", timeout=300)
    if answer != {"ok": True}:
        return {"paid": 0, "answer": answer}
    receipt = ctx.effect(
        "charge", lambda fx: post("charge", fx, fx.job_id, {"amount_cents": payload["amount"]})
    )
    return {"paid": receipt["amount_cents"], "by": NAME}


@app.job("pay_confirmed", description="Ask twice, then pay.", input_schema=AMOUNT, **FAST)
def pay_confirmed(ctx: tenure.JobContext, payload: Any) -> Any:
    """Two signals in turn (the LangGraph test answers each through the graph's interrupt)."""
    approval = ctx.wait_for("approval", timeout=300)
    confirmation = ctx.wait_for("confirm", timeout=300)
    receipt = ctx.effect(
        "charge", lambda fx: post("charge", fx, fx.job_id, {"amount_cents": payload["amount"]})
    )
    return {"paid": receipt["amount_cents"], "approval": approval, "confirm": confirmation}


APPROVAL_FORM = tenure.Ask.form(
    "Approve this payment?",
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
)


@app.job("pay_asked", tool=True, description="Ask the caller, ask its model, then pay.",
         input_schema=AMOUNT, **FAST)  # fmt: skip
def pay_asked(ctx: tenure.JobContext, payload: Any) -> Any:
    """Questions an MCP caller answers on a synchronous call (SEP-2322,
    tests/integration/test_mcp.py)."""
    approval = ctx.wait_for("approval", timeout=300, ask=APPROVAL_FORM)
    if approval != {"ok": True}:
        return {"paid": 0, "answer": approval}
    memo = ctx.wait_for("memo", timeout=300, ask=tenure.Ask.sample("A memo line?", max_tokens=20))

    def charge(fx: tenure.Effect) -> Any:
        receipt = post("charge", fx, fx.job_id, {"amount_cents": payload["amount"]})
        kill_point("in_effect")
        return receipt

    receipt = ctx.effect("charge", charge)
    return {"paid": receipt["amount_cents"], "memo": memo["content"]["text"], "by": NAME}


# -- rollouts (tests/integration/test_rollouts.py) -------------------------------------------
@app.job("variant_echo", **FAST)
def variant_echo(ctx: tenure.JobContext, payload: Any) -> Any:
    """Says which variant it ran as, and where."""
    return {"variant": ctx.variant, "by": NAME}


@app.job("flaky_candidate", **FAST)
def flaky_candidate(ctx: tenure.JobContext, payload: Any) -> Any:
    """The candidate variant fails two jobs in five and spends more; stable does neither."""
    candidate = ctx.variant == "v2"
    ctx.report_cost(tokens=300 if candidate else 100, usd=0.03 if candidate else 0.01)
    if candidate and payload["n"] % 5 < 2:
        raise tenure.NonRetryable("the candidate got it wrong")
    return {"n": payload["n"], "variant": ctx.variant}


# -- observability (tests/integration/test_observability.py) ---------------------------------
BROWSER = {"tool": "browser", "provider": "acme-web", "model": None}


@app.job("browse", labels=BROWSER, **FAST)
def browse(ctx: tenure.JobContext, payload: Any) -> Any:
    return ctx.step("render", lambda: {"rendered": True})


@app.job("search", labels={"tool": "search", "provider": "acme-search", "model": None}, **FAST)
def search(ctx: tenure.JobContext, payload: Any) -> Any:
    return {"found": 1}


@app.job("stuck_browse", labels=BROWSER, lease=30.0, heartbeat=5.0, jitter=2.0, stage_timeout=2.0)
def stuck_browse(ctx: tenure.JobContext, payload: Any) -> Any:
    """A render that does not finish: the test pauses its worker inside it."""

    def render() -> str:
        mark(f"in-render-{os.getpid()}")
        while not ctx.cancelled.is_set():
            time.sleep(0.01)
        return "stopped"

    return ctx.step("render", render)


# -- evidence (tests/integration/test_evidence.py): a JSON library both processes read -------
def _library() -> dict[str, str]:
    path = DIR / "library.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _library_ref(doc: str, version: str) -> tenure.DocumentRef:
    digest = hashlib.sha256(f"{doc}@{version}".encode()).hexdigest()
    return tenure.DocumentRef(f"lib://{doc}", version, digest)


def _library_index() -> str:
    """The index's version: it changes whenever a document does (a reindex)."""
    return hashlib.sha256(json.dumps(sorted(_library().items())).encode()).hexdigest()[:12]


@app.retriever("library", index_version=_library_index)
def library(query: str, *, allowed: Any, limit: int) -> list[tenure.DocumentRef]:
    return [_library_ref(doc, version) for doc, version in sorted(_library().items())][:limit]


@library.permissions
def library_permissions(principal: str | None, tenant: str) -> tenure.Allowed:
    return tenure.Allowed(["all"], f"{principal}@1")


@library.recheck
def library_recheck(principal: str | None, refs: list[tenure.DocumentRef]) -> list[Any]:
    return [ref for ref in refs if ref.source.removeprefix("lib://") in _library()]


@library.current_version
def library_current(ref: tenure.DocumentRef) -> tenure.DocumentRef | None:
    version = _library().get(ref.source.removeprefix("lib://"))
    return None if version is None else _library_ref(ref.source.removeprefix("lib://"), version)


@app.job("cite", resume_checks=[tenure.checks.evidence_still_valid], **FAST)
def cite(ctx: tenure.JobContext, payload: Any) -> Any:
    """Retrieves, then drafts (the test may kill -9 us inside the draft)."""
    refs = ctx.retrieve("library", "anything")
    ctx.step("draft", lambda: kill_point("cite_drafting"))
    return [ref.source for ref in refs]


# -- the run tree (tests/integration/test_timeline_page.py) ----------------------------------
@app.job("tree_leaf", **FAST)
def tree_leaf(ctx: tenure.JobContext, payload: Any) -> Any:
    """A grandchild: reports what it spent, returns its number."""
    ctx.report_cost(tokens=100, usd=0.002)
    return {"leaf": payload["n"]}


@app.job("tree_branch", spawns=["tree_leaf"], **FAST)
def tree_branch(ctx: tenure.JobContext, payload: Any) -> Any:
    """A child that spawns two leaves and waits for both."""
    leaves = [ctx.spawn("tree_leaf", {"n": n}) for n in (1, 2)]
    return {"leaves": sum(r["leaf"] for r in ctx.wait_job(leaves, timeout=120))}


@app.job("tree_root", spawns=["tree_branch"], **FAST)
def tree_root(ctx: tenure.JobContext, payload: Any) -> Any:
    """Three levels: this job, its branch, the branch's two leaves."""
    branch = ctx.spawn("tree_branch", {})
    return {"total": ctx.wait_job(branch, timeout=120)["leaves"]}


# -- principals bound to keys (tests/integration/test_key_principals.py) ---------------------
HANDBOOK = {"holidays": "everyone", "exec-plan": "user:ceo"}


@app.retriever("handbook", index_version=lambda: "handbook-1")
def handbook(query: str, *, allowed: Any, limit: int) -> list[tenure.DocumentRef]:
    """Only what the principal's filter allows: the executives' plan for user:ceo alone."""
    docs = [doc for doc, reader in sorted(HANDBOOK.items()) if reader in allowed]
    return [_library_ref(doc, "1") for doc in docs][:limit]


@handbook.permissions
def handbook_permissions(principal: str | None, tenant: str) -> tenure.Allowed:
    readers = ["everyone", principal] if principal else ["everyone"]
    return tenure.Allowed(readers, f"{principal}@1")


@handbook.recheck
def handbook_recheck(principal: str | None, refs: list[tenure.DocumentRef]) -> list[Any]:
    return [r for r in refs if HANDBOOK[r.source.removeprefix("lib://")] in ("everyone", principal)]


@app.job(
    "ask_handbook",
    tool=True,
    description="What the handbook says to the caller.",
    input_schema={"type": "object", "properties": {"topic": {"type": "string"}}},
    **FAST,
)
def ask_handbook(ctx: tenure.JobContext, payload: Any) -> Any:
    """The documents the job's principal may read (retrieved, so recorded as evidence)."""
    return [ref.source for ref in ctx.retrieve("handbook", "plans")]


@app.job("pay_asked_at_once", tool=True, description="Ask the caller and its model at once, "
         "then pay.", input_schema=AMOUNT, **FAST)  # fmt: skip
def pay_asked_at_once(ctx: tenure.JobContext, payload: Any) -> Any:
    """Two questions in one round (`wait_for_all`): answered together or one by one."""
    answers = ctx.wait_for_all(
        {"approval": APPROVAL_FORM, "memo": tenure.Ask.sample("A memo line?", max_tokens=20)},
        timeout=300,
    )
    if answers["approval"] != {"ok": True}:
        return {"paid": 0, "answer": answers["approval"]}
    receipt = ctx.effect(
        "charge", lambda fx: post("charge", fx, fx.job_id, {"amount_cents": payload["amount"]})
    )
    memo = answers["memo"]["content"]["text"]
    return {"paid": receipt["amount_cents"], "memo": memo, "by": NAME}


APPROVED_FIRST = {"approval": APPROVAL_FORM}


@app.job("pay_approved_first", tool=True, description="Ask for an approval before the job, "
         "then pay.", input_schema=AMOUNT, asks_first=APPROVED_FIRST, **FAST)  # fmt: skip
def pay_approved_first(ctx: tenure.JobContext, payload: Any) -> Any:
    """The approval is asked before the job is made (`asks_first`) on the 2026 protocol, and
    by the job's own wait on the others."""
    approval = ctx.wait_for_all(APPROVED_FIRST, timeout=300)["approval"]
    if approval != {"ok": True}:
        return {"paid": 0, "answer": approval}
    receipt = ctx.effect(
        "charge", lambda fx: post("charge", fx, fx.job_id, {"amount_cents": payload["amount"]})
    )
    return {"paid": receipt["amount_cents"], "by": NAME}


NAMES_FIRST = {
    "first_name": tenure.Ask.form("First name?", {"type": "object", "properties": {}}),
    "last_name": tenure.Ask.form("Last name?", {"type": "object", "properties": {}}),
}


@app.job("greet_named_first", tool=True, description="Ask two names first, then greet.",
         input_schema={"type": "object", "properties": {}}, asks_first=NAMES_FIRST,
         **FAST)  # fmt: skip
def greet_named_first(ctx: tenure.JobContext, payload: Any) -> Any:
    """Both names are asked before the job on the 2026 protocol; a caller may give one a round."""
    names = ctx.wait_for_all(NAMES_FIRST, timeout=300)
    return {"hello": f"{names['first_name'].get('name')} {names['last_name'].get('name')}"}
