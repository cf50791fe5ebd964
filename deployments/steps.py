"""Deployment steps of ``prefect.yaml`` that Prefect does not ship.

``pinned_repository`` says which repository and ref a worker of the cluster pool
clones: the worker's own settings (``INGEST_GIT_REPOSITORY``, ``INGEST_GIT_REF``),
not a Prefect variable, which anyone who can reach the Prefect API could point at
code of their own that every worker would then clone and install.

A worker on another machine runs a flow from a fresh clone of the project at a
ref (``prefect.deployments.steps.git_clone``), then needs that ref's locked
dependencies in the environment that runs the flow. Prefect's
``pip_install_requirements`` needs pip, which an environment made by uv does
not have, and ``run_shell_script`` cannot name the interpreter it runs in, so
``uv sync`` there would build a second environment beside the clone that the
flow never uses. ``install_locked_dependencies`` runs ``uv sync --frozen`` into
the environment of the running interpreter (``sys.prefix``) instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from ingest.errors import IngestError


class DeployStepError(IngestError, RuntimeError):
    """A deployment step that cannot do its job (the message says what to fix)."""


def pinned_repository() -> dict[str, str | None]:
    """The repository and ref this worker clones (``repository``, ``ref``), from its own
    settings; a worker without ``INGEST_GIT_REPOSITORY`` refuses to clone anything."""
    from ingest.settings import Settings

    settings = Settings()
    if not settings.git_repository:
        raise DeployStepError(
            "INGEST_GIT_REPOSITORY is not set on this worker: set it (and INGEST_GIT_REF) in "
            "the environment of `prefect worker start --pool ingest-cluster`"
        )
    return {"repository": settings.git_repository, "ref": settings.git_ref or None}


def install_locked_dependencies(
    directory: str = ".", extras: list[str] | None = None
) -> dict[str, str]:
    """``uv sync --frozen`` of the project in ``directory`` into this interpreter's
    environment: the packages of its ``uv.lock``, installed or changed where the
    environment differs (nothing else is removed), the project itself not installed
    (the flow imports it from ``directory``). ``extras`` names optional dependency
    groups of ``pyproject.toml`` (``ocr``). Returns uv's report as ``output``.
    """
    uv = shutil.which("uv")
    if uv is None:
        raise DeployStepError(
            "uv is not on the PATH of the worker; install it (pip install uv) or run the "
            "worker from the project's image"
        )
    if sys.prefix == sys.base_prefix:
        raise DeployStepError(
            f"the worker runs in no virtual environment ({sys.executable}); start it from "
            "the project's environment (.venv/bin/prefect worker start ...) or its image"
        )
    cmd = [uv, "sync", "--frozen", "--inexact", "--no-dev", "--no-install-project"]
    for extra in extras or []:
        cmd += ["--extra", extra]
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": sys.prefix}
    env.pop("VIRTUAL_ENV", None)  # uv warns when it differs from the project environment
    proc = subprocess.run(cmd, cwd=directory, env=env, capture_output=True, text=True, check=False)
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise DeployStepError(f"uv sync --frozen failed in {directory!r}:\n{output[-3000:]}")
    print(output)
    return {"output": output}
