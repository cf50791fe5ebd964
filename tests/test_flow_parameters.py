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
