"""`tenure demo`: W1 claims and is stalled between its lease check and its charge; W2 takes
over and reconciles the charge; W1 comes back: renewal refused, result rejected, late charge
refused by the bank. Prints a timeline and a summary; exit 0 only if every guarantee held.

What the demo starts (its bank, proxy, connections, workers, and its jobs in a database given
with `--db`: see `demo.database`) goes on one `ExitStack` as it is made; `run_demo` closes it
and removes the workspace, after a Ctrl-C at any moment too."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import tenure
from tenure.clock import SYSTEM_CLOCK, Clock
from tenure.demo.bank import Bank, BankServer
from tenure.demo.database import DemoDatabase
from tenure.fence import FenceGuard
from tenure.pages import job_life_page
from tenure.storage.postgres.urls import postgres_upstream
from tenure.testing.process import spawn_worker
from tenure.testing.proxy import TcpProxy

INTERRUPTED = 130  # a shell's exit status after SIGINT
DEADLINE_SECONDS = 60.0
COLOURS = {"W1": "31", "W2": "32", "bank": "36", "demo": "33", "ledger": "0"}


@dataclass
class Line:
    """One line of the timeline."""

    at: float
    who: str
    text: str


class Timeline:
    """Collects what happened, from the ledger, the bank and the demo itself (the demo's own
    lines stamped by `clock`'s wall clock, as the bank's and the database's are)."""

    def __init__(self, out: TextIO, colour: bool, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.out = out
        self.colour = colour
        self.clock = clock
        self.start = clock.wall()
        self.lines: list[Line] = []

    def demo(self, text: str) -> None:
        self.lines.append(Line(self.clock.wall(), "demo", text))

    def render(self) -> None:
        for line in sorted(self.lines, key=lambda line: line.at):
            label = f"{line.who:>5}"
            if self.colour:
                label = f"\033[{COLOURS.get(line.who, '0')}m{label}\033[0m"
            self.out.write(f"  {line.at - self.start:6.2f}s {label}  {line.text}\n")


def run_demo(
    db: str | None,
    out: TextIO = sys.stdout,
    *,
    keep: bool = False,
    page: Path | None = None,
    clock: Clock = SYSTEM_CLOCK,
    err: TextIO | None = None,
) -> int:
    """Play the story; return the exit code. The workspace (databases, worker logs) is
    removed after a run that passed, unless `keep`; a failed run keeps it for its logs. A
    database given as `db` keeps none of the demo's jobs, unless `keep` (see `demo.database`). With
    `page`, the job's lease timeline is written there as an offline HTML page. `clock` times
    the story's deadline and stamps the demo's lines. Interrupted (Ctrl-C): the workers are
    stopped and the workspace removed (unless `keep`), one line says so on `err`, and the
    code is 130."""
    # A URL tenure cannot use is refused before anything is made.
    database = DemoDatabase.of(db, keep=keep)
    closing = ExitStack()
    folder: Path | None = None
    demo: Demo | None = None
    try:
        folder = Path(tempfile.mkdtemp(prefix="tenure-demo-"))
        demo = Demo(database, folder, out, closing, clock=clock)
        code = demo.run(page)
        if code == 0 and not keep:
            shutil.rmtree(folder, ignore_errors=True)
        elif code == 0:
            out.write(f"\nworkspace kept: {folder}\n")
        return code
    except KeyboardInterrupt:
        if demo is not None:
            demo.hurry = True
        with _deferred_interrupts():
            closing.close()
            if folder is not None and not keep:
                shutil.rmtree(folder, ignore_errors=True)
        said = "interrupted; the demo stopped its workers"
        if folder is not None:
            said += f"; workspace kept: {folder}" if keep else f" and removed {folder}"
        if database.left is not None:
            said += f"; {database.left}"
        (err or sys.stderr).write(said + "\n")
        return INTERRUPTED
    except BaseException as exc:
        with _deferred_interrupts():
            closing.close()
            # The worker logs of a run that broke are kept to be read; not for a reader gone.
            logs = folder is not None and any(folder.glob("*.log"))
            if folder is not None and not keep and (not logs or isinstance(exc, BrokenPipeError)):
                shutil.rmtree(folder, ignore_errors=True)
        if database.left is not None:
            (err or sys.stderr).write(database.left + "\n")
        raise


@contextmanager
def _atomically() -> Iterator[None]:
    """What the block makes and puts on the closing stack is made whole: a Ctrl-C meanwhile
    (which would leave a worker started but not known, say) is raised after it."""
    with _deferred_interrupts() as pressed:
        yield
    if pressed:
        raise KeyboardInterrupt


@contextmanager
def _deferred_interrupts() -> Iterator[list[int]]:
    """Ctrl-C while the demo cleans up would leave part of it (a stopped worker, a schema):
    it is noted, for the caller to act on once the cleanup is done."""
    pressed: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: pressed.append(signum))
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


class Demo:
    """One run of the story, with everything it starts and must stop."""

    def __init__(
        self,
        database: DemoDatabase,
        folder: Path,
        out: TextIO,
        closing: ExitStack,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        self.out = out
        self.folder = folder
        self.database = database
        self.closing = closing
        # Closed in the reverse order: the given database is cleaned last, once every
        # worker and connection of the demo is gone.
        closing.callback(database.remove)
        self.timeline = Timeline(out, out.isatty() and not os.environ.get("NO_COLOR"), clock=clock)
        with _atomically():
            self.guard = FenceGuard(f"sqlite:///{self.folder / 'bank.db'}")
            closing.callback(self.guard.close)
            self.bank = Bank(self.guard)
            self.server = BankServer(self.bank)
            closing.callback(self.server.close)
        self.proxy: TcpProxy | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        # Interrupted: the workers are killed, not asked to shut down (a stalled W1 would
        # take seconds, and what they would save is removed).
        self.hurry = False
        self.deadline = clock.monotonic() + DEADLINE_SECONDS

    def run(self, page: Path | None = None) -> int:
        self.database.open(self.folder)
        self.out.write(f"tenure demo: database {self.database.shown}\n")
        self.out.write(f"             workspace {self.folder}\n\n")
        self.out.flush()
        ledger = tenure.connect(self.database.url)
        self.closing.callback(ledger.close)
        try:
            job_id = self.play(ledger)
            job, events = ledger.get(job_id), ledger.events(job_id)
            drawn = None if page is None else job_life_page(ledger, job_id)
        except TimeoutError as exc:
            self.close()
            self.timeline.render()
            self.out.write(f"\nFAILED: {exc} (logs in {self.folder})\n")
            self._say_left()
            return 1
        self.close()
        owners = _owners_of(events)
        for event in events:
            self.timeline.lines.append(
                Line(event.at.timestamp(), owners.get(event.owner_id, "ledger"), _describe(event))
            )
        for bank_event in self.bank.events:
            self.timeline.lines.append(Line(bank_event.at, "bank", _describe_bank(bank_event)))
        self.out.write(
            "Timeline (W1 red, W2 green, bank cyan):\n" if self.timeline.colour else "Timeline:\n"
        )
        self.timeline.render()
        code = _summary(self.out, job, events, self.bank, owners)
        self._say_left()
        if page is not None and drawn is not None:
            try:
                page.write_text(drawn, "utf-8")
            except OSError as exc:
                self.out.write(f"\nFAILED: could not write {page}: {exc.strerror or exc}\n")
                return 1
            self.out.write(f"\nThe job's lease timeline, drawn: {page} (open it in a browser)\n")
        else:
            self.out.write("\nSee it drawn: tenure demo --timeline demo.html\n")
        return code

    def close(self) -> None:
        """Stop the workers, close what the demo opened, clean the given database. A Ctrl-C
        meanwhile waits for the end of it."""
        with _atomically():
            self.closing.close()

    def _say_left(self) -> None:
        if self.database.left is not None:
            self.out.write(f"\n{self.database.left}\n")

    def play(self, ledger: tenure.Ledger) -> str:
        """W1 stalls between its check and its send; W2 takes over; W1 comes back."""
        w1_url = self.database.url
        if not w1_url.startswith("sqlite"):
            upstream, through = postgres_upstream(w1_url)
            with _atomically():
                self.proxy = TcpProxy(upstream)
                self.closing.callback(self.proxy.close)
            w1_url = through(self.proxy.port)
        job_id = ledger.submit(
            self.database.kind, {"invoice": "INV-1042", "amount_cents": 12900}, max_attempts=3
        )
        w1 = self.start("W1", w1_url)
        self.until((self.folder / f"checked-{w1.pid}").exists, "W1 at the charge")
        self.stall(w1)
        self.start("W2", self.database.url)
        self.until(lambda: ledger.get(job_id).terminal, "W2 to finish the job")
        self.resume(w1)
        owners = _owners_of(ledger.events(job_id))

        def w1_stopped() -> bool:
            """W1's result refused, and its lease refused or unconfirmed: which of the two
            comes first after SIGCONT is the race of its renewer and its deadline watcher."""
            seen = {e.type for e in ledger.events(job_id) if owners.get(e.owner_id) == "W1"}
            return "result_rejected" in seen and bool(
                seen & {"heartbeat_lost", "ownership_unknown"}
            )

        self.until(w1_stopped, "W1's renewal and result to be refused")
        self.until(
            lambda: any(e.what == "refused" for e in self.bank.events),
            "the bank to refuse W1's late charge",
        )
        return job_id

    def stall(self, w1: subprocess.Popen[bytes]) -> None:
        if self.proxy is not None:
            self.proxy.cut()
            self.timeline.demo(
                "W1 passed its lease check for the charge; its database "
                "connection is cut (proxy) before it sends"
            )
        else:
            w1.send_signal(signal.SIGSTOP)
            self.timeline.demo(
                "W1 passed its lease check for the charge and is frozen "
                "(SIGSTOP: SQLite is a local file, a pause stands in for a cut)"
            )

    def resume(self, w1: subprocess.Popen[bytes]) -> None:
        if self.proxy is not None:
            self.proxy.restore()
        else:
            w1.send_signal(signal.SIGCONT)
        (self.folder / f"go-{w1.pid}").touch()
        self.timeline.demo("W1 comes back and carries on where it stopped: it sends the charge")

    def start(self, name: str, worker_url: str) -> subprocess.Popen[bytes]:
        env = {
            "TENURE_DEMO_DIR": str(self.folder),
            "TENURE_DEMO_BANK": self.server.url,
            "TENURE_DEMO_KIND": self.database.kind,
            # The worker's database is its --db: the environment says the same.
            "TENURE_DATABASE_URL": worker_url,
        }
        with _atomically():
            if not self.workers:
                self.closing.callback(self._stop_workers)
            proc = spawn_worker(
                "tenure.demo.app:app",
                worker_url,
                self.folder / f"{name}.log",
                "--concurrency",
                "1",
                "--poll",
                "0.05",
                "--grace",
                "1",
                env=env,
            )
            self.workers[name] = proc
        self.timeline.demo(f"{name} started (pid {proc.pid})")
        return proc

    def until(self, check: Callable[[], Any], what: str) -> None:
        while not check():
            if self.clock.monotonic() > self.deadline:
                raise TimeoutError(f"gave up waiting for {what}")
            self.clock.sleep(0.01)

    def _stop_workers(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None and self.hurry:
                proc.kill()
            elif proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _owners_of(events: list[tenure.Event]) -> dict[str | None, str]:
    """Worker ids by the order of their first claim: W1, W2."""
    names: dict[str | None, str] = {}
    for event in events:
        if event.type == "job_claimed" and event.owner_id not in names:
            names[event.owner_id] = f"W{len(names) + 1}"
    return names


_WRITES = {
    "complete": "its result",
    "fail": "its failure report",
    "finish_stage": "its stage result",
    "save_step": "its checkpoint",
}


def _describe(event: tenure.Event) -> str:
    d = event.detail
    token = f"token {event.token}"
    texts = {
        "job_submitted": "job submitted: invoice INV-1042, 129.00 EUR",
        "job_claimed": f"claims the job ({token}, attempt {d.get('attempt')})",
        "step_started": f"starts step {d.get('name')!r}",
        "step_done": f"records stage {d.get('position')} done",
        "tool_request_started": f"write-ahead: about to send {d.get('name')!r} ({token})",
        "lease_expired": f"lease of {token} expired by the database's clock",
        "step_in_doubt": f"finds {d.get('name')!r} in doubt (started by token "
        f"{d.get('started_token')}, no result): asks the bank to reconcile",
        "job_succeeded": f"completes the job ({token})",
        "heartbeat_lost": f"renewal refused: {token} no longer holds the lease",
        "result_rejected": f"{_WRITES.get(str(d.get('operation')), 'write')} refused: stale "
        f"{token}, nothing published",
        "ownership_unknown": f"could not confirm its lease ({token}, {d.get('operation')}): "
        "starts no new effect",
        "effect_refused": f"records that the bank refused its {d.get('name')!r} "
        f"({d.get('code')}, bank's highest {d.get('highest')})",
        "job_retry_scheduled": f"attempt failed ({d.get('code')}), retry scheduled",
        "job_failed": f"job failed ({d.get('code')})",
    }
    return texts.get(event.type, event.type)


def _describe_bank(event: Any) -> str:
    short = event.key.rsplit(":", 1)[-1]
    if event.what == "applied":
        return (
            f"{event.path}: charge applied as {event.detail} (fence {event.token}, key ...:{short})"
        )
    if event.what == "refused":
        return f"{event.path}: REFUSED stale fence {event.token} (key ...:{short})"
    return f"{event.path}: replayed stored answer (fence {event.token})"


def _summary(
    out: TextIO,
    job: tenure.Job,
    events: list[tenure.Event],
    bank: Bank,
    owners: dict[str | None, str],
) -> int:
    applied = sum(e.what == "applied" for e in bank.events)
    refused = sum(e.what == "refused" for e in bank.events)
    rejected = sum(e.type == "result_rejected" for e in events)
    finisher = next((owners.get(e.owner_id) for e in events if e.type == "job_succeeded"), None)
    checks = [
        (applied == 1, f"effects applied:        {applied} (one charge at the bank, never two)"),
        (
            refused >= 1,
            f"stale effects refused:  {refused} (W1's late charge, refused by the bank's fence)",
        ),
        (
            rejected >= 1,
            f"stale results rejected: {rejected} (W1's writes after it lost the lease)",
        ),
        (
            job.state is tenure.JobState.SUCCEEDED and finisher == "W2",
            f"final state:            {job.state.value} by {finisher} (token {job.token}),"
            f" result {job.result}",
        ),
    ]
    out.write("\nSummary:\n")
    for ok, text in checks:
        out.write(f"  {'ok  ' if ok else 'FAIL'}  {text}\n")
    held = all(ok for ok, _ in checks)
    out.write(
        "\nThe stale worker's result was rejected and its late effect refused: "
        "nothing was lost, nothing happened twice.\n"
        if held
        else "\nA guarantee did not hold: see above.\n"
    )
    return 0 if held else 1
