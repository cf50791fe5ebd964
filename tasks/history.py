"""Prefect glue for ``ingest.report.history``: ids come from the running flow.

The deployment of a run started by a deployment is that deployment; a child
flow run (``s3-ingest`` under ``nightly``) inherits its parent's, so its
previous run is the same child of the previous nightly run.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from prefect import get_run_logger
from prefect.context import FlowRunContext
from prefect.runtime import deployment, flow_run
from prefect.settings import PREFECT_UI_URL

from ingest import markdown as md
from ingest import storage
from ingest.context import RunContext
from ingest.report import freshness, history, timing
from ingest.report import summary as report
from ingest.storage.location import DataDir

_logger = logging.getLogger("ingest.report.history")

# Runs whose end-of-run hook committed their row in this process, by flow-run id: the
# duration committed (Prefect's start to end), for the command that ran the flow to print
# it from memory instead of reading the row back from the lake (``ended_seconds``). A
# command ends one run; a nightly's children add theirs: the last few are kept.
_ended: OrderedDict[str, float] = OrderedDict()
_ended_lock = threading.Lock()
_ENDED_KEPT = 16


def current_ids(ctx: RunContext) -> dict[str, str]:
    """flow_run_id, flow_name, deployment_id and parent_flow_run_id of the running flow,
    the run of ``ctx`` (asked once per run, kept in its context: outside a deployment,
    each of Prefect's runtime lookups of the deployment and the parent is an API call)."""
    return dict(ctx.once(("flow-run-ids",), _lookup_ids))


def _lookup_ids() -> dict[str, str]:
    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is not None and run.parent_task_run_id is None:
        # Read from the run itself: prefect.runtime's deployment.id asks the API for the
        # flow run even when the context holds it (~25 ms on a busy server, at a run's end).
        return {
            "flow_run_id": str(run.id),
            "flow_name": str(flow_run.flow_name or ""),
            "deployment_id": str(run.deployment_id or ""),
            "parent_flow_run_id": "",
        }
    try:
        parent = str(flow_run.parent_flow_run_id or "")
    except Exception:  # no API (a plain function call in a unit test)
        parent = ""
    return {
        "flow_run_id": str(flow_run.id or "local"),
        "flow_name": str(flow_run.flow_name or ""),
        "deployment_id": str(deployment.id or ""),
        "parent_flow_run_id": parent,
    }


def record_current_run(
    data_dir: DataDir,
    ids: dict[str, str],
    *,
    seconds: float,
    items: int = 0,
    size: int = 0,
    failed: int = 0,
    state: str = "completed",
    message: str | None = None,
    target: str = "",
    changed: int = 0,
) -> history.FlowRunRecord:
    """Stage the running flow's ``flow_runs`` row (overwritten if written again); ``ids``
    from ``current_ids``. It is staged apart (``history.end_staging``): the run's
    end-of-run hook commits it with Prefect's start and end (``record_final_run``).

    With ``target`` (what the run reads: ``s3://bucket/prefix``, the repositories, the
    source), a run of its own, not a child of a nightly run (which records its children's
    freshness itself), also updates the freshness of that target (``ingest status``), with
    ``changed`` as the rows it changed, staged and committed with that row."""
    staged_by = history.end_staging(ids["flow_run_id"])
    ended = datetime.now(UTC)
    record = history.FlowRunRecord(
        **ids,
        started_at=ended - timedelta(seconds=seconds),
        ended_at=ended,
        seconds=seconds,
        items=items,
        bytes=size,
        failed=failed,
        state=state,
        message=message,
    )
    history.record_flow_run(data_dir, record, staged_by=staged_by)
    storage.staging.touch(data_dir, staged_by)  # a killed run's: recovered by the next run
    if target and not record.parent_flow_run_id:
        freshness.record(
            data_dir,
            [
                freshness.SourceNight(
                    source=record.flow_name,
                    target=target,
                    state=state,
                    seconds=seconds,
                    rows_changed=changed,
                    failed=failed,
                    bytes=size,
                    flow_run_id=record.flow_run_id,
                )
            ],
            staged_by=staged_by,
        )
    return record


def previous_of_current_run(data_dir: DataDir, ids: dict[str, str]) -> dict[str, Any] | None:
    """The ``flow_runs`` row of the running flow's previous run of the same deployment
    (``ids`` from ``current_ids``)."""
    return history.previous_run(
        data_dir,
        flow_name=ids["flow_name"],
        deployment_id=ids["deployment_id"],
        flow_run_id=ids["flow_run_id"],
    )


def compare_with_previous(
    data_dir: DataDir, stages: list[dict[str, Any]], ids: dict[str, str], *, target: str = ""
) -> tuple[list[dict[str, Any]], str]:
    """Compare ``stages`` of the running flow (``ids`` from ``current_ids``) with its
    previous run: of the same target (what it reads) when ``target`` is given, else of
    the same deployment.

    Returns the comparison rows and the markdown section for the run summary.
    """
    what = "run"
    if target:
        previous = history.previous_run_of_target(
            data_dir, flow_name=ids["flow_name"], target=target, flow_run_id=ids["flow_run_id"]
        )
        what = f"{ids['flow_name']} run of {md.code(target)}"
        heading = f"Compared with the previous {what}"
    else:
        previous = previous_of_current_run(data_dir, ids)
    if target:
        pass  # the heading names the target
    elif ids["parent_flow_run_id"]:
        heading = f"Compared with the {ids['flow_name']} run of the previous nightly run"
    elif ids["deployment_id"]:
        heading = "Compared with the previous run of this deployment"
    else:
        heading = "Compared with the previous run started outside a deployment"
    rows: list[dict[str, Any]] = []
    if previous is not None:
        since = (previous["started_at"] - timedelta(days=1)).date()  # whatever its zone
        rows = history.compare_stages(
            stages, history.stages_of(data_dir, [("", previous["flow_run_id"])], since=since)
        )
        for r in rows:
            if r["verdict"] in ("slower", "faster"):
                get_run_logger().info(
                    "stage %s %s than the previous run: %.2f s against %.2f s",
                    r["stage"],
                    r["verdict"],
                    r["wall_seconds"],
                    r["previous_wall_seconds"],
                )
    return rows, history.comparison_markdown(
        rows, previous, heading=heading, link=run_link, what=what
    )


def run_link(flow_run_id: str) -> str:
    """A markdown link to the flow run in the Prefect UI (``PREFECT_UI_URL``), or the
    short id where there is no UI (a run without a server)."""
    short = f"`{flow_run_id[:8]}`"
    ui = PREFECT_UI_URL.value()
    if not ui or not flow_run_id or flow_run_id == "local":
        return short
    return f"[{flow_run_id[:8]}]({str(ui).rstrip('/')}/runs/flow-run/{flow_run_id})"


def record_final_run(flow: Any, run: Any, state: Any) -> None:
    """A flow's ``on_completion``/``on_failure``/``on_crashed`` hook, called once Prefect
    has recorded the run's final state: the run's ``flow_runs`` row takes the server's
    ``start_time`` and ``end_time`` (what ``ingest status`` and the next run's "took"
    read), and a run that failed before recording itself gets a row. Never raises: a row
    that cannot be written is one warning in the run's log."""
    try:
        _record_final_run(flow, run, state)
    except Exception as exc:  # the run has ended: its state must not change for this
        _logger.warning(
            "flow_runs row of run %s not updated: %s", run.id, report.short(str(exc), 300)
        )


def _record_final_run(flow: Any, run: Any, state: Any) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        stored = client.read_flow_run(run.id)
        parent = ""
        if stored.parent_task_run_id is not None:
            parent = str(client.read_task_run(stored.parent_task_run_id).flow_run_id or "")
        if stored.start_time is None or stored.end_time is None:  # it never ran
            return
        seconds = (stored.end_time - stored.start_time).total_seconds()
        # The artifacts' requests beside the lake's commit: neither waits for the other.
        with ThreadPoolExecutor(1, "final-artifacts") as pool:
            pool.submit(_final_artifacts_or_warn, client, run.id, seconds)
            if not _refused(state):  # refused folders: nothing of it is written there
                _commit_final_row(flow, run, state, stored, parent, seconds)


def _final_artifacts_or_warn(client: Any, flow_run_id: Any, seconds: float) -> None:
    try:
        final_artifacts(client, flow_run_id, seconds)
    except Exception as exc:  # they keep their figure up to the summary, which says so
        _logger.warning(
            "artifacts of run %s keep their figure: %s", flow_run_id, report.short(str(exc), 300)
        )


def _commit_final_row(
    flow: Any, run: Any, state: Any, stored: Any, parent: str, seconds: float
) -> None:
    from ingest.settings import Settings

    data_dir = (stored.parameters or {}).get("data_dir")
    location = Settings().with_data_dir(data_dir).location
    # One commit: the row the run staged (history.end_staging), or Prefect's record of a
    # run that staged none, with Prefect's start and end, and the run's freshness rows
    # with that duration; then the views of those tables.
    staged_by = history.end_staging(str(run.id))
    history.stage_end(
        location,
        history.FlowRunRecord(
            flow_run_id=str(run.id),
            flow_name=str(flow.name),
            deployment_id=str(stored.deployment_id or ""),
            parent_flow_run_id=parent,
            started_at=stored.start_time,
            ended_at=stored.end_time,
            seconds=seconds,
            items=None,
            bytes=None,
            failed=None,
            state=state.type.value.lower(),
            message=report.short(state.message, 500) if state.message else None,
        ),
        staged_by=staged_by,
    )
    if not parent:  # a child's freshness rows are its parent's, with Prefect's figure
        freshness.take_run_seconds(location, staged_by, str(run.id), seconds)
    storage.finish_run(location, staged_by)
    with _ended_lock:
        _ended[str(run.id)] = seconds
        while len(_ended) > _ENDED_KEPT:
            _ended.popitem(last=False)


def ended_seconds(flow_run_id: str) -> float | None:
    """The duration (Prefect's start to end) that this process's end-of-run hook committed
    in ``flow_run_id``'s ``flow_runs`` row; None when it committed none here (another
    process ran it, or the row could not be written: the lake's row is then the word)."""
    with _ended_lock:
        return _ended.pop(str(flow_run_id), None)


def final_artifacts(client: Any, flow_run_id: Any, seconds: float) -> None:
    """The run's artifacts written before it ended (its summary, its finished progress
    bar) say its duration up to then (``timing.seconds_so_far``); each takes ``seconds``,
    its start to end as Prefect recorded them, in place: the same artifact, its key's
    latest version, now with the figure the run's page shows."""
    from prefect.client.schemas.actions import ArtifactUpdate
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    artifacts = client.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
    )
    for artifact in artifacts:
        changed: dict[str, Any] = {}
        if isinstance(artifact.data, str):
            data = timing.final_seconds(artifact.data, seconds)
            if data != artifact.data:
                changed["data"] = data
        if artifact.description:
            description = timing.final_seconds(artifact.description, seconds)
            if description != artifact.description:
                changed["description"] = description
        if changed:
            client.update_artifact(artifact.id, ArtifactUpdate(**changed))


def _refused(state: Any) -> bool:
    """Whether the run failed because its parameters or settings were refused (a folder or
    host it may not use, a download folder over the lake): such a run wrote nothing, and its
    row must not be the first thing written where it was refused."""
    from ingest.s3.files import UnsafeFolderError
    from ingest.security import ParameterRefusedError

    if state.is_completed():
        return False
    try:
        exc = state.result(raise_on_failure=False)
    except Exception:
        return False
    return isinstance(exc, ParameterRefusedError | UnsafeFolderError | ValueError)


# The hooks every ingestion flow ends with (``@ingest_flow(**FINAL_HOOKS, ...)``).
FINAL_HOOKS: dict[str, Any] = {
    "on_completion": [record_final_run],
    "on_failure": [record_final_run],
    "on_crashed": [record_final_run],
}
