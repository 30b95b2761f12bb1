"""HTTP figures of `tenure serve` on loopback: submit latency and throughput, and how soon a
long-poll (`GET /v1/jobs/{id}?wait=S`) answers after the job ends.

    python bench/service.py [--db URL] [--submits 500] [--waits 50]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

import tenure


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def long_poll_reactions(
    base: str, headers: dict[str, str], ledger: tenure.Ledger, waits: int
) -> list[float]:
    """Seconds from a job's completion to the answer of a long-poll that was waiting for it."""
    reactions = []
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        for _ in range(waits):
            job_id = client.post("/v1/jobs", json={"kind": "waited"}).json()["id"]
            answered: list[float] = []

            def wait(job: str = job_id, into: list[float] = answered) -> None:
                client.get(f"/v1/jobs/{job}", params={"wait": 20})
                into.append(time.perf_counter())

            waiter = threading.Thread(target=wait)
            waiter.start()
            lease = ledger.claim("bench", kinds=["waited"], lease_seconds=30)
            assert lease is not None
            # End the job at a random moment, once the poll has reached its slowest interval.
            time.sleep(random.uniform(0.6, 1.2))
            done = time.perf_counter()
            ledger.complete(lease, None)
            waiter.join()
            reactions.append(answered[0] - done)
    return reactions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", help="database URL (default: a temporary SQLite file)")
    parser.add_argument("--submits", type=int, default=500)
    parser.add_argument("--waits", type=int, default=30)
    parser.add_argument("--clients", type=int, default=8, help="parallel submitters")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tenure-http-"))
    db = args.db or f"sqlite:///{folder / 'bench.db'}"
    ledger = tenure.connect(db)
    key = ledger.operations.create_tenant(f"bench-{os.getpid()}")
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tenure.cli",
            "serve",
            "--db",
            db,
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {key}"}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/healthz")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        with httpx.Client(base_url=base, headers=headers) as client:
            one = []
            for i in range(args.submits):
                sent = time.perf_counter()
                client.post("/v1/jobs", json={"kind": "bench", "payload": {"i": i}})
                one.append(time.perf_counter() - sent)

        def submitter(n: int) -> None:
            with httpx.Client(base_url=base, headers=headers) as c:
                for i in range(n):
                    c.post("/v1/jobs", json={"kind": "bench2", "payload": {"i": i}})

        per = args.submits // args.clients
        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(submitter, [per] * args.clients))
        parallel_rate = per * args.clients / (time.perf_counter() - started)

        reactions = long_poll_reactions(base, headers, ledger, args.waits)
    finally:
        server.terminate()
        server.wait(timeout=30)
        ledger.close()
    backend = db.split(":", 1)[0]
    print(f"tenure serve on {backend}, loopback, 2 cores")
    print(
        f"  submit, one client:   p50 {statistics.median(one) * 1000:.2f} ms, "
        f"p95 {percentile(one, 0.95) * 1000:.2f} ms, {len(one) / sum(one):.0f} submits/s"
    )
    print(f"  submit, {args.clients} clients:    {parallel_rate:.0f} submits/s")
    print(
        f"  long-poll answer after the job ended: p50 {statistics.median(reactions) * 1000:.0f} ms,"
        f" max {max(reactions) * 1000:.0f} ms (poll interval grows to 250 ms)"
    )


if __name__ == "__main__":
    main()
