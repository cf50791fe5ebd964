"""The library runs Arrow on the C library's allocator (see ``ingest/__init__.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SHOW = "print(pyarrow.default_memory_pool().backend_name)"
LIBRARY_FIRST = f"import ingest, pyarrow; pyarrow.array(range(1000)); {SHOW}"
# pyarrow imported and allocating before the library: its pool is switched on import.
PYARROW_FIRST = f"import pyarrow; pyarrow.array(range(1000)); import ingest; {SHOW}"


def backend(code: str, env_pool: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env_pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = env_pool
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.parametrize("code", [LIBRARY_FIRST, PYARROW_FIRST])
def test_arrow_uses_the_system_allocator_whichever_is_imported_first(code: str) -> None:
    assert backend(code) == "system"


@pytest.mark.parametrize("code", [LIBRARY_FIRST, PYARROW_FIRST])
def test_an_explicit_arrow_pool_setting_wins(code: str) -> None:
    assert backend(code, "jemalloc") == "jemalloc"
