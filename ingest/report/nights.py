"""The last nights at a glance: per source, the last 14 nights (duration, rows
changed, failures, bytes), the trend, and the nights that were much slower than
the ones before them, with the stage that grew.

The nights come from ``source_nights`` (one row per source per nightly run, see
``ingest.report.freshness``); the stages of a night come from ``task_timings`` of that
night's child flow run. A night is flagged when it took more than ``SLOW_FACTOR``
times the median of the nights before it (at least ``MIN_PREVIOUS`` of them);
the stage named is the one whose wall time grew most over its own median.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ingest import duck, storage
from ingest import markdown as md
from ingest.report.timing import human_bytes
from ingest.storage.location import DataDir, locate

NIGHTS = 14
SLOW_FACTOR = 2.0
MIN_PREVIOUS = 3


@dataclass(slots=True)
class Night:
    """One source in one night, with its comparison to the nights before."""

    source: str
    night: str  # the nightly run's day, YYYY-MM-DD (UTC)
    state: str
    seconds: float
    rows_changed: int
    failed: int
    bytes: int
    flow_run_id: str
    nightly_run_id: str
    target: str = ""  # what the source read that night: s3://bucket/prefix, repositories
    median_before: float | None = None
    slow: bool = False
    grown_stage: str = ""
    grown_by: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def series(self) -> str:
        """The source and what it read: each target's nights are a series of their own."""
        return f"{self.source} {self.target}" if self.target else self.source

    @property
    def ratio(self) -> float | None:
        return self.seconds / self.median_before if self.median_before else None


def load(data_dir: DataDir, *, staged_run: str | None = None, nights: int = NIGHTS) -> list[Night]:
    """The last ``nights`` rows of each source, oldest first (with the ``source_freshness``
    rows ``staged_run``, the running nightly, has staged), each with its stage wall times."""
    # The nightly runs' rows: a run of its own logs its source's freshness here too.
    source = (
        f"(SELECT * EXCLUDE (day) FROM {storage.scan(data_dir, 'source_nights')} "
        "WHERE coalesce(nightly_run_id, '') <> '')"
    )
    # Tonight's rows are staged for source_freshness; its log gets them at the commit.
    staged = (
        storage.staging.scan_parts(data_dir, staged_run, "source_freshness") if staged_run else None
    )
    if staged:
        source = f"({source} UNION ALL BY NAME {staged})"
    sql = f"""
        SELECT * FROM (
            SELECT *, row_number() OVER (
                PARTITION BY source, target ORDER BY checked_at DESC) AS n
            FROM {source}
        ) WHERE n <= ? ORDER BY source, target, checked_at
    """
    with locate(data_dir).connect() as con:
        rows = duck.records(con.execute(sql, [nights]))
    out = [
        Night(
            source=r["source"],
            night=r["checked_at"].strftime("%Y-%m-%d"),
            state=r["state"],
            seconds=float(r["seconds"] or 0),
            # A failed night changed nothing; the row keeps the last success's count.
            rows_changed=int(r["rows_changed"] or 0) if r["state"] == "completed" else 0,
            failed=int(r["failed"] or 0),
            bytes=int(r["bytes"] or 0),
            flow_run_id=r["flow_run_id"] or "",
            nightly_run_id=r["nightly_run_id"] or "",
            target=r["target"] or "",
        )
        for r in rows
    ]
    stages = stage_walls(data_dir, [n.flow_run_id for n in out if n.flow_run_id])
    for n in out:
        n.stages = stages.get(n.flow_run_id, {})
    return flag_slow(out)


def stage_walls(data_dir: DataDir, flow_run_ids: Sequence[str]) -> dict[str, dict[str, float]]:
    """Wall seconds (first start to last end) per stage of each flow run."""
    if not flow_run_ids:
        return {}
    sql = f"""
        SELECT flow_run_id, task_name,
               epoch(max(ended_at)) - epoch(min(started_at)) AS wall
        FROM {storage.scan(data_dir, "task_timings")}
        WHERE flow_run_id IN (SELECT unnest(?))
        GROUP BY flow_run_id, task_name
    """
    out: dict[str, dict[str, float]] = {}
    with locate(data_dir).connect() as con:
        for run_id, stage, wall in con.execute(sql, [list(flow_run_ids)]).fetchall():
            out.setdefault(run_id, {})[stage] = float(wall or 0)
    return out


