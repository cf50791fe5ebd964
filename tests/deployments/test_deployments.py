"""The deployments of prefect.yaml on a real Prefect server.

One Prefect server as ``ingest serve`` starts it (what ``prefect server start`` runs,
``deployments.server_app``) on a free loopback port for this module (SQLite in a
temporary folder, the recorder batching of ``deployments.serve.SERVER_ENV``); the work pool is
created, ``prefect deploy --all --no-prompt`` deploys prefect.yaml, and one
``prefect worker start`` runs what is triggered. The demo S3, GitHub and
ticket API servers are the ones the demo of the checkout (``dev/serve_demo.py``)
starts, with the demo's credentials in the worker's environment, and prefect.yaml
is deployed as the demo deploys it: the demo's parameters (``dev/prefect.demo.yaml``)
merged over it, on free ports (test sessions may run side by side), so the
deployed defaults are what is tested.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import httpx
import pytest

from deployments import local_api, project, serve
from dev import samples, serve_demo
from dev.github_demo import DEMO_REPOS
from dev.servers.s3 import free_port
from tests.helpers import ROOT, put_many, rows, run_cli

pytestmark = [pytest.mark.deployment, pytest.mark.server]

RUN_DEADLINE = 240.0  # seconds a triggered run may take before the test gives up


@dataclass
class Served:
    api_url: str
    ui_url: str
    data_dir: Path
    config: dict[str, Any]  # prefect.yaml with the demo's parameters, as deployed
    log_dir: Path
    endpoints: dict[str, Any]
    production: dict[str, dict[str, Any]]  # parameters of prefect.yaml as it is, deployed


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory, _clean_environment: None) -> Iterator[Served]:
    """Prefect server + work pool + deployments + demo servers + a worker."""
    root = tmp_path_factory.mktemp("deployments")
    home, data_dir, logs = root / "prefect-home", root / "data", root / "logs"
    logs.mkdir()
    port = free_port()
    with (
        open(logs / "server.log", "w") as server_log,
        open(logs / "worker.log", "w") as worker_log,
        open(logs / "deploy.log", "w") as deploy_log,
        serve.PrefectServer(
            port=port,
            home=home,
            env={
                "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
                # a request answered 503 (SQLite's "database is locked") is named in the
                # server's log, with its cause: what delays a run when clients retry
                "PREFECT_API_LOG_RETRYABLE_ERRORS": "true",
            },
            log=server_log,
        ) as server,
    ):
        env = {
            **os.environ,
            **serve.SERVER_ENV,
            "PREFECT_API_URL": server.api_url,
            "PREFECT_HOME": str(home),
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "INGEST_DATA_DIR": str(data_dir),
            **serve_demo.credentials(),  # as the demo gives its worker
            # The repository the cluster pool's worker clones, pinned on the worker (the
            # test of nightly-cluster builds it there).
            "INGEST_GIT_REPOSITORY": (root / "origin").as_uri(),
            "INGEST_GIT_REF": "release",
            # uv for the install step of the cluster deployments, as a worker machine has it
            "PATH": os.pathsep.join([str(ROOT / ".tools" / "bin"), os.environ["PATH"]]),
        }
        serve.ensure_work_pools(server.api_url, project.work_pools(project.load()))
        serve.deploy_all(env, log=deploy_log)  # prefect.yaml as it is, as `ingest serve` does
        production = deployed_parameters(server.api_url)
        with serve_demo.DemoServers(any_port=True) as demo:
            config = project.with_parameters(project.load(), demo.overrides)
            env.update(serve_demo.allowed_hosts(demo.endpoints))  # as serving_demo does
            serve.deploy_all(env, log=deploy_log, config=config)  # then as the demo does
            workers = [serve.Worker(p, env, log=worker_log) for p in project.work_pools(config)]
            for w in workers:
                w.__enter__()
            try:
                yield Served(
                    server.api_url,
                    server.ui_url,
                    data_dir,
                    config,
                    logs,
                    demo.endpoints,
                    production,
                )
            finally:
                for w in workers:
                    w.__exit__()


def deployed_parameters(api_url: str) -> dict[str, dict[str, Any]]:
    """The default parameters of every deployment on the server, by deployment name."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as c:
        return {d.name: dict(d.parameters) for d in c.read_deployments()}


