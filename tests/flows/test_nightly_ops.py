"""Real nightly runs (Prefect test server, the S3 server on loopback): the summary
carries freshness and the last nights, the chart is written, child runs carry the
nightly's tags, and ``ingest status`` prints freshness and the nights' outcomes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from flows.nightly import nightly
from tests.helpers import put_many, rows, run_cli

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def artifacts(flow_run_id: Any) -> dict[str, Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {a.key: a for a in found}


def run_logs(flow_run_id: Any) -> list[str]:
    """The messages stored for a flow run and its task runs (sent to the server first)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    with get_client(sync_client=True) as client:
        found = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
        )
    return [log.message for log in found]


def children(flow_run_id: Any) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])
            )
        )


def nightly_params(bucket: str, s3_server: Any, data_dir: Path) -> dict[str, Any]:
    """A nightly over ``bucket``'s ``in/`` on the test server into ``data_dir``, no GitHub."""
    return {
        "bucket": bucket,
        "prefix": "in/",
        "repos": [],
        "endpoint_url": s3_server.url,
        "data_dir": str(data_dir),
    }


def test_nightly_summary_freshness_history_and_status(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    put_many(s3, bucket, {f"in/doc-{i}.txt": f"document {i}".encode() for i in range(3)})
    params = nightly_params(bucket, s3_server, data_dir)
    ok = nightly(**params, return_state=True)
    assert ok.is_completed(), ok
    ok_id = ok.state_details.flow_run_id
    [child] = children(ok_id)
    assert {"nightly", "nightly-child"} <= set(child.tags)  # filtering on nightly finds it

    # The bucket gone: the same source fails (freshness is kept per flow and target).
    for i in range(3):
        s3.delete_object(Bucket=bucket, Key=f"in/doc-{i}.txt")
    s3.delete_bucket(Bucket=bucket)
    failed = nightly(**params, return_state=True)
    assert failed.is_failed()
    failed_id = failed.state_details.flow_run_id

    # The failed child's logs hold its failure's traceback once, not once per layer.
    [gone] = [c for c in children(failed_id) if c.state.is_failed()]
    tracebacks = [line for line in run_logs(gone.id) if "Traceback (most recent" in line]
    assert len(tracebacks) == 1, tracebacks
    # and the nightly's own lines (its calling task, its flow) name it without a copy
    tree = run_logs(failed_id) + run_logs(gone.id)
    assert [line for line in tree if "Traceback (most recent" in line] == tracebacks, tree
    assert [line for line in run_logs(failed_id) if "NoSuchBucket" in line], tree

    arts = artifacts(failed_id)
    summary = arts["nightly-summary"].data
    assert "## Freshness" in summary and "## Last nights" in summary
    fresh = [line for line in summary.splitlines() if line.startswith("| s3-ingest |")]
    # Tonight failed: the row keeps the first night's success and its 3 changed objects.
    assert len(fresh) == 1 and "| 3 |" in fresh[0] and fresh[0].endswith("| failed |")
    history_md = arts["nightly-history"].data
    assert f"### s3-ingest `s3://{bucket}/in/`: 2 nights" in history_md, history_md
    assert "| **FAILED** |" in history_md  # the chart the UI draws marks the failed night
    chart = data_dir / "reports" / "nightly-durations.svg"
    bars = [r for r in ET.parse(chart).getroot().iter() if "bar" in (r.get("class") or "")]
    assert len(bars) == 2 and bars[0].get("x") != bars[1].get("x")  # same date, two bars
    assert "file://" not in summary and "nightly-durations" in summary
    table = json.loads(arts["nightly-durations"].data)
    assert [(r["source"], r["state"]) for r in table] == [
        ("s3-ingest", "completed"),
        ("s3-ingest", "failed"),
    ]
    assert table[0]["night"].endswith("#1") and table[1]["night"].endswith("#2")

    proc = run_cli(["status", "--data-dir", str(data_dir)])
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    [row] = [line for line in out.splitlines() if line.startswith("s3-ingest ")]
    assert f"s3://{bucket}/in/" in row and " 3 " in row and row.rstrip().endswith("failed")
    nights = out.split("Last 7 nights", 1)[1]
    assert "s3-ingest failed" in nights and "s3-ingest completed" in nights
    assert nights.index("s3-ingest failed") < nights.index("s3-ingest completed")  # newest first


def test_a_run_with_failed_objects_says_so_in_its_state_and_tags(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    from prefect.client.orchestration import get_client

    from flows.s3_ingest import s3_ingest

    fine = {f"in/ok-{i}.txt": b"fine" for i in range(20)}
    put_many(s3, bucket, {"in/../escape.txt": b"evil"} | fine)  # one unsafe key: an error row
    state = s3_ingest(
        bucket=bucket,
        prefix="in/",
        endpoint_url=s3_server.url,
        data_dir=str(data_dir),
        extract=False,
        return_state=True,
    )
    assert state.is_completed()
    assert state.message.startswith("Completed with 1 of 21 objects failed"), state.message
    assert state.result().counts == {"downloaded": 20, "failed": 1}
    run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        assert "failed-objects" in client.read_flow_run(run_id).tags
    arts = artifacts(run_id)
    summary = arts["run-summary"].data
    # sent beside the history's commit, after its task returned: still the summary task's
    assert owners(run_id, arts, "run-summary", "stage-timing") == {"publish-summary"}
    assert "## Failed downloads: Failures (1)" in summary and "First 1 of 1" not in summary
    assert "20 objects" not in summary and "21 objects" in summary
    assert arts["download-progress"].description.startswith("Finished: 21 objects")


def test_nothing_to_extract_starts_no_worker_pool() -> None:
    from ingest import context
    from ingest.extract import batch
    from ingest.settings import Settings

    with context.RunContext(Settings(extract={"workers": 2}), "r") as ctx:
        assert (
            batch.extract_batch(ctx.settings.extracting, "b", [], run_id="r", pool=ctx.pool) == []
        )
        assert ctx.pool.pids() == [] and ctx.pool.stats.started == 0  # no worker spawned


def test_out_of_bounds_values_fail_the_run_naming_the_bound(data_dir: Path) -> None:
    """What a run created without validation ("Validate parameters" unticked) ends with."""
    from flows.s3_ingest import s3_ingest

    state = s3_ingest(bucket="x", concurrency=0, data_dir=str(data_dir), return_state=True)
    assert state.is_failed()
    assert "bucket: String should have at least 3 characters" in state.message, state.message
    assert "concurrency: Input should be greater than or equal to 1" in state.message


def task_runs(flow_run_id: Any) -> dict[str, Any]:
    """The flow run's task runs by task name, once the server has recorded each one's final
    state: task run states reach it as events, which its recorder writes in batches, so
    they may lag the flow run's own state by a flush."""
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from deployments.local_api import drain_prefect_queues

    drain_prefect_queues()  # this process's events are sent
    deadline = time.monotonic() + 60
    with get_client(sync_client=True) as client:
        while True:
            found = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )
            if all(t.state is not None and t.state.is_final() for t in found):
                return {t.name.rsplit("-", 1)[0]: t for t in found}
            if time.monotonic() > deadline:
                raise AssertionError(f"task runs not final after 60 s: {found}")
            time.sleep(0.1)  # polling the recorded state, not waiting for a guessed time


def task_runs_all(flow_run_id: Any) -> list[tuple[str, Any]]:
    """Every task run of a flow run, with its task's name, once each is final."""
    task_runs(flow_run_id)  # waits for the recorder
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        found = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
    return [(t.name.rsplit("-", 1)[0], t) for t in found]


def owners(flow_run_id: Any, arts: dict[str, Any], *keys: str) -> set[str]:
    """The names of the tasks whose runs own the artifacts ``keys``, once the server has
    recorded those task runs (they reach it as events)."""
    import time

    wanted = {arts[k].task_run_id for k in keys}
    assert None not in wanted, {k: arts[k].task_run_id for k in keys}
    deadline = time.monotonic() + 60
    while True:
        names = {t.id: name for name, t in task_runs_all(flow_run_id)}
        if wanted <= names.keys() or time.monotonic() > deadline:
            return {names.get(w, "not recorded") for w in wanted}
        time.sleep(0.1)  # polling the recorded task runs, not waiting for a guessed time


def flow_run_of(flow_run_id: Any) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id)


