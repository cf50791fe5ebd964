"""Run history and the nightly summary: plain functions, no Prefect."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb

from ingest import storage
from ingest.errors import BucketNotFoundError
from ingest.records import TaskTiming
from ingest.report import history, nightly
from ingest.report import summary as report
from tests.helpers import write_rows


def stage(name: str, wall: float) -> dict[str, object]:
    return {"stage": name, "wall_seconds": wall}


def test_compare_stages_says_slower_faster_or_the_same() -> None:
    rows = history.compare_stages(
        [stage("list", 10.0), stage("download", 2.0), stage("extract", 5.1), stage("new", 1.0)],
        [stage("list", 4.0), stage("download", 8.0), stage("extract", 5.0)],
    )
    verdicts = {r["stage"]: (r["verdict"], r["change"]) for r in rows}
    assert verdicts == {
        "list": ("slower", "+6.00 s (+150%)"),
        "download": ("faster", "-6.00 s (-75%)"),
        "extract": ("about the same", "+0.10 s (+2%)"),
        "new": ("new stage", None),
    }
    text = history.comparison_markdown(rows, None)
    assert "No earlier run" in text
    # A previous row without a start says when it ended, not "started None"; the
    # thresholds behind the verdicts are stated.
    ended = datetime(2026, 11, 30, 17, 0, tzinfo=UTC)
    previous = {"flow_run_id": "abc", "started_at": None, "ended_at": ended}
    text = history.comparison_markdown(rows, {**previous, "seconds": 9.6, "state": "completed"})
    assert "ended 2026-11-30 17:00 UTC and took 9.60 s" in text and "None" not in text
    assert "at least 0.5 s and 20%" in text


def write_timing(data_dir: Path, run_id: str, task: str, start: datetime, seconds: float) -> None:
    t = TaskTiming(
        flow_run_id=run_id,
        flow_name="s3-ingest",
        task_run_id=f"{task}-{run_id}",
        task_name=task,
        started_at=start,
        ended_at=start + timedelta(seconds=seconds),
        seconds=seconds,
        items=10,
    )
    write_rows(data_dir, "task_timings", run_id, t.task_run_id, [t.as_row()])


def test_previous_run_is_the_latest_of_the_same_deployment(tmp_path: Path) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i, (run, dep) in enumerate([("a", "d1"), ("b", "d2"), ("c", "d1"), ("d", "d1")]):
        history.record_flow_run(
            tmp_path,
            history.FlowRunRecord(
                flow_run_id=run,
                flow_name="s3-ingest",
                deployment_id=dep,
                started_at=t0 + timedelta(days=i),
                ended_at=t0 + timedelta(days=i, seconds=5),
                seconds=5.0,
            ),
        )
        write_timing(tmp_path, run, "download-batch", t0 + timedelta(days=i), 1.0 + i)
        storage.commit_run(tmp_path, run)
    prev = history.previous_run(
        tmp_path, flow_name="s3-ingest", deployment_id="d1", flow_run_id="d"
    )
    assert prev is not None and prev["flow_run_id"] == "c"
    # the row is one per run: writing it again replaces it
    history.record_flow_run(
        tmp_path, history.FlowRunRecord(flow_run_id="c", flow_name="s3-ingest", state="failed")
    )
    storage.commit_run(tmp_path, "c")
    assert storage.query(tmp_path, "SELECT count(*) FROM flow_runs WHERE flow_run_id = 'c'")[1] == [
        (1,)
    ]
    now = history.stages_of(tmp_path, [("s3-ingest", "d")])
    before = history.stages_of(tmp_path, [("s3-ingest", "a")])
    [row] = history.compare_stages(now, before)
    assert row["stage"] == "s3-ingest: download-batch" and row["verdict"] == "slower"


def test_a_run_s_stages_are_read_from_the_files_that_may_hold_them(tmp_path: Path) -> None:
    """A stage table reads the files of the run's days whose statistics may hold its id,
    not months of history; the previous run is looked for in the last week first."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i, run in enumerate(["a", "b", "c"]):
        write_timing(tmp_path, run, "download-batch", t0 + timedelta(days=2 * i), 1.0 + i)
    every = storage.data_files(tmp_path, "task_timings")
    assert len(every) == 3
    [b_file] = storage.data_files(tmp_path, "task_timings", prune=[("flow_run_id", "=", "b")])
    assert "day=2026-01-03" in b_file
    [stage_b] = report.stage_table(tmp_path, "b", since=date(2026, 1, 2))
    assert (stage_b["stage"], stage_b["items"], stage_b["busy_seconds"]) == (
        "download-batch",
        10,
        2.0,
    )
    assert report.stage_table(tmp_path, "b", since=date(2026, 1, 4)) == []  # a lower bound

    now = datetime.now(UTC)
    for run, started in [("old", now - timedelta(days=40)), ("new", now - timedelta(days=1))]:
        history.record_flow_run(
            tmp_path,
            history.FlowRunRecord(
                flow_run_id=run,
                flow_name="s3-ingest",
                started_at=started,
                ended_at=started + timedelta(seconds=5),
            ),
        )
        storage.commit_run(tmp_path, run)
    prev = history.previous_run(tmp_path, flow_name="s3-ingest", deployment_id="", flow_run_id="x")
    assert prev is not None and prev["flow_run_id"] == "new"
    prev = history.previous_run(
        tmp_path, flow_name="s3-ingest", deployment_id="", flow_run_id="new"
    )
    assert prev is not None and prev["flow_run_id"] == "old"  # past the last week: all


