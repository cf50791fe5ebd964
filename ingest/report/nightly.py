"""What the ``nightly`` flow reports: one outcome per child ingestion, the
combined markdown summary, and the advice a failed run ends with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ingest import markdown as md
from ingest.errors import TerminalError
from ingest.report.history import FlowRunRecord
from ingest.report.summary import failures_heading, short
from ingest.report.timing import human_bytes, seconds_so_far
from ingest.rest.summary import requests_text

FAILURES_SHOWN = 10
ENGINE_PREFIX = "Flow run encountered an exception: "


@dataclass(slots=True, repr=False)
class ChildOutcome:
    """How one child flow run (``s3-ingest``, ``github-pulls``) ended."""

    flow_name: str
    flow_run_id: str
    state: str  # the Prefect state type, lower case: completed, failed, crashed ...
    message: str = ""
    seconds: float = 0.0
    error_type: str = ""
    summary: Any = None  # RunSummary or GitHubSummary when the child returned one
    # The first failed items the child named: (key or repository, error, permanent).
    failures: list[tuple[str, str, bool]] = field(default_factory=list)
    target: str = ""  # what the child reads: s3://bucket/prefix, the repositories
    cause: str = ""  # the failed child's own state message (``message`` adds the advice)
    terminal: bool = False  # it failed on what no retry fixes (configuration, credentials)

    @property
    def changed(self) -> int:
        """Objects (downloaded, copied from a stored object, or deleted) or pull requests
        this run changed."""
        s = self.summary
        if s is None:
            return 0
        if self.flow_name == "s3-ingest":
            return int(sum(s.counts.get(k, 0) for k in ("downloaded", "copied", "deleted")))
        return int(getattr(s, "pulls", 0) or 0)

    @property
    def failed_items(self) -> int:
        """Objects or pages that failed (the run itself may have completed)."""
        s = self.summary
        if s is None:
            return 0
        if self.flow_name == "s3-ingest":
            return int(s.counts.get("failed", 0))
        return int(getattr(s, "failed_pages", 0) or 0)

    @property
    def failed_extractions(self) -> int:
        """Documents whose text could not be extracted (the run itself may have completed)."""
        return int(getattr(self.summary, "failed_extractions", 0) or 0)

    @property
    def verdict(self) -> str:
        """``completed``, ``failed``, or ``completed with 1 failed object`` and the like."""
        said = [
            plural(n, noun)
            for n, noun in (
                (
                    self.failed_items,
                    "failed object" if self.flow_name == "s3-ingest" else "failed page",
                ),
                (self.failed_extractions, "failed extraction"),
            )
            if n
        ]
        return f"{self.state} with {', '.join(said)}" if said and self.ok else self.state

    started_at: datetime | None = None  # its flow run's start_time (Prefect's, UTC)

    @property
    def ended_at(self) -> datetime | None:
        """Its flow run's end_time: ``started_at`` plus ``seconds``."""
        if self.started_at is None:
            return None
        return self.started_at + timedelta(seconds=self.seconds)

    @property
    def ok(self) -> bool:
        return self.state == "completed"

    def __repr__(self) -> str:  # short: Prefect logs it with the calling task's state
        return f"ChildOutcome({self.flow_name} {self.state}, run {self.flow_run_id})"


def overlap_seconds(outcomes: Sequence[ChildOutcome]) -> float | None:
    """How long the children's flow runs all ran at once by their recorded starts and
    ends (0 when one ended before another started); None for fewer than two runs or a
    run without a recorded interval."""
    if len(outcomes) < 2 or any(o.started_at is None for o in outcomes):
        return None
    last_start = max(o.started_at for o in outcomes if o.started_at is not None)
    first_end = min(o.ended_at for o in outcomes if o.ended_at is not None)
    return max(0.0, (first_end - last_start).total_seconds())


def together_text(outcomes: Sequence[ChildOutcome]) -> str:
    """`` (they ran at the same time: ...)`` only when their recorded runs overlapped,
    what happened otherwise, nothing for one child or runs without recorded times."""
    overlap = overlap_seconds(outcomes)
    if overlap is None:
        return ""
    starts = sorted(o.started_at for o in outcomes if o.started_at is not None)
    gap = (starts[-1] - starts[0]).total_seconds()
    if overlap > 0:
        return (
            f" (they ran at the same time: the last started {gap:.2f} s after the first, "
            f"and they overlapped {overlap:.2f} s)"
        )
    return f" (they did not overlap: the last started {gap:.2f} s after the first)"


