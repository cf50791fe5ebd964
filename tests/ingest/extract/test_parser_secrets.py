"""A parser cannot read the secrets of the process that started it.

The review's probe: a job in the pool read the flow process's ``/proc/<pid>/environ``
(the AWS secret, GITHUB_TOKEN, the Prefect auth string). A flow's body now makes its
process non-dumpable (``ingest.security.keep_memory_private``, through the wrapper every
flow of the project gets), so the kernel lets only root read its ``environ`` and
``mem``. Root is not held back, and this suite runs as root: the flow process and its
pool run here as another user (nobody), as the image's ``ingest`` user runs them; the
same script without the protection reads the secret, which is the hole it closes.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from functools import cache

import pytest

from tests.helpers import ROOT

SECRET = "aws-secret-held-by-the-flow-0123456789"  # fake

FLOW = """
import os, sys
from tasks.runs import stops_on_sigterm
from ingest.extract.pool import PoolConfig, WorkerPool

def body():
    job = "tests.extract_support:read_process_environ"
    with WorkerPool(PoolConfig(workers=1, preload=(job,))) as pool:
        return pool.submit(job, os.getpid()).result()

run = stops_on_sigterm(body) if sys.argv[1] == "flow" else body
outcome = run()
print(outcome.status, outcome.value)
"""


NOBODY = 65534


@cache
def interpreter() -> str | None:
    """This Python, or the system's of the same version, as another user can run it (the
    suite's interpreter may live under root's home), with this environment's packages."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for exe in (sys.executable, os.path.realpath(sys.executable), f"/usr/bin/{version}"):
        try:
            subprocess.run([exe, "-c", "pass"], user=NOBODY, check=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        return exe
    return None


def as_nobody(mode: str) -> str:
    exe = interpreter()
    if exe is None:
        pytest.skip("no Python that another user can run")
    if any(not p.stat().st_mode & 0o001 for p in (ROOT, *ROOT.parents)):
        pytest.skip("the checkout lies in a folder another user cannot enter")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *site.getsitepackages()]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    done = subprocess.run(
        [exe, "-c", FLOW, mode],
        cwd=ROOT,
        env=env,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the flow as another user (needs root)")
def test_a_parser_cannot_read_the_flow_process_environment() -> None:
    unprotected = as_nobody("plain")
    assert SECRET in unprotected  # the hole: same user, dumpable, the secret is read
    protected = as_nobody("flow")
    assert protected.startswith("ok refused: PermissionError"), protected
    assert SECRET not in protected