def flag_slow(nights: list[Night]) -> list[Night]:
    """Mark the nights slower than ``SLOW_FACTOR`` x the median of the earlier nights of
    the same source, and name the stage that grew most."""
    by_source: dict[str, list[Night]] = {}
    for n in nights:
        before = by_source.setdefault(n.series, [])
        if len(before) >= MIN_PREVIOUS:
            n.median_before = statistics.median(b.seconds for b in before)
            if n.median_before > 0 and n.seconds > SLOW_FACTOR * n.median_before:
                n.slow = True
                n.grown_stage, n.grown_by = grown_stage(n, before)
        before.append(n)
    return nights


def grown_stage(night: Night, before: Sequence[Night]) -> tuple[str, float]:
    """The stage whose wall time grew most over its median in ``before`` (0 where absent)."""
    best, growth = "", 0.0
    for stage, wall in night.stages.items():
        usual = statistics.median(b.stages.get(stage, 0.0) for b in before)
        if wall - usual > growth:
            best, growth = stage, wall - usual
    return best, growth


BAR_CHARS = 30  # the longest night's bar


def bars(nights: Sequence[Night]) -> list[str]:
    """The nights' durations as a bar chart the Prefect UI draws (a markdown table, newest
    last): a bar per night scaled to the longest, its figure, and failed nights marked."""
    top = max((n.seconds for n in nights), default=0.0)
    scale = top / BAR_CHARS if top else 0.0
    lines = [
        f"Each █ is {scale:.2f} s (the longest night, {top:.2f} s, is {BAR_CHARS}); "
        "a failed night is drawn ░ and marked **FAILED**.",
        "",
        "| night | duration | s | state |",
        "|---|---|---:|---|",
    ]
    for n in nights:
        width = max(1, round(n.seconds / scale)) if scale and n.seconds else 0
        ok = n.state == "completed"
        bar = ("█" if ok else "░") * width
        state = n.state if ok else f"**{n.state.upper()}**"
        lines.append(f"| {n.night} | `{bar}` | {n.seconds:.2f} | {state} |")
    return lines


def trend(values: Sequence[float]) -> str:
    """Rising, falling or steady: the last three nights' median against the three before."""
    if len(values) < 4:
        return "too few nights for a trend"
    recent = statistics.median(values[-3:])
    earlier = statistics.median(values[-6:-3])
    if not earlier:
        return "steady"
    change = recent / earlier - 1
    word = "steady" if abs(change) < 0.2 else "rising" if change > 0 else "falling"
    return f"{word} ({change:+.0%}, last 3 nights against the 3 before)"


def slow_note(n: Night) -> str:
    """``2.6x the median of the 5 nights before (3.1 s); grew: download-batch +7.9 s``."""
    text = f"{n.ratio:.1f}x the median of the nights before ({n.median_before:.1f} s)"
    if n.grown_stage:
        usual = n.stages[n.grown_stage] - n.grown_by
        text += (
            f"; the stage that grew: **{n.grown_stage}** ({usual:.1f} s -> "
            f"{n.stages[n.grown_stage]:.1f} s, +{n.grown_by:.1f} s)"
        )
    return text


def heading(n: Night) -> str:
    """``s3-ingest `s3://bucket/prefix/```: the source and what it read."""
    return f"{n.source} {md.code(n.target)}" if n.target else n.source


def markdown(nights: list[Night], chart: str = "", run_link: Any = None) -> str:
    """The "last nights" section: per source a table of its nights, newest last.

    ``run_link(flow_run_id)`` turns a run id into a markdown link (plain id without it).
    """
    link = run_link or (lambda run_id: f"`{run_id[:8]}`")
    lines = ["## Last nights", ""]
    if not nights:
        return "\n".join([*lines, "No nights recorded yet."])
    if chart:
        lines += [chart, ""]
    for series in dict.fromkeys(n.series for n in nights):
        mine = [n for n in nights if n.series == series]
        durations = [n.seconds for n in mine]
        lines += [
            f"### {heading(mine[0])}: {len(mine)} night{'' if len(mine) == 1 else 's'}",
            "",
            *bars(mine),
            "",
            f"Duration trend: {trend(durations)}. A night more than {SLOW_FACTOR:g}x the "
            f"median of the nights before it (at least {MIN_PREVIOUS}) is flagged.",
            "",
            "| night | run | state | duration s | vs median before | changed | failures "
            "| bytes | flag |",
            "|---|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for n in mine:
            vs = f"{n.ratio:.2f}x" if n.ratio is not None else ""
            flag = f"slow: {slow_note(n)}" if n.slow else ""
            lines.append(
                f"| {n.night} | {link(n.flow_run_id)} | {n.state} | {n.seconds:.2f} | {vs} "
                f"| {n.rows_changed} | {n.failed} | {human_bytes(n.bytes)} | {flag} |"
            )
        lines.append("")
    return "\n".join(lines)
