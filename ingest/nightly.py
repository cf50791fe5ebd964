"""What the ``nightly`` flow reports: one outcome per child ingestion, the
combined markdown summary, and the advice a failed run ends with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ingest import markdown as md
from ingest.errors import TerminalError
from ingest.history import FlowRunRecord
from ingest.report import failures_heading
from ingest.rest.summary import requests_text
from ingest.timing import human_bytes

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

    started_at: datetime | None = None  # when the parent started it (wall clock, UTC)

    @property
    def ok(self) -> bool:
        return self.state == "completed"

    def __repr__(self) -> str:  # short: Prefect logs it with the calling task's state
        return f"ChildOutcome({self.flow_name} {self.state}, run {self.flow_run_id})"


def plural(n: int, noun: str) -> str:
    """``1 night``, ``2 nights``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# The longest state message the run page shows whole (longer ones end in "See More").
MESSAGE_CHARS = 300


def failed_message(outcomes: list[ChildOutcome]) -> str:
    """The failed nightly's state message: which children failed, each cause cut short,
    and what to do in a few words; the advice in full is in the nightly-summary artifact."""
    failed = [o for o in outcomes if not o.ok]
    causes = "; ".join(f"{o.flow_name} failed: {short_cause(o.cause, 90)}" for o in failed)
    first = failed[0]
    if first.terminal:
        todo = "fix what it names, then Run > Custom run"
    elif first.error_type.startswith("TooMany"):
        todo = "read the failures in its run-summary"
    else:
        todo = "read the failed subflow run's logs"
    text = cut(causes, 110)  # with Prefect's prefix and the rest: under MESSAGE_CHARS
    return f"{text}. What to do: {todo}; see the nightly-summary artifact."


def completed_message(outcomes: list[ChildOutcome]) -> str:
    """The state message of a nightly whose children completed with failed items (empty
    without): the counts and the first keys with their errors, permanent ones said so."""
    said = [f"{o.flow_name} {o.verdict}" for o in outcomes if o.verdict != o.state]
    if not said:
        return ""
    items = [(o.flow_name, k, e, p) for o in outcomes for k, e, p in o.failures]
    permanent = sum(p for *_, p in items)
    keys = "; ".join(f"{cut(k, 50)}: {cut(e, 50)}" for _f, k, e, _p in items[:3])
    text = "Completed, " + ", ".join(said)
    if permanent:
        text += f" ({permanent} permanent, no retry fixes them)"
    if keys:
        text += f": {keys}"
    return cut(text, MESSAGE_CHARS - 35) + ". See the nightly-summary artifact."


def cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_cause(message: str, limit: int) -> str:
    return cut(message.removeprefix(ENGINE_PREFIX), limit)


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
    started = outcome.started_at
    return FlowRunRecord(
        flow_run_id=outcome.flow_run_id,
        flow_name=outcome.flow_name,
        deployment_id=deployment_id,
        parent_flow_run_id=parent,
        started_at=started,
        ended_at=started + timedelta(seconds=outcome.seconds) if started else None,
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
    if len(message) > 400:
        message = message[:399] + "…"
    what = f"{outcome.flow_name} failed: {message}"
    if terminal:
        todo = (
            "fix the configuration it names (the deployment's parameters, or the worker's "
            "credentials and endpoint), then start the deployment again (Run > Custom run)"
        )
    elif outcome.error_type.startswith("TooMany"):
        todo = (
            "read the failures in that run's run-summary artifact (or the query in the "
            "message); the next run retries the failed downloads, not the permanent failures"
        )
    else:
        todo = (
            f"open the {outcome.flow_name} subflow run's logs, fix the cause, then start "
            "the deployment again; the other ingestion's rows are stored and a re-run skips "
            "what did not change"
        )
    return f"{what}. What to do: {todo}."


def is_terminal(error: BaseException | None) -> bool:
    """True for errors that retrying cannot fix (configuration, credentials)."""
    if error is None:
        return False
    names = {c.__name__ for c in type(error).__mro__}
    return isinstance(error, TerminalError) or "GitHubTerminalError" in names


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
    took = f"{outcome.seconds:.2f} s in Running"
    return f"**{outcome.flow_name}** ({outcome.verdict}, {took}): {text}"


def task_seconds_text(stage: dict[str, Any]) -> str:
    """A stage's task time: the sum of its attempts' figures, each the one its task's
    log line gives (``ingest.timing.describe``)."""
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
        f"{ok} of {len(outcomes)} ingestions completed (they ran at the same time); this "
        f"nightly run had been {seconds:.2f} s in Running when this summary was written. "
        "Each duration is the flow run's time in Running, the figure the Prefect UI shows.",
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
