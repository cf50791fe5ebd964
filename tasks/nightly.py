"""The nightly run's children (each run as a subflow, timed and tagged as the server
records it) and its one summary: both ingestions, their stages, and the comparison
with the previous nightly run of the same deployment."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

from prefect import Flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run

from ingest import markdown as md
from ingest.report import chart, freshness, history, nightly, nights
from ingest.report import summary as report
from ingest.report.nightly import ChildOutcome, advice, is_terminal
from ingest.report.summary import RunSummary
from ingest.report.timing import seconds_so_far
from ingest.settings import Settings
from tasks.history import current_ids, previous_of_current_run, record_current_run, run_link
from tasks.progress import publish_progress
from tasks.runners import run_context
from tasks.timing import prefect_interval

# The tags that name a source; a child gets its own, never another source's.
SOURCE_TAGS = {"s3-ingest": "s3", "github-pulls": "github", "rest-ingest": "rest"}


def child_tags(flow_name: str, have: list[str], parent: list[str]) -> list[str]:
    """A child's tags: its own, the parent's shared ones (not the parent's source tags)
    with ``nightly`` and ``nightly-child``, and its own source tag."""
    own = {SOURCE_TAGS[flow_name]} if flow_name in SOURCE_TAGS else set()
    others = set(SOURCE_TAGS.values()) - own
    shared = {t for t in [*have, *parent] if t not in others}
    return sorted({*shared, *own, "nightly", "nightly-child"})


def tag_child(flow_run_id: Any, flow_name: str) -> None:
    """Give the finished child run its source tag and the nightly's shared tags (and
    ``nightly``, ``nightly-child``), so filtering the run list on ``nightly`` finds it and
    filtering on ``s3`` finds no GitHub run. Set on the run afterwards, not with
    ``prefect.tags()`` around the call: those tags would reach every task run too, and each
    tagged task run asks the server for tag concurrency slots."""
    try:
        with get_client(sync_client=True) as client:
            have = client.read_flow_run(flow_run_id).tags or []
            wanted = child_tags(flow_name, have, list(flow_run.tags or []))
            if wanted != sorted(have):
                client.update_flow_run(flow_run_id, tags=wanted)
    except Exception as exc:  # a signpost for the run list, not worth failing the night
        get_run_logger().warning("tags not added to child run %s: %s", flow_run_id, exc)


# How long the next child waits for the one before it to be Running before it is
# created anyway (a server that slow answers later rather than refuses).
CREATE_WAIT_SECONDS = 30.0


def run_children(
    children: Sequence[tuple[Flow[Any, Any], dict[str, Any], str]],
    on_finished: Any = None,
) -> list[ChildOutcome]:
    """Run each ``(flow, parameters, target)`` as a subflow of the calling flow run, all
    at the same time, each in its own thread; their outcomes in the order given, never
    raising. ``on_finished(done)`` is called with the outcomes so far as each one ends.

    Called from the flow itself, not from a task: a subflow called inside a task runs
    inside that task's transaction, so a child that failed had its task runs drawn
    RolledBack under the parent (its stored rows and all). Each child is created once the
    one before it is Running (its ``on_running`` hook): a SQLite Prefect server answers
    503 ("database is locked") to two flow runs created at the same moment, and the
    client then waits 2 s, then 4 s before it asks again, which delayed the second child
    by seconds. A child's own work, as it starts, writes to the server too (its logs,
    its task runs' states), so a Running child waits in that hook, before its work,
    until the next child is Running too (at most CREATE_WAIT_SECONDS): the second starts
    within the few requests of its creation after the first, and both run together.
    """
    futures: list[Future[ChildOutcome]] = []
    marks = [_Started() for _ in children]
    for mark, after in pairwise(marks):
        mark.next = after
    with ThreadPoolExecutor(
        max_workers=max(1, len(children)), thread_name_prefix="nightly-child"
    ) as pool:
        for (child, parameters, target), started in zip(children, marks, strict=True):
            hooked = child.with_options(on_running=[*child.on_running_hooks, started])
            context = contextvars.copy_context()  # the nightly's run context, per thread
            future = pool.submit(context.run, run_child, hooked, parameters, target)
            future.add_done_callback(started.ended)
            futures.append(future)
            started.event.wait(CREATE_WAIT_SECONDS)
        outcomes: list[ChildOutcome] = []
        for (child, _parameters, _target), future in zip(children, futures, strict=True):
            outcomes.append(outcome_of(future, child.name))
            if on_finished is not None:
                on_finished(outcomes)
    return outcomes


class _Started:
    """Set when a child's flow run is Running (as its ``on_running`` hook) or its thread
    ended without getting there; as the hook, it then waits for the next child's mark."""

    __name__: str  # hooks are named in Prefect's logs

    def __init__(self) -> None:
        self.__name__ = "child-started"
        self.event = threading.Event()
        self.next: _Started | None = None  # the child created after this one

    def __call__(self, flow: Any, flow_run: Any, state: Any) -> None:
        self.event.set()
        if self.next is not None:  # hold this child's work until the next one exists
            self.next.event.wait(CREATE_WAIT_SECONDS)

    def ended(self, _future: Any) -> None:
        self.event.set()

    def __reduce__(self) -> tuple[Any, ...]:
        # The child flow, hooks included, goes with every task it submits to Dask; the
        # hook only ever runs in this process, so a copy elsewhere is a fresh, unlinked
        # mark (an Event's lock cannot be pickled).
        return (_Started, ())


