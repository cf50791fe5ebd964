"""Run history: one ``flow_runs`` row per finished flow run, and the comparison
of a run's stages with the previous run of the same deployment.

``task_timings`` already holds every task attempt by ``flow_run_id``; what it
cannot say is which runs belong together. A ``flow_runs`` row adds the
deployment (empty for runs started outside a deployment) and the parent flow
run (the ``nightly`` run of a child ingestion), so "the previous run of the
same deployment" is one query over Parquet, with or without a Prefect server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, date, datetime, timedelta
from typing import Any

from ingest import duck, storage
from ingest.report import summary as report
from ingest.storage import lake
from ingest.storage.location import DataDir, locate

# A stage counts as slower or faster only beyond this share and this many seconds,
# so the noise of a one-second stage does not read as a regression.
CHANGE_SHARE = 0.2
CHANGE_SECONDS = 0.5
# How far back the previous run is looked for first.
RECENT = timedelta(days=8)


@dataclass(slots=True)
class FlowRunRecord:
    """One row of ``flow_runs``."""

    flow_run_id: str
    flow_name: str
    deployment_id: str = ""
    parent_flow_run_id: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    seconds: float = 0.0
    items: int | None = 0  # None: not known (a run that failed before it counted)
    bytes: int | None = 0
    failed: int | None = 0
    state: str = "completed"
    message: str | None = None

    @classmethod
    def of(cls, row: dict[str, Any]) -> FlowRunRecord:
        """The record of a ``flow_runs`` row (its other columns, ``day``, left out)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in row.items() if k in names})


def record_flow_run(data_dir: DataDir, record: FlowRunRecord, *, staged_by: str = "") -> str:
    """Stage the run's ``flow_runs`` row (committed with the run; a later row of the same
    flow run, ended later, replaces it). ``staged_by``: the run whose commit carries it
    (a parent recording its children), by default the recorded run itself."""
    row = asdict(record)
    row["ended_at"] = row["ended_at"] or datetime.now(UTC)
    if row["started_at"] is None:
        row["started_at"] = row["ended_at"] - timedelta(seconds=record.seconds)
    path = storage.stage(
        data_dir,
        staged_by or record.flow_run_id,
        "flow_runs",
        _part(record.flow_run_id),
        [row],
    )
    assert path is not None
    return path


def flow_run(data_dir: DataDir, flow_run_id: str) -> dict[str, Any] | None:
    """The committed ``flow_runs`` row of ``flow_run_id``, if any."""
    sql = f"SELECT * FROM {storage.scan(data_dir, 'flow_runs')} WHERE flow_run_id = ?"
    return _first(data_dir, sql, [flow_run_id])


def record_child_run(
    data_dir: DataDir,
    observed: FlowRunRecord,
    *,
    staged_by: str,
) -> FlowRunRecord:
    """Stage the row of a child flow run as its parent saw it end, without losing what the
    child recorded itself.

    A child that got as far as recording its own row (``s3-ingest`` does, before it
    commits) knows its start, counts and failures better than its parent: those are kept,
    and the parent adds what only it knows (itself as parent, its deployment, the state
    the child finally ended in). A child that failed before recording anything gets the
    parent's observation: its start and duration, and counts only where it returned them
    (unknown counts stay NULL, not zero).
    """
    own = flow_run(data_dir, observed.flow_run_id)
    record = observed
    if own is not None:
        record = FlowRunRecord.of(own)
        record.parent_flow_run_id = record.parent_flow_run_id or observed.parent_flow_run_id
        record.deployment_id = record.deployment_id or observed.deployment_id
        if observed.seconds:  # the server's figure for the ended run, as the UI shows it
            record.seconds = observed.seconds
        if observed.started_at is not None:  # the server's start, with that figure
            record.started_at = observed.started_at
        if observed.state != "completed":  # the child ended failed after recording itself
            record.state = observed.state
            record.message = observed.message or record.message
        stored = FlowRunRecord.of(own)
        if observed.started_at is not None and observed.ended_at == stored.ended_at:
            record.ended_at = stored.ended_at
            if record == stored:  # the child recorded its end itself (``stage_end``)
                return record
        # Replaces the child's row only as a newer one: the child ended after it recorded.
        ended, seen = record.ended_at, observed.ended_at or datetime.now(UTC)
        if ended is None or seen > ended:
            record.ended_at = seen
        else:
            record.ended_at = ended + timedelta(microseconds=1)
    record_flow_run(data_dir, record, staged_by=staged_by)
    return record


def end_staging(flow_run_id: str) -> str:
    """The staging of a run's own ``flow_runs`` row and freshness rows: apart from its
    other rows, so that the run's commit leaves them and its end-of-run hook commits them
    once, with Prefect's start and end (``stage_end``). A process that dies before its
    hook leaves them to the next run's recovery, which commits them as staged."""
    return f"{flow_run_id}-end"


