"""Where a flow's batch tasks run: the flow's own threads, or a Dask cluster.

A flow keeps its decorator's thread runner for the tasks that must stay in its
own process (the listing and its comparison with the stored state: an
in-process DuckDB over the run's listing; the commit at the end), and hands its
*batch* tasks to the runner chosen by ``task_runner``:

* ``thread``: the flow's own ``ThreadPoolTaskRunner``, or one of the batches' own
  (one machine, the default);
* ``dask``: a ``prefect_dask.DaskTaskRunner`` on the scheduler at ``dask_address``,
  or on a ``LocalCluster`` started for the run when the address is empty.

A task submitted to Dask is pickled with its parameters (a batch of keys as
Arrow IPC bytes and the settings without their secrets, a few KB) and runs on a worker process,
maybe another machine, which reports the task run to the Prefect API itself;
its result comes back pickled inside the final Prefect state.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from prefect.context import FlowRunContext
from prefect.futures import PrefectFuture
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from prefect.tasks import Task

from ingest.settings import Settings

if TYPE_CHECKING:
    from ingest.context import RunContext

log = logging.getLogger(__name__)


@contextmanager
def batch_runner(
    settings: Settings, threads: int | None = None, *, run_id: str | None = None
) -> Iterator[TaskRunner[Any]]:
    """The started runner for the flow's batch tasks (see the module docstring).

    With the thread runner and ``threads``, the batches get a thread pool of their own:
    tasks the flow submits to its decorator's runner (the listing) then never queue
    behind batches waiting for their downloads. On Dask, the contexts the run's tasks
    opened on the workers (``ingest.context.for_run``) are closed at the end when
    ``run_id`` is given."""
    if settings.task_runner == "thread":
        ctx = FlowRunContext.get()
        if ctx is None or ctx.task_runner is None:
            raise RuntimeError("batch_runner() is used inside a flow run")
        if threads is None:
            yield ctx.task_runner
            return
        with ThreadPoolTaskRunner(max_workers=threads) as own:  # type: ignore[var-annotated]
            start_threads(own, threads)
            yield own
        return
    from prefect_dask import DaskTaskRunner

    if settings.dask_address:
        cluster = DaskTaskRunner(address=settings.dask_address)
    else:  # A LocalCluster with Dask's defaults: each worker under a nanny, as a daemonic
        # process (the extraction pool starts its processes with subprocess, which a daemon may).
        cluster = DaskTaskRunner(cluster_kwargs=local_cluster_kwargs())
    with cluster as runner:
        warm(runner)
        try:
            yield runner
        finally:
            close_contexts(runner, run_id)


def start_threads(runner: Any, threads: int) -> None:
    """Start the thread runner's ``threads`` threads now, before the run's work. Its pool
    starts a thread on a submit that finds none idle, under a lock every submit of the
    process takes, and a start waits for the new thread to run: with downloads holding
    the GIL, handing out a run's first batches waited ~0.25 s on thread starts (py-spy,
    a first run of 2,000 objects). Uncontended, eight starts take about a millisecond.
    A runner without a thread pool of its own is left as it is."""
    executor = getattr(runner, "_executor", None)
    if not isinstance(executor, ThreadPoolExecutor):
        return
    # Each job holds its thread until all have started, so every submit finds none idle.
    gate = threading.Barrier(threads + 1)
    for _ in range(threads):
        executor.submit(gate.wait, 5)
    with contextlib.suppress(threading.BrokenBarrierError):
        gate.wait(5)


def close_contexts(runner: Any, run_id: str | None) -> dict[str, Any]:
    """Close on every worker the context run ``run_id`` opened there: its S3 connection
    and listing database go with the run, not with the worker. A worker that cannot be
    reached is left out (its contexts go with its process). Which workers had one."""
    from ingest import context

    if run_id is None:
        return {}
    try:
        return dict(runner.client.run(context.close_run, run_id, on_error="return"))
    except Exception:  # the cluster is going away: its workers' contexts go with them
        log.warning("the Dask workers' contexts of run %s were not closed", run_id)
        return {}


def warm(runner: Any) -> None:
    """Have every worker import the batch tasks now, while the flow lists the bucket: a
    fresh worker's first task otherwise starts with seconds of imports (the project,
    Prefect's engine, pyarrow, deltalake; 25 s on the loaded 2-core machine)."""
    from distributed import fire_and_forget

    client = runner.client
    workers = list(client.scheduler_info(n_workers=-1)["workers"])
    fire_and_forget(
        [client.submit(preload, workers=[w], pure=False, key=f"preload-{w}") for w in workers]
    )


def preload() -> None:
    """Set the worker's process up as the flow's is (``ingest.setup_process``: a worker
    started with ``dask worker`` runs no flow module) and import what a batch task needs
    (run on each worker by ``warm``)."""
    import importlib

    import ingest

    ingest.setup_process()
    for name in ("prefect.task_engine", "tasks.s3", "tasks.extraction", "tasks.rest"):
        importlib.import_module(name)


def local_cluster_kwargs() -> dict[str, Any]:
    """A LocalCluster's workers report to the flow's own Prefect API.

    Without ``PREFECT_API_URL`` the flow may run on a temporary server of its own
    process; a worker process would then start another one (about 30 s each, and
    its task runs recorded where no one looks). The workers get the address the
    flow's client uses.
    """
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        api_url = str(client.api_url)
    kwargs: dict[str, Any] = {"dashboard_address": None}
    if api_url.startswith(("http://", "https://")):
        kwargs["env"] = {"PREFECT_API_URL": api_url.rstrip("/")}
    return kwargs


def submit(runner: TaskRunner[Any], task: Task[..., Any], **parameters: Any) -> PrefectFuture[Any]:
    """``task.submit(**parameters)``, on ``runner`` instead of the flow's own runner.

    Settings go without their secrets (``Settings.without_secrets``), on every runner
    alike: on Dask the parameters are pickled through the scheduler to a worker that may
    be another machine, and the task reads a secret it needs where it runs."""
    kept = {k: v.without_secrets() if isinstance(v, Settings) else v for k, v in parameters.items()}
    return runner.submit(task, kept)


def run_context(settings: Settings, run_id: str) -> RunContext:
    """The context of run ``run_id`` in this process (``ingest.context.for_run``): the
    flow's, or on a Dask worker the one this worker holds for the run (opened by its
    first task there, closed by the flow's batch runner at the run's end). A task works
    with its ``settings`` (bound to the run's lake session), not with the ones it was
    given (which, pickled to a worker, arrive unbound)."""
    from ingest import context

    return context.for_run(settings, run_id, open_here=dask_worker() is not None)


def dask_worker() -> Any | None:
    """The Dask worker running the current task, or None."""
    # A Dask worker has imported distributed; any other process need not (importing it to
    # ask cost every thread-runner run 0.3 s).
    distributed = sys.modules.get("distributed")
    if distributed is not None:
        try:
            return distributed.get_worker()
        except ValueError:  # not inside a worker's task
            pass
    return None


def worker_name() -> str:
    """Who runs the current task: the Dask worker's name (its address unless named) on a
    cluster, else ``host:pid``."""
    worker = dask_worker()
    if worker is not None:
        return str(worker.name)
    return f"{socket.gethostname()}:{os.getpid()}"
