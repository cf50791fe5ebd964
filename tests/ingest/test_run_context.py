"""A run's context (``ingest.context``): its tasks use what the run opened, a client handed
in is the one the tasks use, and what the run opened is closed at its end; in real Prefect
flow runs against the development S3, REST and GitHub-compatible servers."""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from prefect import flow

from dev.servers.github import DevGitHub
from dev.servers.rest import DevRest
from flows.github_pulls import github_pulls
from flows.nightly import nightly
from flows.rest_ingest import ingest_source, rest_ingest
from ingest import context, duck, storage
from ingest.rest.source import load_source, source_path
from ingest.s3 import S3Connection, sync
from ingest.s3.scan import ListSpec
from ingest.settings import Settings
from ingest.storage import staging
from ingest.storage.location import LakeSession
from tasks.rest import fetch_rest_source, load_sync_state
from tasks.s3 import check_bucket, download_batch
from tests.helpers import batch_of, put_many

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

KEY = "context-api-key-0123456789"  # fake
TOKEN = "ghp_" + "ContextTokenValue0123456789abcdefABCD"  # fake


@pytest.fixture(scope="module")
def api() -> Iterator[DevRest]:
    with DevRest(api_key=KEY, paginator="cursor", projects=2, tickets_per_project=5) as srv:
        yield srv


@pytest.fixture
def lake_settings(s3_server: Any, bucket: str, tmp_path: Path) -> Settings:
    """Settings of a lake on the development S3 server (s3://bucket/lake)."""
    return Settings(
        data_dir=f"s3://{bucket}/lake", lake={"endpoint_url": s3_server.url}, local_dir=tmp_path
    )


def counted(session: LakeSession) -> list[str]:
    """The S3 operations the session's client sends, as they are sent."""
    sent: list[str] = []
    events = session.resolved().client.meta.events
    events.register("before-call.s3", lambda model, **_: sent.append(model.name))
    return sent