@pytest.fixture
def client(served: Served) -> Iterator[Any]:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: served.api_url}), get_client(sync_client=True) as c:
        yield c


def wait_final(client: Any, flow_run_id: UUID, deadline: float = RUN_DEADLINE) -> Any:
    """Poll the API until the run is in a final state."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        run = client.read_flow_run(flow_run_id)
        if run.state and run.state.is_final():
            return run
        time.sleep(0.5)  # polling the API for a state, with a deadline
    raise AssertionError(f"flow run {flow_run_id} not final after {deadline} s: {run.state}")


def run_s3_deployment(api_url: str, secret: str, bucket: str, endpoint_url: str) -> Any:
    """A run of the s3-ingest deployment over ``bucket``'s ``docs/``, created by a client
    holding ``secret`` (``ingest serve``'s API auth string) and run by serve's worker;
    the run once final."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    with (
        temporary_settings({PREFECT_API_URL: api_url, PREFECT_API_AUTH_STRING: secret}),
        get_client(sync_client=True) as client,
    ):
        d = client.read_deployment_by_name("s3-ingest/s3-ingest")
        params = {**d.parameters, "bucket": bucket, "prefix": "docs/"}
        params["endpoint_url"] = endpoint_url
        run = client.create_flow_run_from_deployment(d.id, parameters=params)
        return wait_final(client, run.id, RUN_DEADLINE)


def final_task_runs(client: Any, flow_run_id: UUID, *names: str) -> dict[str, Any]:
    """The flow run's task runs by task name, once those ``names`` are recorded in a final
    state: task runs reach the server as events, which its recorder writes in batches
    after the flow run's own state."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    end = time.monotonic() + RUN_DEADLINE
    while True:
        found = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
        tasks = {t.name.rsplit("-", 1)[0]: t for t in found}
        if all(n in tasks and tasks[n].state and tasks[n].state.is_final() for n in names):
            return tasks
        if time.monotonic() > end:
            raise AssertionError(f"task runs {names} not final after {RUN_DEADLINE} s: {tasks}")
        time.sleep(0.5)  # polling the API for a state, with a deadline


def nightly_deployment(client: Any) -> Any:
    return client.read_deployment_by_name("nightly/nightly")


def artifacts_of(client: Any, flow_run_id: UUID) -> dict[str, Any]:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    found = client.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
    )
    return {a.key: a for a in found if a.key}


def children_of(client: Any, flow_run_id: UUID) -> dict[str, Any]:
    """Child flow runs by flow name."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    runs = client.read_flow_runs(
        flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])
        )
    )
    return {client.read_flow(r.flow_id).name: r for r in runs}


