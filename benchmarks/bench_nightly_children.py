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
"""

from __future__ import annotations

import argparse
import statistics
import time
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
def child(n: int, fail: bool = False) -> int:
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
def nightly_threads(fail: bool = False) -> None:
    from tasks.nightly import run_children

    run_children([(child, {"n": 1, "fail": fail}, "a"), (child, {"n": 2}, "b")])


def measure(shape: str, fail: bool) -> dict[str, float]:
    parent = nightly_tasks if shape == "tasks" else nightly_threads
    state = parent(fail=fail, return_state=True)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
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
