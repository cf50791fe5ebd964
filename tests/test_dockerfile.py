"""The worker image's Dockerfile agrees with the project it packages.

No container engine runs here, so the image is not built by the tests; what can
drift silently is checked: the Python of the base image is one the project
supports, uv is the version the Makefile pins, the worker starts on a pool of
prefect.yaml, and the context leaves environments and data out.
"""

from __future__ import annotations

import re
import tomllib

from packaging.specifiers import SpecifierSet

from deployments import project
from tests.helpers import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_base_image_python_is_supported() -> None:
    [version] = re.findall(r"^FROM python:(\d+\.\d+)-", DOCKERFILE, re.M)
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert version in SpecifierSet(requires), (version, requires)


def test_uv_is_the_pinned_version() -> None:
    [pinned] = re.findall(r"^UV_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert re.findall(r"ghcr\.io/astral-sh/uv:(\S+) ", DOCKERFILE) == [pinned]


def test_dependencies_come_from_the_lock_without_dev_tools() -> None:
    syncs = re.findall(r"uv sync ([^\n]+)", DOCKERFILE)
    assert syncs and all("--frozen" in s and "--no-dev" in s for s in syncs)
    assert re.search(r"^USER ingest$", DOCKERFILE, re.M)  # not root


def test_worker_starts_on_a_pool_of_prefect_yaml() -> None:
    [cmd] = re.findall(r"^CMD (\[.*\])$", DOCKERFILE, re.M)
    pool = re.findall(r'"--pool", "([^"]+)"', cmd)
    assert pool and pool[0] in project.work_pools(project.load())


def test_context_leaves_out_environments_and_data() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".tools", "data"} <= set(ignored)
