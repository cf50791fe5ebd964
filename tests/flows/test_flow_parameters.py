"""Every flow parameter reaches the UI's run form with a description and its bounds."""

from __future__ import annotations

from typing import Any

import pytest
from prefect.utilities.callables import parameter_schema

from deployments import project
from dev import serve_demo
from flows.github_pulls import github_pulls
from flows.nightly import nightly
from flows.s3_ingest import s3_ingest
from tests.helpers import ROOT


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
    assert flow.with_options(name="other").parameters.model_dump() == schema


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


def test_parameters_reach_the_api_as_prefect_would_send_them() -> None:
    """The flows' plain parameters skip FastAPI's encoder; the values sent are the
    encoder's, for plain and other values alike, and the order is kept."""
    import datetime as dt
    import subprocess
    import sys
    from pathlib import PurePosixPath

    from prefect import Flow

    from flows.parameters import IngestFlow

    parameters = {
        "bucket": "docs",
        "concurrency": 64,
        "ratio": 0.5,
        "extract": True,
        "endpoint_url": None,
        "repos": ["a/b", "c/d"],
        "nested": {"k": [1, 2.5, None]},
        "when": dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        "path": PurePosixPath("/data/x"),
        "pair": ("a", 1),
        "nan": float("nan"),
    }
    assert isinstance(s3_ingest, IngestFlow)
    ours = s3_ingest.serialize_parameters(parameters)
    theirs = Flow.serialize_parameters(s3_ingest, parameters)
    assert list(ours) == list(parameters)
    assert {k: v for k, v in ours.items() if k != "nan"} == {
        k: v for k, v in theirs.items() if k != "nan"
    }
    assert ours["when"] == "2026-12-01T00:00:00+00:00" and ours["pair"] == ["a", 1]
    assert type(s3_ingest.with_options(name="other")) is IngestFlow
    # A command's plain parameters never import FastAPI.
    probe = (
        "import sys; from flows.s3_ingest import s3_ingest; "
        "s3_ingest.serialize_parameters({'bucket': 'b', 'n': 1, 'xs': ['a']}); "
        "print('fastapi' in sys.modules)"
    )
    root = ROOT
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.strip() == "False"


def test_the_time_limit_is_read_when_a_run_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flows were imported above, before INGEST_FLOW_TIMEOUT is set: the limit Prefect
    reads at a run's start is the environment's of that moment; a copy keeps reading it,
    and a copy given a limit of its own keeps that one."""
    monkeypatch.setenv("INGEST_FLOW_TIMEOUT", "8")
    assert s3_ingest.timeout_seconds == 8.0
    assert s3_ingest.with_options(name="other").timeout_seconds == 8.0
    assert s3_ingest.with_options(timeout_seconds=3).timeout_seconds == 3.0
    monkeypatch.setenv("INGEST_FLOW_TIMEOUT", "9.5")
    assert nightly.timeout_seconds == 9.5


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
