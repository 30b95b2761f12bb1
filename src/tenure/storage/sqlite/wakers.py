"""The SQLite store's writes that wake a waiting job: a cancel cascade (a cancelled child
wakes its parent) and a signal, each inside one BEGIN IMMEDIATE transaction (SQLite's writers
take turns, so no wake-up can slip between a check and a write)."""

from __future__ import annotations

import json

from tenure.storage.base import NewSignal
from tenure.storage.rows import signal_params
from tenure.storage.sqlite.tx import SqliteTx
from tenure.storage.waits import SignalOutcome
from tenure.types import EventType, JobState


def cancel_tree(tx: SqliteTx, job_id: str) -> bool:
    """Cancel the job and its unfinished descendants, each token bumped, with their events;
    True when the job itself was cancelled. A cancelled child wakes a parent waiting for it."""
    pending: list[tuple[str, str | None]] = [(job_id, None)]
    while pending:
        current, parent = pending.pop()
        was = tx.one("cancel__was", {"job_id": current})
        row = tx.one("cancel", {"job_id": current})
        if row is None or was is None:
            continue
        detail = {"was": was["state"]}
        if parent is not None:
            detail["by_parent"] = parent
        token = int(row["fencing_token"])
        tx.event(current, EventType.JOB_CANCELLED, token, row["owner_id"], detail)
        tx.cancelled.append((current, token))
        tx.job_ended(current, row["parent_id"] if parent is None else None)
        children = tx.rows("cancel__children", {"job_id": current})
        pending += [(child["id"], current) for child in children]
    return bool(tx.cancelled) and tx.cancelled[0][0] == job_id


def store_signal(tx: SqliteTx, signal: NewSignal) -> SignalOutcome:
    """Store the signal once per job and name, wake the job if it waits for it."""
    params = signal_params(signal)
    job = tx.one("signal", params)
    if job is None:
        return SignalOutcome.NO_JOB
    existing = tx.one("signal__existing", params)
    # A stored name answers as it does while the job runs (repeat or conflict), also once the
    # job has ended: whether a worker finished it first must not change the answer.
    if existing is None and JobState(job["state"]).terminal:
        return SignalOutcome.NO_JOB
    if existing is not None:
        same = existing["existing"] == signal.payload_sha256
        return SignalOutcome.REPEATED if same else SignalOutcome.CONFLICT
    tx.rows("signal__insert", params)
    if job["pends_on_it"]:
        tx.rows("signal__answered", params)
    woke = bool(job["waits_for_it"])
    if woke:
        tx.rows("signal__wake", params)
        tx.claimable.append(job["kind"])
    detail = {**json.loads(signal.detail_json), "woke": woke}
    tx.event(signal.job_id, EventType.SIGNAL_RECEIVED, int(job["fencing_token"]), None, detail)
    return SignalOutcome.STORED
