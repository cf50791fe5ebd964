"""The nightly's state messages (what its alert says too): every failure named, each
shortened on its own after a whole word, within what the run page shows whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ingest.report.nightly import (
    FAILED_PREFIX,
    MESSAGE_CHARS,
    ChildOutcome,
    completed_message,
    failed_message,
    fit,
    together_text,
)
from ingest.report.summary import RunSummary, markdown, short, too_many_failures

LONG_CAUSE = (
    "Flow run encountered an exception: NoSuchBucket: the bucket "
    "'nightly-documents-of-the-engineering-department' does not exist at "
    "http://s3.example.internal:9000 (check the bucket parameter and the endpoint)"
)


def failed(flow_name: str, cause: str, **kw: object) -> ChildOutcome:
    return ChildOutcome(flow_name=flow_name, flow_run_id="r", state="failed", cause=cause, **kw)


def test_both_failed_children_are_named_each_cut_after_a_word() -> None:
    s3 = failed("s3-ingest", LONG_CAUSE, terminal=True)
    gh = failed(
        "github-pulls",
        "Flow run encountered an exception: GitHubTerminalError: 401 Bad credentials for "
        "octo/engine: the token was rejected; set GITHUB_TOKEN or the token block",
        terminal=True,
    )
    message = failed_message([s3, gh])
    assert len(FAILED_PREFIX + message) <= MESSAGE_CHARS, len(FAILED_PREFIX + message)
    first, second = message.split("; github-pulls failed: ")
    assert first.startswith("s3-ingest failed: NoSuchBucket: the bucket")
    assert second.startswith("GitHubTerminalError: 401")
    for part in (first, second.split(". What to do")[0]):
        if part.endswith("…"):  # cut after a whole word of the cause
            words = part[:-1].split()
            assert words[-1] in (LONG_CAUSE + " " + gh.cause).replace(";", " ").split()
    assert message.endswith(
        "What to do: fix what it names, then Run > Custom run; see the nightly-summary artifact."
    )


def test_each_kind_of_failure_says_what_to_do() -> None:
    message = failed_message(
        [
            failed(
                "s3-ingest",
                "TooManyFailuresError: 3 of 5 objects failed",
                error_type="TooManyFailuresError",
            ),
            failed("github-pulls", "RuntimeError: the server went away"),
        ]
    )
    assert "read the failures in its run-summary; read the failed subflow run's logs" in message
    assert "3 of 5 objects failed" in message and "the server went away" in message


def test_short_never_cuts_inside_a_word() -> None:
    text = "the bucket does not exist at the endpoint given"
    assert short(text, 20) == "the bucket does not…"
    assert short(text, 18) == "the bucket does…"
    assert short(text, len(text)) == text
    assert short("a-single-very-long-key-without-spaces", 10) == "a-single-…"
    assert fit(["short one", "x" * 50 + " tail"], 40).startswith("short one; ")
    joined = fit(["alpha beta gamma delta", "one two three four five six"], 30)
    assert len(joined) <= 30 and joined.count(";") == 1, joined


def test_a_completed_message_names_each_of_its_first_failures() -> None:
    summary = RunSummary(run_id="r", counts={"downloaded": 9, "failed": 3})
    o = ChildOutcome(flow_name="s3-ingest", flow_run_id="r", state="completed", summary=summary)
    o.failures = [(f"in/key-{i}.pdf", "ReadTimeoutError: " + "slow " * 30, False) for i in range(3)]
    message = completed_message([o])
    assert len(message) <= MESSAGE_CHARS, len(message)
    assert all(f"in/key-{i}.pdf: ReadTimeoutError" in message for i in range(3)), message


def test_a_run_failing_for_its_failed_objects_says_failed_in_its_summary() -> None:
    summary = RunSummary(run_id="r", counts={"downloaded": 10, "failed": 2})
    assert too_many_failures(summary, 0.5) == ""
    summary.failing = too_many_failures(summary, 0.1)
    assert summary.failing == "2 of 12 objects failed (more than 10%)"
    text = markdown(summary, "s3-ingest s3://b/")
    assert "**Failed: 2 of 12 objects failed (more than 10%).**" in text
    assert "Completed with" not in text


def test_same_time_is_said_only_for_overlapping_recorded_runs() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def run(start: float, seconds: float) -> ChildOutcome:
        return ChildOutcome(
            flow_name="x",
            flow_run_id="r",
            state="completed",
            seconds=seconds,
            started_at=t0 + timedelta(seconds=start),
        )

    assert together_text([run(0, 5), run(0.4, 3)]).startswith(
        " (they ran at the same time: the last started 0.40 s after the first"
    )
    assert together_text([run(0, 2), run(2.5, 3)]) == (
        " (they did not overlap: the last started 2.50 s after the first)"
    )
    assert together_text([run(0, 2)]) == ""
