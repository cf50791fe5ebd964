"""Every flow parameter reaches the UI's run form with a description and its bounds."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prefect.utilities.callables import parameter_schema

from deployments import project
from dev import serve_demo
from flows.github_pulls import github_pulls
from flows.nightly import nightly
from flows.s3_ingest import s3_ingest


@pytest.mark.parametrize("flow", [s3_ingest, github_pulls, nightly], ids=lambda f: f.name)
def test_every_parameter_is_described(flow) -> None:
    properties = parameter_schema(flow).model_dump()["properties"]
    undescribed = [name for name, p in properties.items() if not p.get("description")]
    assert properties and undescribed == []


def test_bounds_survive_into_the_schema() -> None:
    properties = parameter_schema(s3_ingest).model_dump()["properties"]
    concurrency = properties["concurrency"]
    assert (concurrency["type"], concurrency["minimum"], concurrency["maximum"]) == (
        "integer",
        1,
        512,
    )
    assert properties["bucket"]["minLength"] == 3


@pytest.mark.parametrize("flow", [s3_ingest, github_pulls], ids=lambda f: f.name)
def test_the_run_form_shows_each_bound(flow) -> None:
    """The UI's form shows descriptions, not minimum/maximum: each bound is in the text,
    and nothing in it reads as an HTML tag."""
    properties = parameter_schema(flow).model_dump()["properties"]
    for name, p in properties.items():
        schema = p
        low = schema.get("minimum", schema.get("minLength", schema.get("minItems")))
        high = schema.get("maximum", schema.get("maxLength", schema.get("maxItems")))
        if low is not None and high is not None:
            assert f"{low}-{high}" in p["description"], (name, p["description"])
        elif low is not None:
            assert f"at least {low}" in p["description"], (name, p["description"])
        assert "<" not in p["description"], (name, p["description"])


# The types the UI's run form has an input for (a schema without one is a JSON editor,
# and the null choice of an anyOf reads 'Property is type "None"').
FORM_TYPES = {"string", "integer", "number", "boolean", "array", "object"}


def deployed_flows() -> list[Any]:
    from prefect.flows import load_flow_from_entrypoint

    entries = project.deployments(project.load())
    return [load_flow_from_entrypoint(f"{project.PROJECT_ROOT / e['entrypoint']}") for e in entries]


@pytest.mark.parametrize("flow", deployed_flows(), ids=lambda f: f.name)
def test_every_parameter_has_an_input_in_the_run_form(flow) -> None:
    """Each parameter of each deployed flow is one input of its own type, an optional one
    too: no null choice and no null default (the form shows that default as an error);
    the flow still takes None for it."""
    schema = parameter_schema(flow).model_dump()
    assert schema == flow.parameters.model_dump()  # the flow's and what deploys read
    unset = [n for n, p in schema["properties"].items() if "default" not in p]
    for name, p in schema["properties"].items():
        assert "anyOf" not in p and p.get("type") in FORM_TYPES, (name, p)
        assert p.get("default", "unset") is not None, (name, p)
    optional = [n for n in unset if n not in schema["required"]]
    assert optional, schema
    for name in optional:
        assert flow.validate_parameters({name: None, **required_values(flow)})[name] is None


def required_values(flow: Any) -> dict[str, Any]:
    examples = {"bucket": "a-bucket", "repos": ["o/r"], "source": "sources/tickets.yaml"}
    required = parameter_schema(flow).model_dump()["required"]
    return {n: examples[n] for n in required}


@pytest.mark.parametrize("overrides", [False, True], ids=["prefect.yaml", "demo"])
def test_deployment_parameters_pass_the_servers_check(overrides: bool) -> None:
    """The server checks a deployment's parameters against the flow's schema as written
    (no null for a typed input), and a run's (the deployment's merged with the run's) the
    way it reads a schema, where a property neither required nor defaulted may be null:
    each deployment's pass both, a run giving None for any optional parameter too; a
    value of another type does not."""
    from prefect._internal.schemas.validators import validate_values_conform_to_schema
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.schema_tools.validation import validate

    config = project.load()
    if overrides:
        config = project.with_parameters(config, serve_demo.load_overrides())
    for entry in project.deployments(config):
        flow = load_flow_from_entrypoint(f"{project.PROJECT_ROOT / entry['entrypoint']}")
        schema = parameter_schema(flow).model_dump()
        parameters = entry.get("parameters") or {}
        validate_values_conform_to_schema(parameters, schema, ignore_required=True)
        assert validate(parameters, schema) == [], (entry["name"], parameters)
        optional = {n: None for n in schema["properties"] if n not in schema["required"]}
        optional = {n: v for n, v in optional.items() if "default" not in schema["properties"][n]}
        assert optional and validate({**parameters, **optional}, schema) == [], optional
        assert validate({**parameters, "data_dir": 3}, schema), "a number is no folder"


def test_bucket_bounds_agree_between_flows() -> None:
    """S3 bucket names are 3-63 characters, in every flow that takes one."""
    s3 = parameter_schema(s3_ingest).model_dump()["properties"]["bucket"]
    both = parameter_schema(nightly).model_dump()["properties"]["bucket"]
    assert (s3["minLength"], s3["maxLength"]) == (both["minLength"], both["maxLength"]) == (3, 63)


@pytest.mark.flow
def test_the_time_limit_is_read_when_a_run_starts(
    prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flows were imported above, before INGEST_FLOW_TIMEOUT is set: every flow reads
    its limit as each run starts (its on_running hook), and the limit Prefect's clock
    enforces is the environment's of that moment: a run past it ends TimedOut with it,
    the next run reads the next value."""
    from prefect import flow
    from prefect.context import FlowRunContext

    from flows.rest_ingest import rest_ingest
    from tasks import limits

    for each in (s3_ingest, github_pulls, nightly, rest_ingest):
        assert limits.read_flow_limit in each.on_running_hooks, each.name

    @flow(on_running=[limits.read_flow_limit])
    def limited(seconds: float) -> float | None:
        ctx = FlowRunContext.get()
        assert ctx is not None and ctx.flow is not None
        time.sleep(seconds)  # the run's work, which the limit cuts short
        return ctx.flow.timeout_seconds

    monkeypatch.setenv("INGEST_FLOW_TIMEOUT", "0.5")
    state = limited(5.0, return_state=True)
    assert state.name == "TimedOut" and "0.5 second" in (state.message or ""), state
    monkeypatch.setenv("INGEST_FLOW_TIMEOUT", "9.5")
    assert limited(0.0) == 9.5


@pytest.mark.parametrize("flow", [github_pulls, nightly], ids=lambda f: f.name)
def test_a_malformed_repository_is_refused_before_a_run_is_created(flow) -> None:
    """The schema the server checks a run's parameters against (and the run form draws)
    refuses a repository that is not owner/name, as the flow itself would at its start."""
    from prefect.exceptions import ParameterTypeError
    from prefect.utilities.schema_tools.validation import validate

    schema = parameter_schema(flow).model_dump()
    given = required_values(flow) | {"repos": ["octo/engine", "octo"]}
    errors = validate(given, schema)
    assert errors and "octo" in str(errors[0]), errors
    assert validate(given | {"repos": ["octo/engine", "octo/re.po_2-x"]}, schema) == []
    with pytest.raises(ParameterTypeError, match=r"repos\.1: String should match pattern"):
        flow.validate_parameters(given)