def test_failed_child_advice_says_what_failed_and_what_to_do() -> None:
    outcome = nightly.ChildOutcome(
        flow_name="s3-ingest",
        flow_run_id="x",
        state="failed",
        message="Flow run encountered an exception: BucketNotFoundError: no bucket\n  'nope'",
    )
    text = nightly.advice(outcome, nightly.is_terminal(BucketNotFoundError("no bucket")))
    assert text.startswith("s3-ingest failed: BucketNotFoundError: no bucket")
    assert "\n" not in text and "'nope'" in text
    assert "What to do: fix the configuration" in text
    assert not nightly.is_terminal(ValueError("x"))


def test_nightly_keeps_what_a_child_recorded_and_fills_in_what_it_did_not(
    tmp_path: Path,
) -> None:
    """A child that recorded its own row (start, counts, failures) and then failed keeps
    them when the nightly records how it ended; a child that failed before recording gets
    its real start and unknown (NULL) counts, not zeros; the previous night's children are
    found by parent and in order."""
    t0 = datetime(2026, 3, 1, 17, 0, tzinfo=UTC)
    # s3-ingest records itself (a run with too many failures), commits, then raises.
    history.record_flow_run(
        tmp_path,
        history.FlowRunRecord(
            flow_run_id="s3-child",
            flow_name="s3-ingest",
            deployment_id="dep",
            parent_flow_run_id="night-2",
            started_at=t0,
            ended_at=t0 + timedelta(seconds=50),
            seconds=50.0,
            items=10,
            bytes=1000,
            failed=4,
            state="failed",
        ),
    )
    storage.commit_run(tmp_path, "s3-child")
    failed_s3 = nightly.ChildOutcome(
        flow_name="s3-ingest",
        flow_run_id="s3-child",
        state="failed",
        message="s3-ingest failed: 4 of 10 objects failed. What to do: ...",
        seconds=52.0,
        error_type="TooManyFailuresError",
        started_at=t0 - timedelta(seconds=1),
    )
    early_github = nightly.ChildOutcome(
        flow_name="github-pulls",
        flow_run_id="gh-child",
        state="failed",
        message="github-pulls failed: bad credentials",
        seconds=3.0,
        started_at=t0,
    )
    for outcome in (failed_s3, early_github):
        history.record_child_run(
            tmp_path, nightly.observed_record(outcome, "night-2", "dep"), staged_by="night-2"
        )
    storage.commit_run(tmp_path, "night-2")
    rows = {r["flow_run_id"]: r for r in history.child_runs(tmp_path, "night-2")}
    s3_row, gh_row = rows["s3-child"], rows["gh-child"]
    assert (s3_row["items"], s3_row["bytes"], s3_row["failed"]) == (10, 1000, 4)
    # the server's start and end of the ended child (as the UI shows them) replace its own
    assert s3_row["started_at"] == failed_s3.started_at and s3_row["seconds"] == 52.0
    assert s3_row["ended_at"] == failed_s3.ended_at
    assert s3_row["state"] == "failed" and "4 of 10 objects failed" in s3_row["message"]
    assert (gh_row["items"], gh_row["bytes"], gh_row["failed"]) == (None, None, None)
    assert gh_row["started_at"] == t0 and gh_row["state"] == "failed"

    # An earlier night, and a row an older version wrote without a start: the previous
    # night is the latest that started before, never the row without a start.
    history.record_flow_run(
        tmp_path,
        history.FlowRunRecord(
            flow_run_id="night-1",
            flow_name="nightly",
            deployment_id="dep",
            started_at=t0 - timedelta(days=1),
            ended_at=t0 - timedelta(days=1) + timedelta(seconds=60),
            seconds=60.0,
        ),
    )
    storage.commit_run(tmp_path, "night-1")
    old_row = {
        "flow_run_id": "night-0",
        "flow_name": "nightly",
        "deployment_id": "dep",
        "started_at": None,
        "ended_at": t0 - timedelta(hours=20),
    }
    write_rows(tmp_path, "flow_runs", "night-0", "old", [old_row])
    with duckdb.connect() as con:
        assert con.execute(
            f"SELECT count(*) FROM {storage.scan(tmp_path, 'flow_runs')} "
            "WHERE flow_run_id = 'night-0' AND started_at IS NULL"
        ).fetchall() == [(1,)]
    prev = history.previous_run(
        tmp_path, flow_name="nightly", deployment_id="dep", flow_run_id="night-2"
    )
    assert prev is not None and prev["flow_run_id"] == "night-1"