def test_a_connection_handed_in_is_the_one_the_tasks_use(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    """The test's own connection (its request lanes counted) downloads the batch; the run's
    end closes what the run opened, not what it was given."""
    bodies = {f"doc-{i}.txt": f"body {i}".encode() for i in range(3)}
    put_many(s3, bucket, bodies)
    settings = Settings(data_dir=data_dir, s3={"endpoint_url": s3_server.url})
    spec = ListSpec(run_id="given", bucket=bucket)
    batch = batch_of(bucket, s3.list_objects_v2(Bucket=bucket)["Contents"])
    given = S3Connection.open(settings.s3)
    seen: list[str] = []

    @flow
    def downloading() -> Any:
        with context.opened(settings, spec.run_id, s3=given) as ctx:
            summary = download_batch(settings, spec, batch)
            seen.append("open" if "given" in context.open_runs() else "closed")
            assert ctx.s3 is given
            return summary

    summary = downloading()
    assert summary.counts == {"downloaded": len(bodies)}
    assert seen == ["open"] and "given" not in context.open_runs()
    for key, body in bodies.items():
        assert (data_dir / "objects" / bucket / key).read_bytes() == body
    # The given connection outlives the run: it is its giver's to close.
    root = settings.downloads.root(batch.objects()[0].bucket)
    again = sync.download_batch(given, root, batch.objects(), prefix="", run_id="again")
    assert [r.status for r in again] == ["downloaded"] * len(bodies)
    given.close()


def test_a_task_without_its_runs_context_fails_saying_so(
    s3_server: Any, bucket: str, data_dir: Path
) -> None:
    settings = Settings(data_dir=data_dir, s3={"endpoint_url": s3_server.url})

    @flow
    def checking() -> Any:
        return check_bucket(settings, "no-context", bucket)

    state = checking(return_state=True)
    assert state.is_failed()
    with pytest.raises(RuntimeError, match="no open context for run no-context"):
        state.result()


def test_closing_the_context_closes_its_pool_and_connection(data_dir: Path) -> None:
    with context.RunContext(Settings(data_dir=data_dir, extract={"workers": 1}), "r") as ctx:
        pool, lanes = ctx.pool, ctx.s3.lanes
        assert pool.map("os:getpid", [()])[0].status == "ok"
        assert ctx.pool is pool and ctx.s3.lanes is lanes  # one of each for the run
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit("os:getpid")
    with pytest.raises(RuntimeError, match="shutdown"):
        lanes.pool.submit(print)


def test_a_runs_pools_close_in_the_background_once_its_work_is_done(data_dir: Path) -> None:
    """``work_done`` hands the pools' closing to a thread (the commit goes on meanwhile);
    ``close`` waits for it, so no process of the pool outlives the run."""
    ctx = context.RunContext(Settings(data_dir=data_dir, extract={"workers": 2}), "done")
    pool = ctx.pool
    pids = {r.pid for r in pool.map("os:getpid", [(), ()])}
    server = pool._server.process if pool._server is not None else None
    assert pids and server is not None and server.poll() is None
    ctx.work_done()
    assert ctx.pool is not pool  # the run's next extraction would get a pool of its own
    ctx.close()
    assert server.returncode is not None  # the fork server exited and was reaped
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit("os:getpid")


def test_the_rest_tasks_use_their_runs_lake_session(
    api: DevRest, lake_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given the plain settings (what a task on a Dask worker receives), the REST tasks find
    their run's context and write the lake through its session: the one handed in, which
    the run's end leaves open."""
    monkeypatch.setenv("TICKETS_API_KEY", KEY)
    source = load_source(source_path("sources/tickets.yaml"))
    given = LakeSession(lake_settings.location)
    sent = counted(given)

    @flow
    def fetching() -> Any:
        with context.opened(lake_settings, "rest-given", lake=given) as ctx:
            assert ctx.lake.session is given and lake_settings.location.session is None
            assert load_sync_state(lake_settings, "rest-given", source, False) == {}
            return fetch_rest_source(lake_settings, source, "rest-given", base_url=api.url)

    summary = fetching()
    assert summary.records == 2 + 10 and not summary.errors
    assert "PutObject" in sent  # the staged parts went through the given client
    assert "rest-given" not in context.open_runs() and not given.closed
    assert "tickets__tickets" in staging.staged_tables(given.location.bound(given), "rest-given")
    with duck.cursor(given.queries) as con:  # still open: its giver's to close
        assert con.execute("SELECT 1").fetchall() == [(1,)]
    given.close()


def test_a_rest_run_hands_its_lake_session_to_every_step(
    api: DevRest, lake_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole composition (staging, upkeep, fetch, summary, commit) on a lake reached
    through a session handed in: its client makes the run's requests, the commit lands,
    the session stays open and no context is left."""
    monkeypatch.setenv("TICKETS_API_KEY", KEY)
    source = load_source(source_path("sources/tickets.yaml"))
    given = LakeSession(lake_settings.location)
    sent = counted(given)

    @flow
    def ingesting() -> Any:
        return ingest_source(
            lake_settings,
            source,
            run_id="rest-whole",
            started=time.perf_counter(),
            base_url=api.url,
            title="tickets",
            lake=given,
        )

    summary = ingesting()
    assert summary.records == 12 and "PutObject" in sent and "DeleteObjects" in sent
    assert "rest-whole" not in context.open_runs() and not given.closed
    _, rows = storage.query(lake_settings.location, "SELECT count(*) FROM tickets__tickets")
    assert rows == [(10,)]
    given.close()


def test_a_session_of_another_lake_is_refused(lake_settings: Settings, data_dir: Path) -> None:
    other = LakeSession(Settings(data_dir=data_dir).location)
    with pytest.raises(ValueError, match="a session of the lake"):
        context.RunContext(lake_settings, "r", lake=other)


def test_rest_and_github_runs_leave_no_context_open(
    api: DevRest, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKETS_API_KEY", KEY)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    before = context.open_runs()
    rest = rest_ingest(
        source="sources/tickets.yaml", base_url=api.url, data_dir=str(data_dir), return_state=True
    )
    assert rest.is_completed(), rest
    with DevGitHub(repos={"octo/docs": 3}, token=TOKEN) as gh:
        pulls = github_pulls(
            repos=["octo/docs"], base_url=gh.url, data_dir=str(data_dir), return_state=True
        )
    assert pulls.is_completed(), pulls
    assert pulls.result().pulls == 3
    assert context.open_runs() == before == []


def test_a_nightly_run_leaves_no_context_open(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    put_many(s3, bucket, {f"in/doc-{i}.txt": f"document {i}".encode() for i in range(2)})
    night = nightly(
        bucket=bucket,
        prefix="in/",
        repos=[],
        endpoint_url=s3_server.url,
        extract=False,
        data_dir=str(data_dir),
        return_state=True,
    )
    assert night.is_completed(), night
    assert [o.state for o in night.result()] == ["completed"]
    assert context.open_runs() == []


def test_closing_the_context_closes_its_lake_session_not_a_given_one(
    lake_settings: Settings,
) -> None:
    ctx = context.RunContext(lake_settings, "own")
    storage.location.check(ctx.lake)  # resolved and checked through the run's session
    assert ctx.lake.session is ctx.lake_session and ctx.lake.storage_options()
    with duck.cursor(ctx.lake.queries) as con:
        assert con.execute("SELECT 42").fetchall() == [(42,)]
    # Sent to another process (a Dask task's parameters), the settings arrive unbound.
    assert pickle.loads(pickle.dumps(ctx.settings)).location.session is None
    ctx.close()
    assert ctx.lake_session.closed
    with pytest.raises(RuntimeError, match="closed"):
        ctx.lake.storage_options()
    with pytest.raises(RuntimeError, match="closed"):
        duck.cursor(ctx.lake.queries)

    given = LakeSession(lake_settings.location)
    with context.RunContext(lake_settings, "given", lake=given) as ctx:
        assert ctx.lake.storage_options() == given.storage_options()
    assert not given.closed and given.storage_options()
    given.close()


def test_a_scan_of_an_object_store_lake_is_seen_by_its_own_runs_connections_only(
    lake_settings: Settings,
) -> None:
    """What a scan of a lake on object storage registers belongs to the run's lake
    session: that run's connections see it, another run's do not, and it goes with the
    session; an unbound location refuses to scan instead of naming a relation no
    connection has."""
    loc = lake_settings.location
    storage.lake.merge(loc, "flow_runs", _flow_runs_rows(3))
    with context.RunContext(lake_settings, "a") as a, context.RunContext(lake_settings, "b") as b:
        relation = storage.scan(a.lake, "flow_runs")
        with a.lake.connect() as con:
            assert con.execute(f"SELECT count(*) FROM {relation}").fetchall() == [(3,)]
        with duck.cursor(a.lake.queries) as con:
            assert con.execute(f"SELECT count(*) FROM {relation}").fetchall() == [(3,)]
        with b.lake.connect() as con, pytest.raises(duckdb.CatalogException):
            con.execute(f"SELECT count(*) FROM {relation}")
        with a.listing.cursor() as con:  # the run's listing database: the run's relations
            assert con.execute(f"SELECT count(*) FROM {relation}").fetchall() == [(3,)]
    with pytest.raises(RuntimeError, match="closed"):
        _ = a.lake_session.relations
    with pytest.raises(RuntimeError, match="through a lake session"):
        storage.scan(loc, "flow_runs")
    # A library user's query from outside a run: a session for the call.
    assert storage.query(loc, "SELECT count(*) FROM flow_runs")[1] == [(3,)]


def _flow_runs_rows(n: int) -> Any:
    import pyarrow as pa

    from ingest.storage.tables import SCHEMAS

    schema = SCHEMAS["flow_runs"]
    rows = [{f.name: None for f in schema} for _ in range(n)]
    for i, row in enumerate(rows):
        row.update(flow_run_id=f"run-{i}", flow_name="s3-ingest", state="completed")
    return pa.Table.from_pylist(rows, schema=schema)
