"""The worker image's Dockerfile agrees with the project it packages.

No container engine runs here, so the image is not built by the tests; what can
drift silently is checked: the Python of the base image is one the project
supports, uv is the version the Makefile pins, the worker starts on a pool of
prefect.yaml, and the build context (``.dockerignore``, read with Docker's rules) holds
the product only: the wheel's packages and the files they read, never the dev tools,
tests, benchmarks, docs, environments or data.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import PurePosixPath

import pytest
from packaging.specifiers import SpecifierSet

from deployments import project
from tests.helpers import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
WHEEL_PACKAGES = set(PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])
# Beside the packages: what uv installs them from, and what they read at run time.
PRODUCT_FILES = {"pyproject.toml", "uv.lock", "README.md", "prefect.yaml", "automations.yaml"}
PRODUCT_FOLDERS = {"sources"}  # the example REST source files of the rest-ingest deployment


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


def ignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """``(excludes, pattern)`` of each line of a ``.dockerignore``, in order."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        excludes = not line.startswith("!")
        glob = line.lstrip("!").strip("/")
        regex = ""
        for part in re.split(r"(\*\*/|\*\*|\*|\?)", glob):
            regex += {"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                part, re.escape(part)
            )
        rules.append((excludes, re.compile(regex)))
    return rules


def in_context(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parent folders
    decides; a path no pattern matches is sent."""
    parts = PurePosixPath(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    sent = True
    for excludes, pattern in rules:
        if any(pattern.fullmatch(p) for p in prefixes):
            sent = not excludes
    return sent


RULES = ignore_rules((ROOT / ".dockerignore").read_text())


def test_the_context_check_follows_dockers_rules() -> None:
    rules = ignore_rules("*\n!keep\n**/__pycache__\nkeep/secret.txt\n")
    assert in_context("keep/a/b.py", rules) and in_context("keep", rules)
    assert not in_context("other/a.py", rules) and not in_context("top.txt", rules)
    assert not in_context("keep/a/__pycache__/b.pyc", rules)
    assert not in_context("keep/secret.txt", rules)
    assert in_context("anything", ignore_rules("# a comment only\n"))


def test_context_holds_the_product_only() -> None:
    """Every file of the checkout is in the context exactly when it belongs to a package of
    the wheel or is one the product reads; the rest (dev/, tests/, benchmarks/ and their
    results, docs/, tools/, environments, data) stays out, whatever is added later."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    product = WHEEL_PACKAGES | PRODUCT_FOLDERS
    wrong = [
        path
        for path in tracked
        if in_context(path, RULES) != (path in PRODUCT_FILES or path.split("/")[0] in product)
    ]
    assert wrong == []
    for path in (
        "dev/servers/s3.py",
        "tests/test_layout.py",
        "benchmarks/results/scale.json",
        "docs/index.md",
        "tools/gen_reference.py",
        ".git/HEAD",
        ".venv/bin/python",
        ".tools/bin/uv",
        "data/warehouse.duckdb",
        "chaos-results.json",
        "site/index.html",
        "ingest/__pycache__/settings.cpython-311.pyc",
        "a-folder-added-later/notes.txt",
    ):
        assert not in_context(path, RULES), path
    assert {p for p in tracked if in_context(p, RULES)} >= PRODUCT_FILES
    assert {p.split("/")[0] for p in tracked if in_context(p, RULES) and "/" in p} == product


def test_a_settings_file_with_secrets_is_never_in_the_context_or_the_repository() -> None:
    """The settings read ``.env`` (tokens, the database URL): not in the image at any depth,
    and ignored by git."""
    for path in (".env", ".env.local", "ingest/.env", "sources/.env", "deployments/.env.prod"):
        assert not in_context(path, RULES), path
    for path in (".env", "sources/.env", ".env.production"):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
        assert ignored.returncode == 0, path


def test_what_the_dockerfile_copies_is_in_the_context() -> None:
    copied = [
        name
        for line in re.findall(r"^COPY (?!--from)(.+)$", DOCKERFILE, re.M)
        for name in line.split()[:-1]
        if not name.startswith("--") and name != "."
    ]
    assert copied and all(in_context(name, RULES) for name in copied), copied