def test_prefect_yaml_is_deployed_as_declared(client: Any, served: Served) -> None:
    names = {e["name"] for e in project.deployments(served.config)}
    assert names == {"nightly", "s3-ingest", "github-pulls", "rest-ingest", "nightly-cluster"}
    # prefect.yaml as it is (ingest serve): production's defaults, no loopback server
    production = {e["name"]: e.get("parameters", {}) for e in project.deployments(project.load())}
    assert served.production == production
    assert "127.0.0.1" not in repr(production) and "localhost" not in repr(production)
    # then with the demo's parameters over it: the demo's servers, everything else as declared
    for entry in project.deployments(served.config):
        d = client.read_deployment_by_name(f"{project.flow_name(entry)}/{entry['name']}")
        assert d.description and d.description.split()[0] in entry["description"]
        assert set(d.tags) == set(entry["tags"])
        assert d.work_pool_name == entry["work_pool"]["name"]
        assert d.parameters == entry.get("parameters", {})
        assert d.enforce_parameter_schema
        [declared] = entry["schedules"]
        [schedule] = d.schedules
        assert schedule.schedule.cron == declared["cron"]
        assert schedule.schedule.timezone == declared["timezone"]
        assert schedule.active == declared["active"]
        # one run at a time: an overlapping night waits instead of doing the work twice
        assert d.global_concurrency_limit is not None
        assert d.global_concurrency_limit.limit == entry["concurrency_limit"]["limit"] == 1
        assert d.concurrency_options is not None
        assert d.concurrency_options.collision_strategy == "ENQUEUE"
        if "pull" in entry:
            # stored as written: the variables are read by the worker at each run
            assert d.pull_steps == entry["pull"]
    for name in project.work_pools(served.config):
        assert client.read_work_pool(name).type == "process"


def test_nightly_form_explains_every_field(client: Any) -> None:
    schema = nightly_deployment(client).parameter_openapi_schema
    props = schema["properties"]
    assert all(p.get("description") for p in props.values()), props
    concurrency = {k: props["s3_concurrency"][k] for k in ("type", "minimum", "maximum")}
    assert concurrency == {"type": "integer", "minimum": 1, "maximum": 512}
    assert "default" not in props["s3_concurrency"] and "anyOf" not in props["s3_concurrency"]
    assert props["github_per_page"]["maximum"] == 100
    assert props["bucket"]["minLength"] == 3


def test_rest_ingest_form_explains_every_field(client: Any) -> None:
    d = client.read_deployment_by_name("rest-ingest/rest-ingest")
    props = d.parameter_openapi_schema["properties"]
    assert set(props) >= {"source", "base_url", "concurrency", "data_dir", "full_refresh"}
    assert all(p.get("description") for p in props.values()), props
    assert "Bounds: 1-256." in props["concurrency"]["description"]
    concurrency = {k: props["concurrency"][k] for k in ("type", "minimum", "maximum")}
    assert concurrency == {"type": "integer", "minimum": 1, "maximum": 256}
    assert props["source"]["minLength"] == 1
    from prefect.exceptions import PrefectHTTPStatusError

    for bad in ({"concurrency": 0}, {"concurrency": 257}, {"source": ""}):
        with pytest.raises(PrefectHTTPStatusError) as info:
            client.create_flow_run_from_deployment(d.id, parameters={**d.parameters, **bad})
        assert info.value.response.status_code in (409, 422)


def test_rest_ingest_run_from_the_api_completes(client: Any, served: Served) -> None:
    """The rest-ingest deployment on its defaults as the demo deploys it (sources/tickets.yaml,
    the demo ticket API with its key in the worker's environment)."""
    d = client.read_deployment_by_name("rest-ingest/rest-ingest")
    assert d.parameters["source"] == served.endpoints["rest_source"]
    assert d.parameters["base_url"] == served.endpoints["rest_url"]
    params = dict(d.parameters)
    run = wait_final(client, client.create_flow_run_from_deployment(d.id, parameters=params).id)
    worker_log = (served.log_dir / "worker.log").read_text()[-4000:]
    assert run.state.is_completed(), (run.state, worker_log)
    from dev.rest_demo import TICKETS

    counts = rows(
        served.data_dir,
        "SELECT (SELECT count(*) FROM tickets__projects) AS projects, "
        "(SELECT count(*) FROM tickets__tickets) AS tickets, "
        "(SELECT count(DISTINCT parent_key) FROM tickets__tickets) AS parents",
    )[0]
    assert counts == {
        "projects": TICKETS["projects"],
        "tickets": TICKETS["projects"] * TICKETS["tickets_per_project"],
        "parents": TICKETS["projects"],
    }
    host = httpx.URL(served.endpoints["rest_url"]).netloc.decode()
    [window] = rows(served.data_dir, f"SELECT * FROM api_windows WHERE host = '{host}'")
    # the unannounced ceiling of 8 in flight was met and remembered
    assert window["ceiling"] is not None and window["ceiling"] <= TICKETS["max_in_flight"] + 1
    arts = artifacts_of(client, run.id)
    assert {"rest-resources", "stage-timing", "run-summary"} <= set(arts)
    assert "tickets" in arts["run-summary"].data


