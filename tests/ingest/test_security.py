"""What a deployment's run parameters may point at (``ingest.security``).

The plain checks on their own (hosts, roots, variables), then the three flows of
the project run as a deployment's runs on a Prefect server (the session's test
harness): a run whose parameters send the worker's token to another port, write
outside the worker's folders or read a source file from elsewhere fails before it
sends a request or writes a file, and the listening server counts no request.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ingest import security
from ingest.security import ParameterRefusedError
from ingest.settings import Settings


def test_endpoints_fill_in_the_port_of_the_scheme() -> None:
    assert security.endpoint_of("https://api.github.com") == "api.github.com:443"
    assert security.endpoint_of("http://API.github.com/x") == "api.github.com:80"
    assert security.endpoint_of("http://127.0.0.1:9100/") == "127.0.0.1:9100"
    with pytest.raises(ValueError, match="not an http"):
        security.endpoint_of("file:///etc/passwd")


def test_base_urls_outside_the_allowed_hosts_are_refused() -> None:
    allowed = security.api_endpoints(
        ["ghe.corp.example", "10.1.2.3:8443"],
        {"base_url": "http://127.0.0.1:9100", "repos": ["a/b"]},
        "https://api.github.com",
    )
    for ok in (
        "https://api.github.com",
        "https://api.github.com/",
        "http://127.0.0.1:9100/api",
        "https://ghe.corp.example/api/v3",  # a bare host: any port of it
        "http://ghe.corp.example:8080",
        "https://10.1.2.3:8443",
        None,
        "",
    ):
        security.check_base_url(ok, allowed, "base_url")
    for bad in (
        "http://127.0.0.1:9101",  # another port of loopback: another service
        "http://api.github.com",  # the same host without TLS
        "https://api.github.com.evil.example",
        "https://evil.example/?x=https://api.github.com",
        "https://api.github.com@evil.example/",
        "file:///etc/passwd",
    ):
        with pytest.raises(ParameterRefusedError, match="base_url"):
            security.check_base_url(bad, allowed, "base_url")


def test_paths_must_stay_under_a_root(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "objects").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    roots = [str(root), "s3://lake/nightly"]
    for ok in (root, root / "objects" / "b", "s3://lake/nightly", "s3://lake/nightly/x/"):
        security.check_under_roots(str(ok), roots, "data_dir")
    for bad in (
        tmp_path,
        tmp_path / "data-other",
        root / ".." / "elsewhere",
        root / "link" / "x",  # a symlink out of the root
        "/etc",
        "s3://lake/nightly-other",
        "s3://lake/nightly/../private",
        "s3://attacker/nightly",
    ):
        with pytest.raises(ParameterRefusedError, match="outside the folders"):
            security.check_under_roots(str(bad), roots, "data_dir")


def test_source_files_read_only_their_own_variables() -> None:
    for name in ("AWS_SECRET_ACCESS_KEY", "PREFECT_API_AUTH_STRING", "INGEST_GITHUB_TOKEN"):
        for restricted in (True, False):  # refused in a deployment's run and outside it
            with pytest.raises(ParameterRefusedError, match="is refused"):
                security.check_env_names([name], restricted=restricted)
    security.check_env_names(["INGEST_SOURCE_TICKETS_KEY", None])
    security.check_env_names(["TICKETS_API_KEY"], allowed=["TICKETS_API_KEY"])
    security.check_env_names(["GITHUB_TOKEN"], restricted=False)  # a command's own file
    with pytest.raises(ParameterRefusedError, match="INGEST_SOURCE_ENV_NAMES"):
        security.check_env_names(["GITHUB_TOKEN"])


def test_flows_called_outside_a_deployment_are_not_restricted(tmp_path: Path) -> None:
    worker = Settings(data_dir=tmp_path / "data")
    run = worker.updated(github={"base_url": "http://127.0.0.1:1"})
    run = run.with_data_dir(tmp_path / "anywhere")
    security.check_github_run(worker, run, None)
    with pytest.raises(ParameterRefusedError):
        security.check_github_run(worker, run, {})


# --- the flows, as a deployment's runs ------------------------------------------------


class Listener:
    """An HTTP server on loopback that counts what reaches it (and answers 404)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.seen.append(dict(self.headers))
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Listener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener() as server:
        yield server


