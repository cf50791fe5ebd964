"""The command's process ends as the interpreter ends it, its teardown aside
(``cli.running.exit_now``): threads joined, exit handlers run, output flushed, and the
exit code a ``SystemExit`` gives."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

PROGRAM = """
import atexit, sys, threading, time
from cli.running import exit_now

def late() -> None:
    time.sleep(0.2)  # still working when the command's main thread is done
    print("thread done", flush=False)

threading.Thread(target=late).start()
atexit.register(lambda: print("exit handler ran", flush=False))
print("unflushed output", end="", flush=False)
sys.stdout.write("\\n")
exit_now(CODE)
"""


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), ("message", 1)])
def test_exit_now_ends_as_the_interpreter_would(code: object, status: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM.replace("CODE", repr(code))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == status, proc.stderr
    assert proc.stdout.splitlines() == ["unflushed output", "thread done", "exit handler ran"]
    assert proc.stderr == ("message\n" if code == "message" else "")