def test_invalid_parameters_are_refused_before_any_run(client: Any) -> None:
    from prefect.exceptions import PrefectHTTPStatusError

    d = nightly_deployment(client)
    # (a repository that is not owner/name too, as the flow itself would refuse at start)
    bad_values = ({"s3_concurrency": 0}, {"github_per_page": 101}, {"bucket": "x"})
    for bad in (*bad_values, {"repos": ["octo/engine", "octo"]}):
        with pytest.raises(PrefectHTTPStatusError) as info:
            client.create_flow_run_from_deployment(d.id, parameters={**d.parameters, **bad})
        assert info.value.response.status_code in (409, 422)
        assert "validation" in info.value.response.text.lower()


def test_next_nightly_run_is_scheduled_at_two_local_time(client: Any, served: Served) -> None:
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    entry = project.deployment(served.config, "nightly")
    tz = ZoneInfo(entry["schedules"][0]["timezone"])
    hour, minute = (int(x) for x in entry["schedules"][0]["cron"].split()[1::-1])
    d = nightly_deployment(client)
    end = time.monotonic() + 60
    scheduled: list[Any] = []
    while not scheduled and time.monotonic() < end:
        scheduled = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[d.id])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
            ),
        )
        if not scheduled:
            time.sleep(0.5)  # polling the API for the scheduler's runs, with a deadline
    assert scheduled, "the scheduler created no run for the nightly deployment"
    first = min(r.expected_start_time for r in scheduled)
    local = first.astimezone(tz)
    assert (local.hour, local.minute) == (hour, minute)
    assert 0 < (first - datetime.now(UTC)).total_seconds() <= 24 * 3600


def test_nightly_run_from_the_api_completes(client: Any, served: Served) -> None:
    """Triggered as the UI's Run button does; the worker runs it; DuckDB holds the rows."""
    d = nightly_deployment(client)
    run = client.create_flow_run_from_deployment(d.id, parameters=dict(d.parameters))
    run = wait_final(client, run.id)
    worker_log = (served.log_dir / "worker.log").read_text()[-4000:]
    assert run.state.is_completed(), (run.state, worker_log)

    children = children_of(client, run.id)
    assert set(children) == {"s3-ingest", "github-pulls"}
    assert all(c.state.is_completed() for c in children.values())
    s3_run = children["s3-ingest"]

    objects = rows(served.data_dir, "SELECT count(*) AS n FROM s3_objects")[0]["n"]
    assert objects == len(samples.documents())
    repos = serve_demo.demo_endpoints(served.config)["repos"]
    pulls = rows(served.data_dir, "SELECT count(*) AS n FROM pull_requests")[0]["n"]
    assert pulls == sum(DEMO_REPOS[r] for r in repos)
    [row] = rows(served.data_dir, f"SELECT * FROM flow_runs WHERE flow_run_id = '{run.id}'")
    assert row["state"] == "completed" and row["deployment_id"] == str(d.id)

    arts = artifacts_of(client, run.id)
    assert arts["nightly-progress"].data == 100
    assert "No earlier run" in arts["nightly-summary"].data
    s3_arts = artifacts_of(client, s3_run.id)
    assert s3_arts["download-progress"].data == 100
    assert "objects" in s3_arts["download-progress"].description
    assert {"run-summary", "stage-timing"} <= set(s3_arts)

    # the next night: the summary compares each stage with this run
    again = client.create_flow_run_from_deployment(d.id, parameters=dict(d.parameters))
    again = wait_final(client, again.id)
    assert again.state.is_completed(), again.state
    summary = artifacts_of(client, again.id)["nightly-summary"].data
    # The previous run is a link to its page in the UI.
    assert f"Previous run [{str(run.id)[:8]}]({served.ui_url}/runs/flow-run/{run.id})" in summary
    # (the second night downloads nothing: the one failed object is permanent)
    assert "| s3-ingest: list-objects |" in summary and "| github-pulls: fetch-pulls |" in summary
    target = f"s3://{d.parameters['bucket']}/{d.parameters.get('prefix') or ''}"
    assert "## Freshness" in summary and f"### s3-ingest `{target}`: 2 nights" in summary
    # The nightly summary, the child run and the UI give the child one duration.
    s3_again = children_of(client, again.id)["s3-ingest"]
    ui_seconds = s3_again.total_run_time.total_seconds()
    [headline] = [line for line in summary.splitlines() if line.startswith("- **s3-ingest**")]
    assert "**s3-ingest** (completed" in headline
    assert f"(completed, {ui_seconds:.2f} s)" in headline, headline
    assert {"nightly", "nightly-child"} <= set(s3_again.tags)
    # Both nights, by Prefect's own records: the children's runs overlapped, the second
    # starting within a second of the first.
    for night in (run, again):
        assert_children_overlap(client, night.id, served.log_dir / "server.log")