def test_failed_items_and_a_failed_child_say_so_in_states_messages_and_tags(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dev.servers.github import DevGitHub

    put_many(
        s3,
        bucket,
        {
            "in/../escape.txt": b"evil",  # an unsafe key: permanent, no retry fixes it
            "in/broken.pdf": b"%PDF-1.4\nnot a pdf at all\n",  # a corrupt document
        }
        | {f"in/fine-{i}.txt": b"a fine document" for i in range(18)},
    )
    params = nightly_params(bucket, s3_server, data_dir)
    night = nightly(**params, return_state=True)
    # Everything ran, but not everything went well: Completed, with counts, keys and a tag.
    assert night.is_completed(), night
    message = night.message or ""
    assert len(message) <= 300, message
    assert "s3-ingest completed with 1 failed object, 1 failed extraction" in message, message
    assert "2 permanent" in message and "in/../escape.txt" in message and "retries" not in message
    night_id = night.state_details.flow_run_id
    assert {"failed-objects", "failed-extractions"} <= set(flow_run_of(night_id).tags)
    [child] = children(night_id)
    assert child.state.is_completed() and "retries them" not in (child.state.message or "")
    assert child.state.message.startswith(
        "Completed with 1 of 20 objects failed and 1 of 19 extractions failed (2 permanent"
    ), child.state.message
    assert {"failed-objects", "failed-extractions"} <= set(child.tags)
    summary = artifacts(child.id)["run-summary"].data
    downloads = summary.split("## Failed downloads", 1)[1].split("##", 1)[0]
    assert "`in/../escape.txt` | failed | UnsafeKeyError" in downloads and "| yes |" in downloads
    extractions = summary.split("## Failed extractions", 1)[1]
    assert "`in/broken.pdf` | failed |" in extractions and "| yes |" in extractions
    nightly_summary = artifacts(night_id)["nightly-summary"].data
    assert "`in/broken.pdf`" in nightly_summary and "`in/../escape.txt`" in nightly_summary
    progress = artifacts(night_id)["nightly-progress"].description or ""
    assert "1 failed object" in progress, progress

    # A child that fails: its entry in the nightly's graph is Failed too, the nightly
    # Failed, readable.
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "RejectedTokenValue0123456789abcdefAB")
    with DevGitHub(repos={"octo/engine": 3}, token="ghp_" + "x" * 36) as gh:
        failed = nightly(
            **params | {"repos": ["octo/engine"], "github_base_url": gh.url}, return_state=True
        )
    assert failed.is_failed()
    failed_message = failed.message or ""
    assert len(failed_message) <= 300 and "github-pulls failed: " in failed_message
    assert (
        "s3-ingest failed" not in failed_message
        and "What to do: fix what it names" in failed_message
    )
    tasks = task_runs(failed.state_details.flow_run_id)  # a child's entry in the graph
    assert tasks["github-pulls"].state.is_failed(), tasks["github-pulls"].state
    assert "401" in (tasks["github-pulls"].state.message or "")
    assert tasks["s3-ingest"].state.is_completed()
    assert len(children(failed.state_details.flow_run_id)) == 2