def staged_row(data_dir: DataDir, staged_by: str, flow_run_id: str) -> FlowRunRecord | None:
    """The ``flow_runs`` row of ``flow_run_id`` staged under ``staged_by`` (one small
    staged file, not a query of the lake), if any."""
    key = storage.staging.run_key(storage.staging.safe_name(staged_by))
    part = storage.staging.read_part(
        data_dir, f"{key}/flow_runs/{storage.staging.safe_name(_part(flow_run_id))}.parquet"
    )
    for row in part.to_pylist() if part is not None else ():
        if row["flow_run_id"] == flow_run_id:
            return FlowRunRecord.of(row)
    return None


def stage_end(data_dir: DataDir, ended: FlowRunRecord, *, staged_by: str) -> FlowRunRecord | None:
    """Stage an ended run's ``flow_runs`` row with the server's start and end (``ended``:
    the run as the server recorded it, counts None) under ``staged_by``, for one commit
    with the rest of that staging. The row the run staged itself before its end (under
    ``staged_by``, ``end_staging``), or else committed, keeps its counts and takes that
    start, end and duration, and the final state when the run did not complete; a run
    that recorded nothing gets ``ended`` (unknown counts stay NULL). None when the
    committed row already says it all."""
    own = staged_row(data_dir, staged_by, ended.flow_run_id)
    committed = None
    if own is None:  # it failed before recording itself, or recovery committed its row
        row = flow_run(data_dir, ended.flow_run_id)
        committed = FlowRunRecord.of(row) if row else None
    base = own or committed
    record = ended
    if base is not None:
        record = FlowRunRecord(**asdict(base))
        record.parent_flow_run_id = record.parent_flow_run_id or ended.parent_flow_run_id
        record.deployment_id = record.deployment_id or ended.deployment_id
        record.started_at, record.ended_at = ended.started_at, ended.ended_at
        record.seconds = ended.seconds
        if ended.state != "completed":
            record.state = ended.state
            record.message = record.message or ended.message
        if record == committed:
            return None
    record_flow_run(data_dir, record, staged_by=staged_by)
    return record


def _part(flow_run_id: str) -> str:
    """The name of a run's ``flow_runs`` part (``record_flow_run``)."""
    return f"flow-run-{flow_run_id}"


def previous_run(
    data_dir: DataDir, *, flow_name: str, deployment_id: str, flow_run_id: str
) -> dict[str, Any] | None:
    """The latest earlier ``flow_runs`` row of the same flow and deployment."""
    params = [flow_name, deployment_id, flow_run_id]
    # The last week's files first (the previous run of a nightly is a day old), then all.
    recent: lake.Prune = [("started_at", ">=", datetime.now(UTC) - RECENT)]
    for prune in (recent, None):
        sql = f"""
            SELECT * FROM {storage.scan(data_dir, "flow_runs", prune=prune)}
            WHERE flow_name = ? AND coalesce(deployment_id, '') = ? AND flow_run_id <> ?
              AND started_at IS NOT NULL
            ORDER BY started_at DESC, ended_at DESC LIMIT 1
        """
        found = _first(data_dir, sql, params)
        if found is not None:
            return found
    return None


def previous_run_of_target(
    data_dir: DataDir, *, flow_name: str, target: str, flow_run_id: str
) -> dict[str, Any] | None:
    """The latest earlier ``flow_runs`` row of a run of ``flow_name`` that read ``target``
    (``s3://bucket/prefix``, the repositories, the source), found by its freshness rows in
    ``source_nights``; runs over other inputs are no comparison.

    Two queries with literals, not a join or parameters: on a lake on object storage the
    tables are Arrow datasets of string_view columns, and DuckDB pushes a join's keys or a
    parameter down as plain strings, which pyarrow cannot compare with them ("no kernel
    matching (string_view, string)")."""
    runs = _all(
        data_dir,
        f"""SELECT DISTINCT flow_run_id FROM {storage.scan(data_dir, "source_nights")}
            WHERE source = {duck.sql_literal(flow_name)} AND target = {duck.sql_literal(target)}
                AND flow_run_id <> {duck.sql_literal(flow_run_id)}""",
        [],
    )
    if not runs:
        return None
    ids = ", ".join(duck.sql_literal(str(r["flow_run_id"])) for r in runs)
    sql = f"""
        SELECT * FROM {storage.scan(data_dir, "flow_runs")}
        WHERE flow_run_id IN ({ids}) AND started_at IS NOT NULL
        ORDER BY started_at DESC, ended_at DESC LIMIT 1
    """
    return _first(data_dir, sql, [])


def targets_of_nightly(data_dir: DataDir, nightly_run_id: str) -> dict[str, str]:
    """What each child of a nightly run read, by flow name (from ``source_nights``)."""
    sql = f"""
        SELECT source, target FROM {storage.scan(data_dir, "source_nights")}
        WHERE nightly_run_id = ?
    """
    return {r["source"]: r["target"] for r in _all(data_dir, sql, [nightly_run_id])}


