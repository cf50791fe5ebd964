"""Every flow parameter reaches the UI's run form with a description and its bounds."""

from __future__ import annotations

import pytest
from prefect.utilities.callables import parameter_schema

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
    concurrency = properties["concurrency"]["anyOf"][0]
    assert (concurrency["minimum"], concurrency["maximum"]) == (1, 512)
    assert properties["bucket"]["minLength"] == 3


@pytest.mark.parametrize("flow", [s3_ingest, github_pulls], ids=lambda f: f.name)
def test_the_run_form_shows_each_bound(flow) -> None:
    """The UI's form shows descriptions, not minimum/maximum: each bound is in the text,
    and nothing in it reads as an HTML tag."""
    properties = parameter_schema(flow).model_dump()["properties"]
    for name, p in properties.items():
        schema = p.get("anyOf", [p])[0]
        low = schema.get("minimum", schema.get("minLength", schema.get("minItems")))
        high = schema.get("maximum", schema.get("maxLength", schema.get("maxItems")))
        if low is not None and high is not None:
            assert f"{low}-{high}" in p["description"], (name, p["description"])
        elif low is not None:
            assert f"at least {low}" in p["description"], (name, p["description"])
        assert "<" not in p["description"], (name, p["description"])


def test_bucket_bounds_agree_between_flows() -> None:
    """S3 bucket names are 3-63 characters, in every flow that takes one."""
    s3 = parameter_schema(s3_ingest).model_dump()["properties"]["bucket"]
    both = parameter_schema(nightly).model_dump()["properties"]["bucket"]
    assert (s3["minLength"], s3["maxLength"]) == (both["minLength"], both["maxLength"]) == (3, 63)