def assert_children_overlap(client: Any, flow_run_id: UUID, server_log: Path) -> None:
    """The nightly run's children ran at the same time in Prefect's records: the last to
    start started within a second of the first, and before the first to end had ended.
    The message gives each child's state history and the requests the server answered
    503 (a client's retry wait is what delayed a child)."""
    kids = children_of(client, flow_run_id)
    starts = sorted(k.start_time for k in kids.values())
    first_end = min(k.end_time for k in kids.values())
    history = {
        name: [(str(s.timestamp), s.name) for s in client.read_flow_run_states(k.id)]
        for name, k in kids.items()
    }
    answered_503 = [
        line for line in server_log.read_text().splitlines() if "retryable exception" in line
    ]
    why = (history, answered_503)
    assert starts[-1] < first_end, why
    assert (starts[-1] - starts[0]).total_seconds() < 1.0, why


def project_repository(path: Path) -> Path:
    """A git repository of this project's code, as the team's remote would hold it: the
    branch ``release`` has the project; the default branch has moved on without the flows,
    so a run that ignores the ref cannot start."""
    path.mkdir()
    for name in ("flows", "tasks", "ingest", "deployments", "sources"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, path / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "uv.lock", "README.md", "prefect.yaml"):
        shutil.copy2(ROOT / name, path / name)

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
            cwd=path,
            check=True,
            capture_output=True,
        )

    git("init", "--quiet", "--initial-branch=main")
    git("add", "-A")
    git("commit", "--quiet", "-m", "the project")
    git("branch", "release")
    shutil.rmtree(path / "flows")
    git("add", "-A")
    git("commit", "--quiet", "-m", "the flows moved away")
    return path


