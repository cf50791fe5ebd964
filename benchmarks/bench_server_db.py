"""The Prefect server's database under several workers: SQLite against PostgreSQL.

Several machines means several processes writing flow and task run states to one
Prefect server at once. This runs the same load against ``prefect server start``
on its embedded SQLite and on PostgreSQL (``dev.servers.postgres``: Debian's
package, a throwaway cluster on loopback), one after the other, on the same
machine and in one run, so the ratios are side by side:

* ``--clients`` processes start together, each running one flow of
  ``--tasks`` mapped no-op tasks on a 16-thread runner (the shape of a batch
  task's orchestration, without its work), each against the server;
* measured: the clients' wall time (start to the last exit), then the time
  until the server has recorded every task run as completed (the server's
  recorder writes task runs asynchronously: a backlog is seconds in which the
  UI, the summaries and the alerts see stale states), the clients that failed,
  and the ``database is locked`` lines the server logged.

Both servers get the task-run recorder batching of ``ingest serve``.

Run ``python -m benchmarks.bench_server_db [--clients 4] [--tasks 500]``; the
table is printed and appended to benchmarks/server_db.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from deployments import database, serve
from dev.servers import postgres
from dev.servers.s3 import free_port

RESULTS = Path(__file__).with_name("server_db.md")
CLIENT = """
import sys
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

@task(cache_policy=NO_CACHE)
def noop(i: int) -> int:
    return i

@flow(name="server-db-load", task_runner=ThreadPoolTaskRunner(max_workers=16))
def load(n: int) -> None:
    noop.map(range(n)).wait()

load(int(sys.argv[1]))
"""


def completed_task_runs(api_url: str) -> int:
    """The task runs the server has recorded as completed (its count endpoint)."""
    body = {"task_runs": {"state": {"type": {"any_": ["COMPLETED"]}}}}
    r = httpx.post(f"{api_url}/task_runs/count", json=body, timeout=30)
    r.raise_for_status()
    return int(r.json())


def run_load(api_url: str, clients: int, tasks: int, work: Path) -> dict[str, Any]:
    """Start the clients together; wait for them, then for the server's records."""
    script = work / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_LOGGING_LEVEL": "WARNING"}
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tasks)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(work / f"client-{i}.log", "w"),  # noqa: SIM115 (closed with the process)
        )
        for i in range(clients)
    ]
    codes = [p.wait() for p in procs]
    clients_wall = time.monotonic() - start
    expected = clients * tasks
    deadline = time.monotonic() + 600
    recorded = completed_task_runs(api_url)
    while recorded < expected and time.monotonic() < deadline:
        time.sleep(0.5)  # polling the server's count, with a deadline
        recorded = completed_task_runs(api_url)
    return {
        "clients_wall": clients_wall,
        "recorded_after": time.monotonic() - start,
        "recorded": recorded,
        "expected": expected,
        "failed_clients": sum(1 for c in codes if c != 0),
    }


def measure(backend: str, clients: int, tasks: int, root: Path) -> dict[str, Any]:
    work = root / backend
    work.mkdir()
    log_path = work / "server.log"
    with open(log_path, "w") as log:
        if backend == "sqlite":
            with serve.PrefectServer(port=free_port(), home=work / "home", log=log) as server:
                result = run_load(server.api_url, clients, tasks, work)
        else:
            with postgres.PostgresServer() as pg:
                url = database.parse(pg.create_database("prefect"))
                with serve.PrefectServer(
                    port=free_port(), home=work / "home", log=log, database_url=url
                ) as server:
                    result = run_load(server.api_url, clients, tasks, work)
    text = log_path.read_text(errors="replace")
    result["locked_lines"] = text.count("database is locked")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    backends = args.backends.split(",")
    if "postgresql" in backends and postgres.bin_dir() is None:
        sys.exit("needs Debian's postgresql package (/usr/lib/postgresql/*/bin)")
    with tempfile.TemporaryDirectory(prefix="bench-server-db-") as tmp:
        results = {b: measure(b, args.clients, args.tasks, Path(tmp)) for b in backends}
    load = os.getloadavg()
    lines = [
        f"\n## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
        "",
        f"`python -m benchmarks.bench_server_db --clients {args.clients} --tasks {args.tasks}`",
        "",
        "| database | clients x tasks | clients' wall | all task runs recorded after "
        "| recorded | failed clients | `database is locked` lines |",
        "|---|---|---|---|---|---|---|",
    ]
    for b, r in results.items():
        lines.append(
            f"| {b} | {args.clients} x {args.tasks} | {r['clients_wall']:.1f} s "
            f"| {r['recorded_after']:.1f} s | {r['recorded']}/{r['expected']} "
            f"| {r['failed_clients']} | {r['locked_lines']} |"
        )
    if len(results) == 2:
        s, p = results["sqlite"], results["postgresql"]
        lines.append("")
        lines.append(
            f"SQLite / PostgreSQL: clients' wall {s['clients_wall'] / p['clients_wall']:.2f}x, "
            f"recorded after {s['recorded_after'] / p['recorded_after']:.2f}x."
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# The Prefect server's database under several workers\n\n"
            "What `benchmarks/bench_server_db.py` measures is in its docstring; each run "
            "appends a section.\n"
        )
    with RESULTS.open("a") as f:
        f.write(text)


if __name__ == "__main__":
    main()