def test_each_child_has_its_own_source_tag_and_the_shared_ones(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect import tags

    from dev.servers.github import DevGitHub

    token = "ghp_" + "TagsTokenValue0123456789abcdefABCDEFG"
    monkeypatch.setenv("GITHUB_TOKEN", token)
    put_many(s3, bucket, {"in/a.txt": b"a"})
    deployment_tags = tags("ingest", "nightly", "s3", "github")  # the nightly deployment's
    with DevGitHub(repos={"octo/engine": 2}, token=token) as gh, deployment_tags:
        params = nightly_params(bucket, s3_server, data_dir)
        night = nightly(
            **params | {"repos": ["octo/engine"], "github_base_url": gh.url}, return_state=True
        )
    assert night.is_completed(), night
    kids = {flow_name_of(c): set(c.tags) for c in children(night.state_details.flow_run_id)}
    shared = {"ingest", "nightly", "nightly-child"}
    assert shared | {"s3"} <= kids["s3-ingest"] and "github" not in kids["s3-ingest"]
    assert shared | {"github"} <= kids["github-pulls"] and "s3" not in kids["github-pulls"]

    # One duration per run: the summary and the flow_runs rows say what the API says.
    summary = artifacts(night.state_details.flow_run_id)["nightly-summary"].data
    stored = {r["flow_run_id"]: r["seconds"] for r in rows(data_dir, "SELECT * FROM flow_runs")}
    for child in children(night.state_details.flow_run_id):
        api = (child.end_time - child.start_time).total_seconds()
        assert api > 0
        assert f"(completed, {api:.2f} s)" in summary, (api, summary)
        assert stored[str(child.id)] == pytest.approx(api, abs=1e-6)
    # A stage's figure is its task's log line's figure: one measurement for both.
    for child in children(night.state_details.flow_run_id):
        label = flow_name_of(child)
        lines = stage_lines(run_logs(child.id))
        single = {stage: figures for stage, figures in lines.items() if len(figures) == 1}
        assert {"list-objects", "commit-run"} <= single.keys() or label != "s3-ingest", lines
        for stage, [figure] in single.items():
            [row] = [r for r in summary.splitlines() if r.startswith(f"| {label}: {stage} |")]
            # one attempt each: the two children's commits at once no longer conflict
            assert row.split("|")[2:4] == [" 1 ", f" {figure} "], (row, figure)


def stage_lines(messages: list[str]) -> dict[str, list[str]]:
    """The figures of a run's ``timed`` lines (``commit-run 16 rows in 0.24 s``) by task."""
    import re

    found: dict[str, list[str]] = {}
    for m in messages:
        if hit := re.fullmatch(r"([a-z-]+) \d+ [a-z ]+?(?:, [\d.]+ [KMG]?B)? in ([\d.]+) s", m):
            found.setdefault(hit[1], []).append(hit[2])
    return found


def flow_name_of(run: Any) -> str:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.read_flow(run.flow_id).name)