def flow_run_logs(client: Any, flow_run_id: UUID) -> str:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    logs = client.read_logs(
        log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200
    )
    return "\n".join(log.message for log in logs)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_cluster_nightly_runs_from_a_clone_at_the_ref(
    client: Any, served: Served, tmp_path: Path
) -> None:
    """nightly-cluster, as a worker on another machine runs it: the pull steps clone the
    repository pinned on the worker (INGEST_GIT_REPOSITORY, INGEST_GIT_REF) into the run's
    temporary folder and sync its uv.lock into the worker's environment; the flow then
    runs from the clone. Prefect variables of the same names, which anyone who reaches the
    API can set, change nothing."""
    from prefect.client.schemas.actions import VariableCreate

    project_repository(served.data_dir.parent / "origin")  # where the worker's setting points
    elsewhere = tmp_path / "elsewhere"  # what a variable would have it clone instead
    client.create_variable(VariableCreate(name="ingest_git_repository", value=elsewhere.as_uri()))
    client.create_variable(VariableCreate(name="ingest_git_ref", value="main"))
    entry = project.deployment(served.config, "nightly-cluster")
    d = client.read_deployment_by_name(f"{project.flow_name(entry)}/nightly-cluster")
    assert d.work_pool_name == "ingest-cluster"
    assert d.parameters["endpoint_url"] == served.endpoints["s3_url"]  # the demo's, deployed
    # full_refresh: the module's earlier nightlies stored every object in this data folder
    params = {**d.parameters, "full_refresh": True}
    run = client.create_flow_run_from_deployment(d.id, parameters=params)
    run = wait_final(client, run.id)
    logs = flow_run_logs(client, run.id)
    assert run.state.is_completed(), (run.state, logs[-3000:])
    assert "Executing deployment step: pinned_repository" in logs
    assert "Executing deployment step: git_clone" in logs
    assert "elsewhere" not in logs
    assert "Executing deployment step: install_locked_dependencies" in logs
    children = children_of(client, run.id)
    assert set(children) == {"s3-ingest", "github-pulls"}
    [row] = rows(served.data_dir, f"SELECT * FROM flow_runs WHERE flow_run_id = '{run.id}'")
    assert row["state"] == "completed" and row["deployment_id"] == str(d.id)
    # task_runner: dask: the batches ran whole on the workers of a Dask cluster
    assert run.parameters["task_runner"] == "dask"
    timings = rows(
        served.data_dir,
        "SELECT task_name, worker FROM task_timings "
        f"WHERE flow_run_id = '{children['s3-ingest'].id}'",
    )
    fetched = [t for t in timings if t["task_name"] == "fetch-batch"]
    assert fetched, timings
    flow_process = f"{socket.gethostname()}:"  # the thread runner's worker name: host:pid
    assert not any(t["worker"].startswith(flow_process) for t in fetched), fetched


def test_failed_nightly_says_what_failed_and_what_to_do(client: Any, served: Served) -> None:
    d = nightly_deployment(client)
    params = {**d.parameters, "bucket": "no-such-bucket", "repos": []}
    run = wait_final(client, client.create_flow_run_from_deployment(d.id, parameters=params).id)
    assert run.state.is_failed()
    message = run.state.message
    assert "s3-ingest failed" in message and "no-such-bucket" in message, message
    assert "What to do:" in message


CHROMIUM = Path("/usr/bin/chromium")  # Debian's chromium package; nothing downloads a browser
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.mark.ui
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package (.ci/run)")
def test_custom_run_from_the_ui_completes(client: Any, served: Served) -> None:
    """Deployments page -> nightly -> Run -> Custom run, one field changed, Submit; the
    run the UI created completes, and its page says so. Each optional field is an input
    of its type there, not the 'Property is type "None"' of a null choice."""
    from playwright.sync_api import expect

    d = nightly_deployment(client)
    before = {r.id for r in runs_of(client, d.id)}
    with browser_page(served.log_dir / "ui-failure.png") as page:
        page.goto(f"{served.ui_url}/deployments")
        page.get_by_role("link", name="nightly", exact=True).first.click()
        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_text("Custom run").click()
        field = page.locator(".schema-form-property", has_text="s3_concurrency (Optional)")
        field = field.last  # the innermost block holding that label
        expect(field).to_contain_text("S3 requests in flight")  # the description
        form = page.locator(".schema-form-property").first
        expect(form).to_be_visible()
        expect(page.get_by_text("endpoint_url (Optional)").first).to_be_visible()
        expect(page.get_by_text("Property is type")).to_have_count(0)
        field.locator("input").fill("8")
        created = submit_until_created(page, lambda: runs_of(client, d.id), before)
        [run] = created
        assert run.parameters["s3_concurrency"] == 8
        assert run.parameters["bucket"] == d.parameters["bucket"]  # the rest unchanged
        page.goto(f"{served.ui_url}/runs/flow-run/{run.id}")
        badge = page.locator(".state-badge", has_text="Completed").first
        badge.wait_for(timeout=RUN_DEADLINE * 1000)
    assert wait_final(client, run.id).state.is_completed()