def child_runs(data_dir: DataDir, parent_flow_run_id: str) -> list[dict[str, Any]]:
    """The ``flow_runs`` rows whose parent is ``parent_flow_run_id``, by flow name."""
    sql = f"""
        SELECT * FROM {storage.scan(data_dir, "flow_runs")}
        WHERE parent_flow_run_id = ?
        ORDER BY flow_name
    """
    return _all(data_dir, sql, [parent_flow_run_id])


def stages_of(
    data_dir: DataDir, runs: Sequence[tuple[str, str]], *, since: date | None = None
) -> list[dict[str, Any]]:
    """Stage tables of several runs, each stage named ``<label>: <stage>``.

    ``runs`` holds (label, flow_run_id) pairs; an empty label keeps the plain
    stage names (a single flow run). ``since``: the first day their tasks may have
    started (``report.stage_table``).
    """
    rows: list[dict[str, Any]] = []
    for label, run_id in runs:
        for s in report.stage_table(data_dir, run_id, since=since):
            rows.append({**s, "stage": f"{label}: {s['stage']}" if label else s["stage"]})
    return rows


# The shortest previous wall time a relative change is given for.
SHARE_BASE_SECONDS = 0.1


def compare_stages(
    now: Sequence[dict[str, Any]], before: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Wall seconds per stage, now against before, with a verdict per stage.

    ``change`` gives the absolute change and the relative one; a stage is
    ``slower`` or ``faster`` only beyond both thresholds (``CHANGE_SECONDS`` and
    ``CHANGE_SHARE``), else ``about the same``.
    """
    previous = {s["stage"]: s for s in before}
    out: list[dict[str, Any]] = []
    for s in now:
        p = previous.get(s["stage"])
        wall = float(s.get("wall_seconds") or 0)
        row: dict[str, Any] = {"stage": s["stage"], "wall_seconds": round(wall, 2)}
        if p is None:
            row.update(previous_wall_seconds=None, change=None, verdict="new stage")
        else:
            was = float(p.get("wall_seconds") or 0)
            delta = wall - was
            # A share of a near-zero figure says nothing ("+20900%" for 0.00 -> 0.21 s).
            share = delta / was if was >= SHARE_BASE_SECONDS else None
            if abs(delta) < CHANGE_SECONDS or (share is not None and abs(share) < CHANGE_SHARE):
                verdict = "about the same"
            else:
                verdict = "slower" if delta > 0 else "faster"
            change = f"{delta:+.2f} s"
            if share is not None:
                change += f" ({share:+.0%})"
            row.update(previous_wall_seconds=round(was, 2), change=change, verdict=verdict)
        out.append(row)
    return out


def when_text(row: dict[str, Any]) -> str:
    """When a ``flow_runs`` row's run started (or ended, for a row without a start)."""
    for column, word in (("started_at", "started"), ("ended_at", "ended")):
        value = row.get(column)
        if isinstance(value, datetime):
            return f"{word} {value.astimezone(UTC).strftime('%Y-%m-%d %H:%M UTC')}"
    return "time not recorded"


def comparison_markdown(
    comparison: Sequence[dict[str, Any]],
    previous: dict[str, Any] | None,
    *,
    heading: str = "Compared with the previous run of this deployment",
    link: Callable[[str], str] | None = None,
    what: str = "run",
) -> str:
    """The "compared with the previous run" section of a run summary; ``what`` names what
    none was found of (``run of s3://b/p``)."""
    link = link or (lambda run_id: f"`{run_id}`")
    lines = ["", f"## {heading}", ""]
    if previous is None or not comparison:
        return "\n".join([*lines, f"No earlier {what} to compare with."])
    lines += [
        f"Previous run {link(previous['flow_run_id'])} {when_text(previous)} and took "
        f"{previous['seconds'] or 0:.2f} s in Running ({previous['state']}). A stage reads "
        f"slower or faster only when its wall time changed by at least {CHANGE_SECONDS:g} s and "
        f"{CHANGE_SHARE:.0%}; smaller changes are about the same.",
        "",
        "| stage | wall s now | wall s before | change | verdict |",
        "|---|---:|---:|---:|---|",
    ]
    for r in comparison:
        before = "" if r["previous_wall_seconds"] is None else f"{r['previous_wall_seconds']:.2f}"
        lines.append(
            f"| {r['stage']} | {r['wall_seconds']:.2f} | {before} | {r['change'] or ''} "
            f"| {r['verdict']} |"
        )
    return "\n".join(lines)


def _all(data_dir: DataDir, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    # the SQL already names the files; the run's database for small queries answers it
    with duck.cursor(locate(data_dir).queries) as con:
        return duck.records(con.execute(sql, params))


def _first(data_dir: DataDir, sql: str, params: list[Any]) -> dict[str, Any] | None:
    rows = _all(data_dir, sql, params)
    return rows[0] if rows else None