def plural(n: int, noun: str) -> str:
    """``1 night``, ``2 nights``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# The longest state message the run page shows whole (longer ones end in "See More").
MESSAGE_CHARS = 300


# What Prefect puts before a failed nightly's own words in its state message.
FAILED_PREFIX = ENGINE_PREFIX + "NightlyFailedError: "


# What to do about a failed child, by why it failed (``why_failed``): in a few words (the
# nightly's state message) and in full (the child's own advice).
TODOS = {
    "terminal": (
        "fix what it names, then Run > Custom run",
        "fix the configuration it names (the deployment's parameters, or the worker's "
        "credentials and endpoint), then start the deployment again (Run > Custom run)",
    ),
    "failures": (
        "read the failures in its run-summary",
        "read the failures in that run's run-summary artifact (or the query in the "
        "message); the next run retries the failed downloads, not the permanent failures",
    ),
    "other": (
        "read the failed subflow run's logs",
        "open the {flow} subflow run's logs, fix the cause, then start the deployment "
        "again; the other ingestion's rows are stored and a re-run skips what did not change",
    ),
}


def why_failed(outcome: ChildOutcome, terminal: bool) -> str:
    """``terminal`` (no retry fixes it), ``failures`` (too many failed items) or ``other``."""
    if terminal:
        return "terminal"
    return "failures" if outcome.error_type.startswith("TooMany") else "other"


def failed_message(outcomes: list[ChildOutcome]) -> str:
    """The failed nightly's state message, within MESSAGE_CHARS with Prefect's prefix:
    every child that failed, each cause shortened on its own, and what to do in a few
    words; the advice in full is in the nightly-summary artifact."""
    failed = [o for o in outcomes if not o.ok]
    todos = dict.fromkeys(TODOS[why_failed(o, o.terminal)][0] for o in failed)
    tail = f". What to do: {'; '.join(todos)}; see the nightly-summary artifact."
    budget = MESSAGE_CHARS - len(FAILED_PREFIX) - len(tail)
    causes = fit(
        [f"{o.flow_name} failed: {o.cause.removeprefix(ENGINE_PREFIX)}" for o in failed],
        budget,
    )
    return causes + tail


def completed_message(outcomes: list[ChildOutcome]) -> str:
    """The state message of a nightly whose children completed with failed items (empty
    without): the counts and the first keys with their errors, permanent ones said so,
    each shortened on its own to fit MESSAGE_CHARS."""
    said = [f"{o.flow_name} {o.verdict}" for o in outcomes if o.verdict != o.state]
    if not said:
        return ""
    items = [(o.flow_name, k, e, p) for o in outcomes for k, e, p in o.failures]
    permanent = sum(p for *_, p in items)
    text = "Completed, " + ", ".join(said)
    if permanent:
        text += f" ({permanent} permanent, no retry fixes them)"
    tail = ". See the nightly-summary artifact."
    keys = [f"{short(k, 50)}: {e}" for _f, k, e, _p in items[:3]]
    if not keys:
        return short(text, MESSAGE_CHARS - len(tail)) + tail
    return f"{text}: {fit(keys, MESSAGE_CHARS - len(tail) - len(text) - 2)}{tail}"


def fit(items: list[str], budget: int, sep: str = "; ") -> str:
    """``items`` joined by ``sep`` in at most ``budget`` characters: each one shortened on
    its own (``short``), the room a short one leaves going to the longer ones, so none is
    dropped for another's length."""
    items = [" ".join(i.split()) for i in items]
    room = budget - len(sep) * (len(items) - 1)
    limits: dict[int, int] = {}
    waiting = sorted(range(len(items)), key=lambda i: len(items[i]))
    while waiting:
        share = max(8, room // len(waiting))
        i = waiting.pop(0)
        limits[i] = min(len(items[i]), share)
        room -= limits[i]
    return sep.join(short(item, limits[i]) for i, item in enumerate(items))


def observed_record(outcome: ChildOutcome, parent: str, deployment_id: str) -> FlowRunRecord:
    """The child's ``flow_runs`` row as its parent saw it: start and duration, and counts
    only from a summary it returned (None when unknown: a failed child counted nothing
    the parent can see, which is not the same as zero)."""
    s = outcome.summary
    items = bytes_ = failed = None
    if s is not None:
        if outcome.flow_name == "s3-ingest":
            items, bytes_, failed = s.total, s.bytes, s.failed
        else:
            items, bytes_, failed = s.pulls, 0, s.failed_pages
    return FlowRunRecord(
        flow_run_id=outcome.flow_run_id,
        flow_name=outcome.flow_name,
        deployment_id=deployment_id,
        parent_flow_run_id=parent,
        started_at=outcome.started_at,
        ended_at=outcome.ended_at,
        seconds=outcome.seconds,
        items=items,
        bytes=bytes_,
        failed=failed,
        state=outcome.state,
        message=outcome.message or None,
    )


def advice(outcome: ChildOutcome, terminal: bool) -> str:
    """What failed and what to do, for the final state message of a failed run."""
    message = " ".join((outcome.message or outcome.state).split())  # one line, UI-friendly
    message = message.removeprefix(ENGINE_PREFIX)  # Prefect's words, not the cause
    message = short(message, 400)
    what = f"{outcome.flow_name} failed: {message}"
    todo = TODOS[why_failed(outcome, terminal)][1].format(flow=outcome.flow_name)
    return f"{what}. What to do: {todo}."


def is_terminal(error: BaseException | None) -> bool:
    """True for errors that retrying cannot fix (configuration, credentials)."""
    return isinstance(error, TerminalError)


def headline(outcome: ChildOutcome) -> str:
    """One line per child for the nightly summary."""
    s = outcome.summary
    if outcome.flow_name == "s3-ingest" and s is not None:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(s.counts.items())) or "nothing"
        text = f"{s.total} objects ({counts}), {human_bytes(s.bytes)} downloaded"
    elif outcome.flow_name == "github-pulls" and s is not None:
        text = (
            f"{s.pulls} pull requests from {len(s.repos)} repositories, {s.requests} requests "
            f"({requests_text(s)}), {s.failed_pages} failed pages"
        )
        if s.stopped:
            text += f", stopped early: {s.stopped}"
    else:
        text = outcome.message or "no summary"
    took = f"{outcome.seconds:.2f} s"
    return f"**{outcome.flow_name}** ({outcome.verdict}, {took}): {text}"