def run_child(child: Flow[Any, Any], parameters: dict[str, Any], target: str) -> ChildOutcome:
    """Run ``child`` as a subflow of the calling run; what became of it, never raising.
    Its start, end and duration are the server's (``start_time``, ``end_time``)."""
    called_at = datetime.now(UTC)
    state: Any = child(**parameters, return_state=True)
    result = state.result(raise_on_failure=False)
    error = result if isinstance(result, BaseException) else None
    run_id = state.state_details.flow_run_id
    tag_child(run_id, child.name)
    interval = prefect_interval(run_id)
    started_at, ended_at = interval if interval else (called_at, datetime.now(UTC))
    outcome = ChildOutcome(
        flow_name=child.name,
        flow_run_id=str(run_id),
        state=state.type.value.lower(),
        message=state.message or "",
        seconds=(ended_at - started_at).total_seconds(),
        error_type=type(error).__name__ if error else "",
        summary=None if error else result,
        target=target,
        started_at=started_at,
    )
    outcome.cause = outcome.message
    if isinstance(outcome.summary, RunSummary):
        outcome.failures = report.failed_items(outcome.summary)
    elif outcome.summary is not None:  # a REST summary: (repository or page, error)
        outcome.failures = [(k, e, False) for k, e in getattr(outcome.summary, "errors", [])]
    if error is not None:
        outcome.terminal = is_terminal(error)
        outcome.message = advice(outcome, outcome.terminal)
    return outcome


def outcome_of(future: Future[ChildOutcome], flow_name: str) -> ChildOutcome:
    """The outcome of a child's thread; one that broke before its child ended becomes a
    failed outcome naming its error."""
    try:
        return future.result()
    except Exception as exc:
        cause = f"{type(exc).__name__}: {exc}"
        return ChildOutcome(
            flow_name=flow_name, flow_run_id="", state="failed", cause=cause, message=cause
        )


