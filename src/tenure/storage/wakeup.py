"""Wake-ups: a worker waiting for jobs learns of new ones at once instead of at its next poll.

PostgreSQL: submits (and releases, requeues) send `NOTIFY "tenure_jobs:<schema>", '<kind>'` in
the same statement; `storage.postgres.listener` holds one more connection that LISTENs.
SQLite has no such channel between processes: `LOCAL` wakes the workers of this process that
use the same file; workers in other processes fall back to polling. A job that ends announces
its id the same way (`tenure_ended:<schema>`, `LOCAL_ENDED`; a cancel on `tenure_cancel`), so
that `ledger.wait` and the service's long-poll answer at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def channel_of(schema: str) -> str:
    """The notification channel of the tenure tables in `schema`: channels are per database,
    so two tenure schemas in one database must not wake each other's workers."""
    return f"tenure_jobs:{schema}"


def cancel_channel_of(schema: str) -> str:
    """The channel on which a cancel announces `<job id>:<token after the cancel>`."""
    return f"tenure_cancel:{schema}"


def ended_channel_of(schema: str) -> str:
    """The channel on which a job that ended (succeeded or failed) announces its id."""
    return f"tenure_ended:{schema}"


WakeCallback = Callable[[str], None]
# Called with the ids of jobs that ended (succeeded, failed or cancelled).
EndedCallback = Callable[[list[str]], None]
# Called with True each time ends from every process are heard (a LISTEN connection is up,
# after each reconnect: ends sent meanwhile were missed), False when that connection is lost.
ListeningCallback = Callable[[bool], None]
# Called with the job id and its token after the cancel (the run to stop holds a lower one).
CancelCallback = Callable[[str, int], None]


def cancel_payload(job_id: str, token: int) -> str:
    """What a cancel announces."""
    return f"{job_id}:{token}"


def read_cancel(payload: str, callback: CancelCallback) -> None:
    """Call `callback` for a well-formed cancel announcement; ignore anything else."""
    job_id, _, token = payload.rpartition(":")
    if job_id and token.isdigit():
        callback(job_id, int(token))


class LocalWakeups:
    """In-process publish/subscribe by store identity (a SQLite file's resolved path)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[str, list[WakeCallback]] = {}

    def subscribe(self, where: str, callback: WakeCallback) -> Callable[[], None]:
        """Call `callback(kind)` on each publish for `where`; returns the unsubscribe."""
        with self._lock:
            self._subscribers.setdefault(where, []).append(callback)

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._subscribers.get(where, [])
                if callback in callbacks:
                    callbacks.remove(callback)

        return unsubscribe

    def publish(self, where: str, kind: str) -> None:
        """Jobs of `kind` became claimable in `where` (after the commit)."""
        with self._lock:
            callbacks = list(self._subscribers.get(where, ()))
        for callback in callbacks:
            callback(kind)


LOCAL = LocalWakeups()
# Cancels made in this process, for its workers on the same file (others learn at renewal).
LOCAL_CANCELS = LocalWakeups()
# Jobs that ended in this process (comma-joined ids), for its waiters on the same file.
LOCAL_ENDED = LocalWakeups()