@pytest.mark.ui
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package (.ci/run)")
def test_a_failed_nightlys_pages_tell_what_failed(client: Any, served: Served) -> None:
    """A nightly whose GitHub child fails (a repository the server does not have) while
    its S3 child completes with a permanently failed key: in the browser, the child's
    entry in the nightly's graph shows Failed, the run's message is readable whole, and
    the summary names the key."""
    import boto3
    from playwright.sync_api import expect
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
    )

    d = nightly_deployment(client)
    s3 = boto3.client(
        "s3",
        endpoint_url=served.endpoints["s3_url"],
        region_name="us-east-1",
        aws_access_key_id="demo",
        aws_secret_access_key="demo",
    )
    put_many(
        s3,
        served.endpoints["bucket"],
        {"ui-check/../escape.txt": b"evil"} | {f"ui-check/ok-{i}.txt": b"ok" for i in range(15)},
    )
    params = {**d.parameters, "prefix": "ui-check/", "repos": ["octo/not-there"]}
    run = wait_final(client, client.create_flow_run_from_deployment(d.id, parameters=params).id)
    assert run.state.is_failed()
    message = run.state.message or ""
    assert len(message) <= 300 and "github-pulls failed" in message, message
    tasks = final_task_runs(client, run.id, "github-pulls")
    assert tasks["github-pulls"].state.is_failed()
    arts = client.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
    )
    [summary] = [a for a in arts if a.key == "nightly-summary"]
    assert "ui-check/../escape.txt" in summary.data
    with browser_page(served.log_dir / "ui-failed-nightly.png") as page:
        page.goto(f"{served.ui_url}/runs/task-run/{tasks['github-pulls'].id}")
        expect(page.locator(".state-badge", has_text="Failed").first).to_be_visible()
        page.goto(f"{served.ui_url}/runs/flow-run/{run.id}")
        expect(page.locator(".state-badge", has_text="Failed").first).to_be_visible()
        expect(page.get_by_text("github-pulls failed", exact=False).first).to_be_visible()
        expect(page.get_by_text("See More")).to_have_count(0)
        page.goto(f"{served.ui_url}/artifacts/artifact/{summary.id}")
        expect(page.get_by_text("ui-check/../escape.txt").first).to_be_visible()


@pytest.mark.ui
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package (.ci/run)")
def test_a_nightlys_pages_after_a_good_and_a_failed_night(client: Any, served: Served) -> None:
    """In the browser, after a good night and a failed one: the nightly's history artifact
    draws both nights with a scale, the failed one marked; the failed child's page lists
    its own task runs (read from the API: none RolledBack, none moved to the nightly)."""
    from playwright.sync_api import expect
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    d = nightly_deployment(client)
    good = client.create_flow_run_from_deployment(d.id, parameters=dict(d.parameters))
    assert wait_final(client, good.id).state.is_completed()
    params = {**d.parameters, "repos": ["octo/not-there"]}
    bad = wait_final(client, client.create_flow_run_from_deployment(d.id, parameters=params).id)
    assert bad.state.is_failed(), bad.state
    child = children_of(client, bad.id)["github-pulls"]
    assert child.state.is_failed()

    def final_tasks() -> list[Any]:
        found = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[child.id]))
        )
        return found if found and all(t.state and t.state.is_final() for t in found) else []

    tasks = poll(final_tasks, deadline=60)
    assert all(t.state.name != "RolledBack" for t in tasks), tasks
    history = artifacts_of(client, bad.id)["nightly-history"]
    assert "**FAILED**" in history.data and "Each █ is" in history.data
    with browser_page(served.log_dir / "ui-nightly-history.png") as page:
        page.goto(f"{served.ui_url}/artifacts/artifact/{history.id}")
        expect(page.get_by_text("Each █ is", exact=False).first).to_be_visible()
        expect(page.get_by_text("FAILED", exact=True).first).to_be_visible()
        expect(page.get_by_text("github-pulls", exact=False).first).to_be_visible()
        page.goto(f"{served.ui_url}/runs/flow-run/{child.id}?tab=Task+Runs")
        expect(page.get_by_text(tasks[0].name).first).to_be_visible()
        expect(page.get_by_text("did not generate any task or subflow runs")).to_have_count(0)


