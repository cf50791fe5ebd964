"""How far apart the nightly's two children start, by Prefect's own records.

Two small child flows (three tasks of 0.3 s, then 2 s of work each) run as subflows of
one parent flow on a Prefect test server (SQLite, as ``prefect server start`` runs by
default), in the two shapes the nightly has had:

* ``tasks``: each child called inside a task, the two tasks on a two-thread task
  runner (the nightly up to this change);
* ``threads``: ``tasks.nightly.run_children``, each child in a thread of the flow, the
  second created once the first is Running (the nightly now).

Per round, read back through the API: the second child's ``start_time`` minus the
first's (the gap), how long both ran at once (the overlap), and, in a round whose first
child fails after its tasks ran, how many task runs the server holds as RolledBack.
Rounds alternate the shapes. Results: ``nightly_children.md``.

    .venv/bin/python -m benchmarks.bench_nightly_children [--rounds 5]

``--servers`` compares two servers instead, the ``threads`` shape on each: Prefect's own
app (``prefect.server.api.server:create_app``) and the project's
(``deployments.server_app:create_app``: 503s answered with a short ``Retry-After``), each
under uvicorn on loopback with all its services, SQLite in a Prefect home of its own, and
a ``prefect worker start`` polling it every second (heartbeats and polls: the other
writers a deployment's server has); each child runs ``--width`` tasks at once (8), so the
first child creates task runs as the second is created. Rounds alternate the servers;
each round also counts the requests its server answered 503 (its log, with
``PREFECT_API_LOG_RETRYABLE_ERRORS``).

    .venv/bin/python -m benchmarks.bench_nightly_children --servers [--rounds 8] [--width 8]

``--locked`` measures the mechanism alone, on the same two servers: another writer (this
process, ``BEGIN IMMEDIATE`` on the server's SQLite file) holds the write lock for a set
time while Prefect's client creates a task run, which meets the lock at once ("database
is locked", 503); the figure is how long the client took to create it.

    .venv/bin/python -m benchmarks.bench_nightly_children --locked [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
    TaskRunFilter,
    TaskRunFilterState,
    TaskRunFilterStateName,
)
from prefect.task_runners import ThreadPoolTaskRunner


@task(cache_policy=NO_CACHE)
def step(i: int) -> int:
    time.sleep(0.3)  # a task's I/O
    return i


@flow(name="bench-child")
def child(n: int, fail: bool = False, width: int = 0) -> int:
    if width:  # ``width`` tasks at once (creating task runs as the second child is created)
        step.map(range(width)).wait()
    else:
        for i in range(3):
            step(i)
    time.sleep(2.0)  # the rest of the ingestion's work
    if fail:
        raise RuntimeError("too many failures")
    return n


@task(cache_policy=NO_CACHE)
def wrapper(n: int, fail: bool) -> Any:
    return child(n, fail, return_state=True)


@flow(name="bench-nightly-tasks", task_runner=ThreadPoolTaskRunner(max_workers=2))
def nightly_tasks(fail: bool = False) -> None:
    futures = [wrapper.submit(1, fail), wrapper.submit(2, False)]
    for f in futures:
        f.wait()


@flow(name="bench-nightly-threads")
def nightly_threads(fail: bool = False, width: int = 0) -> None:
    from tasks.nightly import run_children

    run_children(
        [
            (child, {"n": 1, "fail": fail, "width": width}, "a"),
            (child, {"n": 2, "width": width}, "b"),
        ]
    )


def measure(shape: str, fail: bool, width: int = 0) -> dict[str, float]:
    if shape == "tasks":
        state = nightly_tasks(fail=fail, return_state=True)
    else:
        state = nightly_threads(fail=fail, width=width, return_state=True)
    run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        kids = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run_id])
            )
        )
        first, second = sorted(kids, key=lambda r: r.start_time)
        rolled = []
        if fail:
            deadline = time.monotonic() + 30
            while True:  # the recorder writes task states a flush after the flow's own
                rolled = client.read_task_runs(
                    task_run_filter=TaskRunFilter(
                        state=TaskRunFilterState(name=TaskRunFilterStateName(any_=["RolledBack"]))
                    ),
                    flow_run_filter=FlowRunFilter(id={"any_": [run_id, first.id, second.id]}),
                )
                if rolled or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
    return {
        "gap": (second.start_time - first.start_time).total_seconds(),
        "overlap": max(0.0, (first.end_time - second.start_time).total_seconds()),
        "rolled_back": float(len(rolled)),
    }


APPS = {
    "prefect": "prefect.server.api.server:create_app",
    "project": "deployments.server_app:create_app",
}


@contextlib.contextmanager
def app_server(factory: str, home: Path) -> Iterator[tuple[str, Path]]:
    """``factory`` under uvicorn on a free loopback port, its services on, SQLite under
    ``home``, a process worker polling it; yields its API address and log file."""
    import prefect

    from deployments import local_api
    from deployments.serve import Worker, stop, wait_healthy
    from dev.servers.s3 import free_port

    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(local_api.PREFECT_DEFAULTS)
    env.update(PREFECT_HOME=str(home), PREFECT_UI_ENABLED="0")
    env["PREFECT_API_LOG_RETRYABLE_ERRORS"] = "true"
    home.mkdir(parents=True)
    log = home / "server.log"
    with open(log, "w") as out, open(home / "worker.log", "w") as worker_log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                factory,
                "--app-dir",
                str(Path(prefect.__file__).parent.parent),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "error",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_healthy(api_url, time.monotonic() + 600, proc)
            from deployments.serve import ensure_work_pools

            ensure_work_pools(api_url, ["bench-pool"])
            worker_env = {**env, "PREFECT_API_URL": api_url, "PREFECT_WORKER_QUERY_SECONDS": "1"}
            with Worker("bench-pool", worker_env, log=worker_log):
                yield api_url, log
        finally:
            stop(proc)


def round_on(api_url: str, width: int) -> dict[str, float]:
    """One ``threads`` round on the server at ``api_url``, in a process of its own (a
    process's Prefect event stream stays with the first server it spoke to)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_nightly_children",
            "--round-on",
            api_url,
            "--width",
            str(width),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def compare_servers(rounds: int, width: int) -> None:
    """The ``threads`` shape on Prefect's app and on the project's, rounds alternating."""
    results: dict[str, list[dict[str, float]]] = {name: [] for name in APPS}
    with tempfile.TemporaryDirectory(prefix="bench-children-") as tmp, ExitStack() as stack:
        servers = {
            name: stack.enter_context(app_server(factory, Path(tmp) / name))
            for name, factory in APPS.items()
        }
        for api_url, _log in servers.values():  # a first round each: flows registered
            round_on(api_url, width)
        for _ in range(rounds):
            for name, (api_url, log) in servers.items():
                before = log.read_text().count("retryable exception")
                row = round_on(api_url, width)
                row["answered_503"] = log.read_text().count("retryable exception") - before
                results[name].append(row)
    print(
        "| server app | rounds | gap s (median, min-max) | rounds with gap >= 1 s | 503s answered |"
    )
    print("|---|---:|---|---:|---:|")
    for name, rows in results.items():
        gaps = [r["gap"] for r in rows]
        print(
            f"| {APPS[name]} | {len(rows)} | {statistics.median(gaps):.2f} "
            f"({min(gaps):.2f}-{max(gaps):.2f}) | {sum(g >= 1 for g in gaps)} "
            f"| {sum(int(r['answered_503']) for r in rows)} |"
        )
    print("gaps:", {name: [round(r["gap"], 2) for r in rows] for name, rows in results.items()})


HOLDS = (0.05, 0.2, 0.5, 1.0)  # seconds the other writer holds SQLite's write lock


def locked_create(api_url: str, db: Path, hold: float) -> float:
    """Seconds Prefect's client takes to create a task run while another writer holds
    the write lock of ``db`` for ``hold`` seconds from just before the request."""
    import sqlite3
    import threading

    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("bench-locked")
        run = client._client.post("/flow_runs/", json={"flow_id": str(flow_id)}).json()
        locked = threading.Event()

        def other_writer() -> None:
            con = sqlite3.connect(db, isolation_level=None, timeout=60)
            con.execute("BEGIN IMMEDIATE")
            locked.set()
            time.sleep(hold)  # the other writer's transaction (the injected fault)
            con.execute("ROLLBACK")
            con.close()

        holder = threading.Thread(target=other_writer)
        holder.start()
        locked.wait()
        began = time.perf_counter()
        client.create_task_run(task=step, flow_run_id=run["id"], dynamic_key=str(began))
        took = time.perf_counter() - began
        holder.join()
    return took


def compare_locked(rounds: int) -> None:
    """``locked_create`` on Prefect's app and on the project's, rounds alternating."""
    took: dict[tuple[str, float], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-locked-") as tmp, ExitStack() as stack:
        servers = {
            name: stack.enter_context(app_server(factory, Path(tmp) / name))
            for name, factory in APPS.items()
        }
        for _ in range(rounds):
            for hold in HOLDS:
                for name, (api_url, log) in servers.items():
                    seconds = locked_create(api_url, log.parent / "prefect.db", hold)
                    took.setdefault((name, hold), []).append(seconds)
    print("| lock held s | " + " | ".join(f"{APPS[n]}: s (median, min-max)" for n in APPS) + " |")
    print("|---:|" + "---|" * len(APPS))
    for hold in HOLDS:
        cells = []
        for name in APPS:
            t = took[(name, hold)]
            cells.append(f"{statistics.median(t):.2f} ({min(t):.2f}-{max(t):.2f})")
        print(f"| {hold:.2f} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--servers", action="store_true", help="Prefect's app against ours")
    parser.add_argument("--locked", action="store_true", help="a write under a held lock")
    parser.add_argument("--round-on", metavar="API_URL", help=argparse.SUPPRESS)
    parser.add_argument(
        "--width", type=int, default=8, help="with --servers: tasks at once in each child"
    )
    args = parser.parse_args()
    if args.round_on:
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings({PREFECT_API_URL: args.round_on}):
            row = measure("threads", fail=False, width=args.width)
        print(json.dumps(row), flush=True)
        return
    if args.locked:
        compare_locked(args.rounds)
        return
    if args.servers:
        compare_servers(args.rounds, args.width)
        return
    from prefect.testing.utilities import prefect_test_harness

    results: dict[str, list[dict[str, float]]] = {"tasks": [], "threads": []}
    failing: dict[str, dict[str, float]] = {}
    with prefect_test_harness(server_startup_timeout=120):
        for _ in range(args.rounds):
            for shape in ("tasks", "threads"):
                results[shape].append(measure(shape, fail=False))
        for shape in ("tasks", "threads"):
            failing[shape] = measure(shape, fail=True)
    print(
        "| shape | rounds | gap s (median, min-max) | overlap s (median) "
        "| RolledBack, failing child |"
    )
    print("|---|---:|---|---:|---:|")
    for shape, rows in results.items():
        gaps = [r["gap"] for r in rows]
        overlaps = [r["overlap"] for r in rows]
        print(
            f"| {shape} | {len(rows)} | {statistics.median(gaps):.2f} "
            f"({min(gaps):.2f}-{max(gaps):.2f}) | {statistics.median(overlaps):.2f} "
            f"| {failing[shape]['rolled_back']:.0f} |"
        )


if __name__ == "__main__":
    main()