def run_as_deployment(flow: Any, deployed: dict[str, Any], **parameters: Any) -> Any:
    """``flow`` as a run of a deployment whose defaults are ``deployed``, with
    ``parameters`` over them (a Custom run), on the session's Prefect server."""
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow

    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name(flow.name)
        deployment_id = client.create_deployment(
            flow_id=flow_id, name=f"security-{os.urandom(4).hex()}", parameters=deployed
        )
        merged = {**deployed, **parameters}
        created = client.create_flow_run_from_deployment(deployment_id, parameters=merged)
    return run_flow(flow, flow_run=created, parameters=merged, return_type="state")


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_runs_cannot_redirect_the_token_or_write_elsewhere(
    listener: Listener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.github_pulls import github_pulls
    from flows.rest_ingest import rest_ingest
    from flows.s3_ingest import s3_ingest

    token = "ghp_" + "SecurityTestToken0123456789abcdefABCD"  # fake
    data = tmp_path / "data"
    monkeypatch.setenv("GITHUB_TOKEN", token)
    monkeypatch.setenv("INGEST_DATA_DIR", str(data))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "worker-aws-secret-value")
    monkeypatch.setenv("INGEST_SOURCE_ENV_NAMES", '["GITHUB_TOKEN", "TICKETS_API_KEY"]')
    elsewhere = tmp_path / "elsewhere"

    state = run_as_deployment(
        github_pulls, {"repos": ["octo/engine"]}, base_url=f"{listener.url}/api/v3"
    )
    assert state.is_failed()
    with pytest.raises(ParameterRefusedError, match="sends no credentials to"):
        state.result()

    state = run_as_deployment(
        s3_ingest, {"bucket": "some-bucket"}, download_dir=str(elsewhere / "objects")
    )
    with pytest.raises(ParameterRefusedError, match="download_dir"):
        state.result()
    state = run_as_deployment(s3_ingest, {"bucket": "some-bucket"}, data_dir=str(elsewhere))
    with pytest.raises(ParameterRefusedError, match="data_dir"):
        state.result()

    # A source file of the run's choosing, naming the worker's AWS secret, on its server.
    planted = tmp_path / "planted.yaml"
    planted.write_text(
        "name: planted\n"
        "client:\n"
        f"  base_url: {listener.url}/\n"
        "  auth: {type: api_key, name: X-Key, location: header, env: AWS_SECRET_ACCESS_KEY}\n"
        "resources:\n"
        "  - name: things\n"
        "    endpoint: {path: things}\n",
        encoding="utf-8",
    )
    state = run_as_deployment(rest_ingest, {"source": "sources/tickets.yaml"}, source=str(planted))
    with pytest.raises(ParameterRefusedError, match="source"):
        state.result()
    state = run_as_deployment(
        rest_ingest, {"source": "sources/tickets.yaml"}, base_url=f"{listener.url}/"
    )
    with pytest.raises(ParameterRefusedError, match="base_url"):
        state.result()

    assert listener.seen == []  # no request, so no credential, reached the other server
    assert not elsewhere.exists()  # and nothing was written outside the roots


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_defaults_changed_on_the_server_do_not_widen_what_a_run_may_reach(
    listener: Listener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PATCH of a deployment's default ``base_url`` or ``data_dir`` on the Prefect server
    (anyone with the auth string can send one) is not what the worker trusts: the next
    run with the server's defaults is refused in one line, before any request."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import DeploymentUpdate
    from prefect.flow_engine import run_flow

    from flows.github_pulls import github_pulls
    from flows.rest_ingest import rest_ingest

    token = "ghp_" + "PatchedDefaultsToken0123456789abcdefAB"  # fake
    monkeypatch.setenv("GITHUB_TOKEN", token)
    monkeypatch.setenv("INGEST_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("INGEST_SOURCE_ENV_NAMES", '["TICKETS_API_KEY"]')
    elsewhere = tmp_path / "elsewhere"

    def patched_run(flow: Any, declared: dict[str, Any], patch: dict[str, Any]) -> Any:
        with get_client(sync_client=True) as client:
            flow_id = client.create_flow_from_name(flow.name)
            deployment_id = client.create_deployment(
                flow_id=flow_id, name=f"patched-{os.urandom(4).hex()}", parameters=declared
            )
            client.update_deployment(
                deployment_id, DeploymentUpdate(parameters={**declared, **patch})
            )
            stored = client.read_deployment(deployment_id).parameters
            assert stored == {**declared, **patch}  # the server took the new defaults
            created = client.create_flow_run_from_deployment(deployment_id)
        return run_flow(flow, flow_run=created, parameters=stored, return_type="state")

    state = patched_run(
        github_pulls, {"repos": ["octo/engine"]}, {"base_url": f"{listener.url}/api/v3"}
    )
    assert state.is_failed()
    with pytest.raises(ParameterRefusedError, match="sends no credentials to") as refused:
        state.result()
    assert "\n" not in str(refused.value)
    state = patched_run(
        rest_ingest, {"source": "sources/tickets.yaml"}, {"base_url": f"{listener.url}/"}
    )
    with pytest.raises(ParameterRefusedError, match="base_url"):
        state.result()
    state = patched_run(github_pulls, {"repos": ["octo/engine"]}, {"data_dir": str(elsewhere)})
    with pytest.raises(ParameterRefusedError, match="data_dir"):
        state.result()

    assert listener.seen == []  # the token never left
    assert not elsewhere.exists()
