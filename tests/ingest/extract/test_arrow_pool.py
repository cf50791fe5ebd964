"""The process set-up (``ingest.setup_process``): Arrow on the C library's allocator and
OpenBLAS on one thread, set by the command and by every process that runs a flow, and
never by importing the library."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SET = ("ARROW_DEFAULT_MEMORY_POOL", "OPENBLAS_NUM_THREADS")
SHOW = "print(pyarrow.default_memory_pool().backend_name)"
ALLOCATE = "import pyarrow; pyarrow.array(range(1000))"
SETUP_FIRST = f"import ingest; ingest.setup_process(); {ALLOCATE}; {SHOW}"
# pyarrow imported and allocating before the set-up: its pool is switched by the call.
PYARROW_FIRST = f"{ALLOCATE}; import ingest; ingest.setup_process(); {SHOW}"


def run(code: str, **given: str) -> str:
    """``code``'s output in a fresh interpreter started in the checkout, without the
    variables the set-up writes unless ``given``."""
    env = {k: v for k, v in os.environ.items() if k not in SET}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, **given},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_importing_the_library_changes_nothing() -> None:
    """Every module of the library imported, pyarrow allocating: the environment is as it
    was and Arrow keeps its own default allocator."""
    code = (
        "import os, pkgutil, importlib; before = dict(os.environ); import ingest; "
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(ingest.__path__, "
        "'ingest.') if not m.name.startswith('ingest.extract.forkserver')]; "
        f"{ALLOCATE}; print(dict(os.environ) == before, "
        "pyarrow.default_memory_pool().backend_name)"
    )
    same, backend = run(code).split()
    assert same == "True"
    assert backend != "system"  # mimalloc or jemalloc: what the set-up replaces


@pytest.mark.parametrize("code", [SETUP_FIRST, PYARROW_FIRST])
def test_the_set_up_puts_arrow_on_the_system_allocator_whichever_comes_first(code: str) -> None:
    assert run(code) == "system"


@pytest.mark.parametrize("code", [SETUP_FIRST, PYARROW_FIRST])
def test_an_explicit_arrow_pool_setting_wins(code: str) -> None:
    assert run(code, ARROW_DEFAULT_MEMORY_POOL="jemalloc") == "jemalloc"


ENV = f"import os; print(*(os.environ[k] for k in {SET[::-1]!r}))"  # OpenBLAS, then Arrow


def test_the_command_and_a_flow_process_are_set_up() -> None:
    """The command's package (the console script and ``python -m cli.main`` import it
    first), and a deployment's entrypoint loaded as a worker's flow run loads it."""
    assert run(f"import cli; {ALLOCATE}; {SHOW}; {ENV}").split() == ["system", "1", "system"]
    load = (
        "from prefect.flows import load_flow_from_entrypoint; "
        "f = load_flow_from_entrypoint('flows/s3_ingest.py:s3_ingest'); print(f.name); "
        f"{ALLOCATE}; {SHOW}; {ENV}"
    )
    assert run(load).split() == ["s3-ingest", "system", "1", "system"]
    # A value the user set is kept.
    assert run(f"import cli; {ENV}", OPENBLAS_NUM_THREADS="3").split() == ["3", "system"]