@contextmanager
def browser_page(screenshot: Path) -> Iterator[Any]:
    """A page of a headless Debian Chromium (60 s for each step); a step that fails leaves
    a screenshot of the whole page at ``screenshot``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            try:
                yield page
            except BaseException:
                page.screenshot(path=str(screenshot), full_page=True)
                raise
        finally:
            browser.close()


def submit_until_created(page: Any, runs: Any, before: set[UUID]) -> list[Any]:
    """Press Submit until the API holds the new run, as a person would press it again
    after the UI's "Something went wrong": a Prefect server on SQLite sometimes answers
    "database is locked" while two workers poll it (PrefectHQ/prefect#23051; PostgreSQL,
    ``ingest serve --database-url``, does not). Three presses at most; the API, not the
    transient toast, says whether the run was created."""
    for press in range(3):
        page.get_by_role("button", name="Submit").click()
        try:
            return poll(lambda: [r for r in runs() if r.id not in before], deadline=30)  # type: ignore[no-any-return]
        except AssertionError:
            if press == 2 or not page.get_by_text("Something went wrong").first.is_visible():
                raise
    raise AssertionError("unreachable")


def runs_of(client: Any, deployment_id: UUID) -> list[Any]:
    """Flow runs of a deployment that were not created by its schedule."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    runs = client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
    )
    return [r for r in runs if "auto-scheduled" not in (r.tags or [])]


def poll(fetch: Any, deadline: float = 30.0) -> Any:
    """``fetch()`` until it returns something truthy, with a deadline."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if found := fetch():
            return found
        time.sleep(0.25)  # polling the API, with a deadline
    raise AssertionError("nothing appeared before the deadline")


def test_commands_use_a_running_serve_instead_of_a_temporary_server(
    client: Any, served: Served, s3: Any, bucket: str, tmp_path: Path
) -> None:
    """With no API configured, ``ingest s3`` runs against the API that a running
    ``ingest serve`` advertises (its run is on that server), not a temporary one."""
    put_many(s3, bucket, {f"k{i}.txt": b"x" * (i + 1) for i in range(3)})
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(home)
    args = ["s3", "--bucket", bucket, "--endpoint-url", s3.meta.endpoint_url]
    args += ["--data-dir", str(tmp_path / "data"), "--no-extract"]
    saved = os.environ.get("PREFECT_HOME")
    os.environ["PREFECT_HOME"] = str(home)
    try:
        with local_api.advertise(served.api_url) as advert:
            assert local_api.find() == served.api_url
            proc = run_cli(args, env=env)
            out, _ = proc.communicate(timeout=RUN_DEADLINE)
        assert not advert.exists()  # removed when serving stops
        # a file left by a process that is gone is ignored
        advert.write_text(f'{{"api_url": "{served.api_url}", "pid": 999999999}}')
        assert local_api.find() is None
    finally:
        if saved is None:
            os.environ.pop("PREFECT_HOME", None)
        else:
            os.environ["PREFECT_HOME"] = saved
    assert proc.returncode == 0, out
    run_id = next(
        line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("run ")
    )
    run = client.read_flow_run(UUID(run_id))
    assert run.state.is_completed()
    assert run.flow_id is not None