@task(name="publish-nightly-summary", cache_policy=NO_CACHE)
def publish_nightly_summary(
    settings: Settings, run_id: str, outcomes: list[nightly.ChildOutcome], seconds: float
) -> list[dict[str, Any]]:
    """Record the runs, compare with the previous nightly run, publish the artifacts.

    Returns the stage comparison rows (empty on the first run).
    """
    ctx = run_context(settings, run_id)
    settings = ctx.settings
    data_dir = ctx.lake
    ids = current_ids(ctx)
    recorded = {  # the children's rows, without losing what a child recorded itself
        o.flow_name: history.record_child_run(
            data_dir,
            nightly.observed_record(o, ids["flow_run_id"], ids["deployment_id"]),
            staged_by=ids["flow_run_id"],
        )
        for o in outcomes
    }
    tonight = freshness.record(
        data_dir,
        [
            freshness.SourceNight(
                source=o.flow_name,
                target=o.target,
                state=o.state,
                seconds=o.seconds,
                rows_changed=o.changed,
                # A failed child returned no summary: its counts are in its own row.
                failed=o.failed_items if o.summary else int(recorded[o.flow_name].failed or 0),
                bytes=int(
                    getattr(o.summary, "bytes", 0)
                    if o.summary
                    else recorded[o.flow_name].bytes or 0
                ),
                flow_run_id=o.flow_run_id,
                nightly_run_id=ids["flow_run_id"],
            )
            for o in outcomes
        ],
        staged_by=ids["flow_run_id"],
    )
    last_nights = nights.load(data_dir, staged_run=ids["flow_run_id"])
    chart_path = chart.write(settings.local_path, last_nights)
    stages = history.stages_of(data_dir, [(o.flow_name, o.flow_run_id) for o in outcomes])
    previous = previous_of_current_run(data_dir, ids)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    if previous is not None:
        # A child is compared only with the previous night's run of the same target.
        then = history.targets_of_nightly(data_dir, previous["flow_run_id"])
        tonight_targets = {o.flow_name: o.target for o in outcomes}
        before = []
        for r in history.child_runs(data_dir, previous["flow_run_id"]):
            name = r["flow_name"]
            if name not in tonight_targets:
                continue
            if then.get(name, tonight_targets[name]) == tonight_targets[name]:
                before.append(r)
            else:
                notes.append(
                    f"{name} read {md.code(then[name])} then and "
                    f"{md.code(tonight_targets[name])} tonight: its stages are not compared."
                )
        for o in outcomes:
            if o.flow_name not in {r["flow_name"] for r in before} and not any(
                n.startswith(o.flow_name + " ") for n in notes
            ):
                notes.append(f"No earlier {o.flow_name} run of {md.code(o.target)} to compare.")
        rows = history.compare_stages(
            [s for s in stages if s["stage"].split(":", 1)[0] in {r["flow_name"] for r in before}],
            history.stages_of(data_dir, [(r["flow_name"], r["flow_run_id"]) for r in before]),
        )
    failed = [o for o in outcomes if not o.ok]
    record_current_run(
        data_dir,
        ids,
        seconds=seconds,
        items=len(outcomes),
        failed=len(failed),
        state="failed" if failed else "completed",
        message="; ".join(o.message for o in failed) or None,
    )
    logger = get_run_logger()
    for o in outcomes:
        logger.info("%s", nightly.headline(o).replace("**", ""))
    for r in rows:
        if r["verdict"] in ("slower", "faster"):
            logger.info("%s: %s (%s)", r["stage"], r["verdict"], r["change"])
    for n in last_nights:
        if n.slow and n.nightly_run_id == ids["flow_run_id"]:
            logger.warning("%s slow tonight: %s", n.source, nights.slow_note(n).replace("**", ""))
    create_table_artifact(  # the chart's figures where the UI shows them: one row per bar
        key="nightly-durations",
        table=chart.table(last_nights),
        description="nightly: duration per source and night (the chart's figures)",
    )
    history_md = nights.markdown(
        last_nights,
        "Durations over the nights: the `nightly-durations` table artifact of this run (one "
        f"row per bar); the same as a chart, `reports/{chart_path.name}` in the data folder.",
        run_link,
    )
    create_markdown_artifact(
        key="nightly-history",
        markdown=f"# The last {nights.NIGHTS} nights\n\n{history_md}",
        description="nightly: the last nights per source, trend, slow nights, chart",
    )
    if stages:
        create_table_artifact(
            key="nightly-stage-timing", table=stages, description="nightly: per-stage timing"
        )
    publish_progress(  # the finished bar says how it ended, not only "100 %"
        ctx,
        "nightly-progress",
        len(outcomes),
        len(outcomes),
        f"Ingestions done, {seconds_so_far(seconds)}: "
        + ", ".join(f"{o.flow_name} {o.verdict} ({o.seconds:.1f} s)" for o in outcomes),
    )
    create_markdown_artifact(
        key="nightly-summary",
        markdown=nightly.markdown(
            outcomes,
            stages,
            seconds,
            history.comparison_markdown(rows, previous, link=run_link)
            + "".join(f"\n\n{n}" for n in notes),
            link=run_link,
            sections=[freshness.markdown(tonight), history_md],
        ),
        description="nightly ingestion: both sources, per-stage timing, comparison",
    )
    return rows