def task_seconds_text(stage: dict[str, Any]) -> str:
    """A stage's task time: the sum of its attempts' figures, each the one its task's
    log line gives (``ingest.report.timing.describe``)."""
    seconds = stage.get("busy_seconds")
    return "" if seconds is None else f"{seconds:.2f}"


def markdown(
    outcomes: list[ChildOutcome],
    stages: list[dict[str, Any]],
    seconds: float,
    comparison: str,
    *,
    link: Callable[[str], str] | None = None,
    sections: Sequence[str] = (),
) -> str:
    """The nightly run's summary artifact; ``link`` makes a run id a link to the run,
    ``sections`` (freshness, the last nights) come after the failures."""
    link = link or (lambda run_id: f"`{run_id}`")
    ok = sum(o.ok for o in outcomes)
    lines = [
        "# nightly ingestion",
        "",
        f"{ok} of {len(outcomes)} ingestions completed{together_text(outcomes)}; this "
        f"nightly run: {seconds_so_far(seconds)}. "
        "Each ingestion's duration is its flow run's start to end as Prefect recorded them.",
        "",
    ]
    lines += [f"- {headline(o)}, run {link(o.flow_run_id)}" for o in outcomes]
    if stages:
        lines += [
            "",
            "## Stages",
            "",
            "Task runs s: the sum of the stage's task attempts' times, each the figure of "
            "its task's log line; wall s: its first task's start to its last task's end.",
            "",
            "| stage | task runs | task runs s | items | bytes | wall s | items/s | MB/s "
            "| failed attempts |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for s in stages:
            lines.append(
                f"| {s['stage']} | {s['task_runs']} | {task_seconds_text(s)} | {s['items']} "
                f"| {human_bytes(s['bytes']) if s['bytes'] else ''} "
                f"| {s['wall_seconds'] or 0:.2f} | {s['items_per_s'] or ''} "
                f"| {s['mb_per_s'] or ''} | {s['failed_attempts']} |"
            )
    failures = [(o.flow_name, k, e, p) for o in outcomes for k, e, p in o.failures]
    total = sum(max(o.failed_items + o.failed_extractions, len(o.failures)) for o in outcomes)
    if failures:
        shown = failures[:FAILURES_SHOWN]
        lines += [
            "",
            f"## {failures_heading(len(shown), total)}",
            "",
            "| flow | item | error | permanent |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {f} | {md.code(k)} | {md.cell(e)} | {'yes' if p else 'no'} |"
            for f, k, e, p in shown
        ]
        if total > len(shown):
            lines += ["", "The rest are in each child run's run-summary artifact."]
    for section in sections:
        lines += ["", section]
    return "\n".join(lines) + "\n" + comparison