def test_freshness_and_comparisons_are_per_target(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    from flows.s3_ingest import s3_ingest
    from ingest.report import freshness

    put_many(s3, bucket, {"a/1.txt": b"one", "a/2.txt": b"two", "b/1.txt": b"three"})

    def run(prefix: str) -> tuple[str, str]:
        state = s3_ingest(
            bucket=bucket,
            prefix=prefix,
            endpoint_url=s3_server.url,
            data_dir=str(data_dir),
            extract=False,
            return_state=True,
        )
        assert state.is_completed(), state
        run_id = str(state.state_details.flow_run_id)
        return run_id, artifacts(run_id)["run-summary"].data

    first_a, _ = run("a/")
    _, summary_b = run("b/")  # another prefix: no comparison with the run of a/
    assert f"## Compared with the previous s3-ingest run of `s3://{bucket}/b/`" in summary_b
    assert f"No earlier s3-ingest run of `s3://{bucket}/b/` to compare with." in summary_b
    _, summary_a = run("a/")
    assert f"## Compared with the previous s3-ingest run of `s3://{bucket}/a/`" in summary_a
    assert f"Previous run `{first_a[:8]}`" in summary_a or f"[{first_a[:8]}]" in summary_a

    fresh = freshness.current(data_dir)
    a, b = fresh[("s3-ingest", f"s3://{bucket}/a/")], fresh[("s3-ingest", f"s3://{bucket}/b/")]
    assert a["flow_run_id"] != first_a  # the second run of a/, not the run of b/
    assert b["rows_changed"] == 1 and b["state"] == "completed"

    # A target that never succeeded has no last success, whatever other targets did.
    [missing] = freshness.record(
        data_dir,
        [freshness.SourceNight("s3-ingest", f"s3://{bucket}-gone/a/", "failed")],
        staged_by="gone",
    )
    assert missing.last_success is None and missing.rows_changed == 0


def test_children_run_together_and_a_failed_child_keeps_its_task_runs(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read from Prefect's API: the two children's flow runs overlap; the child that failed
    (too many failed objects, after its tasks stored its rows) keeps its own task runs in
    their states, none RolledBack, none moved under the nightly; every duration the
    nightly stores or prints for a child is that child's start to end on the server."""
    from dev.servers.github import DevGitHub

    token = "ghp_" + "TogetherTokenValue0123456789abcdefABCD"
    monkeypatch.setenv("GITHUB_TOKEN", token)
    monkeypatch.setenv("INGEST_MAX_FAILED_RATIO", "0.1")
    unsafe = {f"in/../escape-{i}.txt": b"evil" for i in range(2)}  # error rows
    put_many(s3, bucket, unsafe | {f"in/fine-{i}.txt": b"fine" for i in range(3)})
    # Pages answered after 1 s: the GitHub child lasts long enough to meet the S3 one.
    with DevGitHub(repos={"octo/engine": 3}, token=token, latency_base_ms=1000) as gh:
        params = nightly_params(bucket, s3_server, data_dir)
        night = nightly(
            **params | {"repos": ["octo/engine"], "github_base_url": gh.url, "github_per_page": 1},
            return_state=True,
        )
    assert night.is_failed(), night
    night_id = night.state_details.flow_run_id
    kids = {flow_name_of(c): c for c in children(night_id)}
    s3_run, gh_run = kids["s3-ingest"], kids["github-pulls"]
    assert s3_run.state.is_failed() and "TooManyFailuresError" in (s3_run.state.message or "")
    assert gh_run.state.is_completed(), gh_run.state

    # Prefect's own records: the two runs overlap.
    first, second = sorted([s3_run, gh_run], key=lambda r: r.start_time)
    assert second.start_time < first.end_time, (first.start_time, first.end_time, second)
    print(
        "GAP",
        (second.start_time - first.start_time).total_seconds(),
        "OVERLAP",
        (first.end_time - second.start_time).total_seconds(),
    )

    # The failed night carries its counts in the last nights (not "failures 0, 0 B").
    history_md = artifacts(night_id)["nightly-history"].data
    [night_row] = [r for r in history_md.splitlines() if f"{str(s3_run.id)[:8]}" in r]
    assert "| failed |" in night_row and "| 2 |" in night_row, night_row

    # Its summary says what its state says.
    child_summary = artifacts(s3_run.id)["run-summary"].data
    assert "**Failed: 2 of 5 objects failed (more than 10%).**" in child_summary
    assert "Completed with" not in child_summary, child_summary

    # The failed child's task runs are its own, in the states they ended in.
    own = task_runs_all(s3_run.id)
    states = {name: t.state.name for name, t in own}
    assert states.get("commit-run") == "Completed", states
    assert "RolledBack" not in states.values(), states
    parent = task_runs_all(night_id)
    assert all(t.state.name != "RolledBack" for _n, t in parent), parent
    assert not {name for name, _t in parent} & {name for name, _t in own}, parent
    # The nightly's graph holds one entry per child, in the child's state.
    tracking = {name: t for name, t in parent if name in kids}
    assert tracking["s3-ingest"].state.is_failed() and tracking["github-pulls"].state.is_completed()

    # Every figure stored or printed for a child is its start to end on the server.
    summary = artifacts(night_id)["nightly-summary"].data
    assert "they ran at the same time" in summary, summary
    stored = {r["flow_run_id"]: r for r in rows(data_dir, "SELECT * FROM flow_runs")}
    for name, run in kids.items():
        interval = (run.end_time - run.start_time).total_seconds()
        row = stored[str(run.id)]
        assert row["seconds"] == pytest.approx(interval, abs=1e-6), (name, row, interval)
        assert same_instant(row["started_at"], run.start_time), (row, run.start_time)
        assert same_instant(row["ended_at"], run.end_time), (row, run.end_time)
        assert f"**{name}** ({run.state.type.value.lower()}, {interval:.2f} s)" in summary
        for table in ("source_freshness", "source_nights"):  # the nightly's rows of it
            [fresh] = rows(data_dir, f"SELECT seconds FROM {table} WHERE flow_run_id = '{run.id}'")
            assert fresh["seconds"] == pytest.approx(interval, abs=1e-6), (table, name, fresh)
    # The nightly's own row, written as it ended: its start and end on the server.
    own, row = flow_run_of(night_id), stored[str(night_id)]
    assert row["state"] == "failed"
    assert row["seconds"] == pytest.approx((own.end_time - own.start_time).total_seconds())
    assert same_instant(row["started_at"], own.start_time)
    assert same_instant(row["ended_at"], own.end_time)
    # The summaries written before their runs ended give each run's final figure.
    own_said = f"{row['seconds']:.2f} s in Running (its start to end in Prefect)"
    night_arts = artifacts(night_id)
    assert f"this nightly run: {own_said}" in night_arts["nightly-summary"].data
    assert own_said in night_arts["nightly-progress"].description
    for name, run in kids.items():
        interval = (run.end_time - run.start_time).total_seconds()
        said = f"{interval:.2f} s in Running (its start to end in Prefect)"
        assert said in artifacts(run.id)["run-summary"].data, name


def same_instant(a: Any, b: Any) -> bool:
    """Two timestamps within a millisecond (a row stores microseconds)."""
    return abs(a.timestamp() - b.timestamp()) < 1e-3


def test_a_standalone_run_stores_prefects_interval_and_a_failed_one_its_row(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    """A run's flow_runs row, which ``ingest status`` and the next run's "took" read, is
    its start to end on the server, also for a run that failed before it counted."""
    from flows.s3_ingest import s3_ingest

    put_many(s3, bucket, {"in/a.txt": b"a"})
    kwargs = {"prefix": "in/", "endpoint_url": s3_server.url, "data_dir": str(data_dir)}
    ok = s3_ingest(bucket=bucket, extract=False, return_state=True, **kwargs)
    gone = s3_ingest(bucket=bucket + "-missing", return_state=True, **kwargs)
    assert ok.is_completed() and gone.is_failed(), gone
    stored = {r["flow_run_id"]: r for r in rows(data_dir, "SELECT * FROM flow_runs")}
    for state, expected in ((ok, "completed"), (gone, "failed")):
        run = flow_run_of(state.state_details.flow_run_id)
        row = stored[str(run.id)]
        assert row["state"] == expected, row
        assert row["seconds"] == pytest.approx((run.end_time - run.start_time).total_seconds())
        assert same_instant(row["started_at"], run.start_time)
        assert same_instant(row["ended_at"], run.end_time)
    assert stored[str(ok.state_details.flow_run_id)]["items"] == 1
    # Its freshness rows (committed before it ended) and its summary and finished progress
    # bar (written before it ended) give the same figure, set as it ended.
    run = flow_run_of(ok.state_details.flow_run_id)
    interval = (run.end_time - run.start_time).total_seconds()
    assert run.total_run_time.total_seconds() == pytest.approx(interval, abs=1e-6)
    for table in ("source_freshness", "source_nights"):
        [row] = rows(data_dir, f"SELECT seconds FROM {table} WHERE flow_run_id = '{run.id}'")
        assert row["seconds"] == pytest.approx(interval, abs=1e-6), (table, row, interval)
    said = f"{interval:.2f} s in Running (its start to end in Prefect)"
    arts = artifacts(run.id)
    assert said in arts["run-summary"].data, arts["run-summary"].data
    assert said in arts["download-progress"].description, arts["download-progress"].description
    assert "up to this summary" not in arts["run-summary"].data + str(arts["download-progress"])
    # warehouse.duckdb's views, which the hook refreshed, read the same figure
    import duckdb

    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
        got = con.execute(
            f"SELECT seconds FROM source_nights WHERE flow_run_id = '{run.id}'"
        ).fetchall()
    assert got == [(pytest.approx(interval, abs=1e-6),)], got
    failed_row = stored[str(gone.state_details.flow_run_id)]
    assert failed_row["items"] is None and "NoSuchBucket" in (failed_row["message"] or "")
