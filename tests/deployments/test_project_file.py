"""``prefect.yaml`` carries production's defaults; the demo's come from its own file.

``ingest serve`` deploys ``prefect.yaml`` as it is, so no deployment may point at a
server on loopback; the demo of the checkout (``dev/serve_demo.py``) merges the
parameters of ``dev/prefect.demo.yaml`` over it, which may set only parameters that the
deployments' flows take. (``tests/deployments/test_deployments.py`` deploys both on a real server.)
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import yaml

from deployments import project
from dev import serve_demo
from tests.helpers import ROOT

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def test_production_defaults_point_at_no_loopback_server() -> None:
    config = project.load()
    for entry in project.deployments(config):
        parameters = entry.get("parameters") or {}
        assert not [s for s in strings(parameters) if any(h in s for h in LOOPBACK)], entry
        if "source" in parameters and not parameters.get("base_url"):
            # the source file's own client.base_url is the API the deployment reads
            source = yaml.safe_load((ROOT / parameters["source"]).read_text(encoding="utf-8"))
            base_url = source["client"]["base_url"]
            assert not any(h in base_url for h in LOOPBACK), (parameters["source"], base_url)


def test_demo_overrides_set_parameters_the_flows_take() -> None:
    from prefect.flows import load_flow_from_entrypoint

    config = project.load()
    overrides = serve_demo.load_overrides()
    assert {d["name"] for d in project.deployments(overrides)} == {
        d["name"] for d in project.deployments(config)
    }
    for entry in project.deployments(overrides):
        declared = project.deployment(config, entry["name"])
        file, func = declared["entrypoint"].split(":")
        flow: Any = load_flow_from_entrypoint(f"{ROOT / file}:{func}")
        assert set(entry["parameters"]) <= set(inspect.signature(flow.fn).parameters), entry
    # what the demo serves: loopback servers on the ports the overrides name
    endpoints = serve_demo.demo_endpoints(project.with_parameters(config, overrides))
    ports = [serve_demo.loopback_port(endpoints[k]) for k in ("s3_url", "github_url", "rest_url")]
    assert ports == [9000, 9100, 9200]


def test_overrides_change_parameters_only() -> None:
    config = project.load()
    merged = project.with_parameters(config, serve_demo.load_overrides())
    for before, after in zip(project.deployments(config), project.deployments(merged), strict=True):
        assert {k: v for k, v in after.items() if k != "parameters"} == {
            k: v for k, v in before.items() if k != "parameters"
        }
        assert set(after["parameters"]) >= set(before.get("parameters") or {})
    assert merged != config and project.load() == config  # a copy; the file is unchanged
    with pytest.raises(KeyError, match="no deployment 'nope'"):
        project.with_parameters(config, {"deployments": [{"name": "nope", "parameters": {}}]})
    with pytest.raises(ValueError, match="only parameters can be overridden"):
        project.with_parameters(
            config, {"deployments": [{"name": "nightly", "schedules": [], "parameters": {}}]}
        )


def test_demo_servers_on_free_ports_rewrite_the_overrides() -> None:
    """Tests serve the demo on free ports; the parameters they deploy name those ports."""
    servers = serve_demo.DemoServers(any_port=True)
    e = servers.endpoints
    servers._serve(e, "s3_url", "http://127.0.0.1:50001")
    nightly = project.deployment(servers.overrides, "nightly")["parameters"]
    assert nightly["endpoint_url"] == "http://127.0.0.1:50001" == e["s3_url"]
    assert nightly["github_base_url"] == "http://127.0.0.1:9100"  # not started: as declared
    assert nightly["bucket"] == "demo-documents"
