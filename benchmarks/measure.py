"""Measuring a child process: its wall time, CPU and memory, with a time limit.

Shared by the benchmarks that run commands side by side (``bench_s3``, ``bench_scale``).
"""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path


def wait_measured(
    proc: subprocess.Popen[bytes], *, timeout: float, sample: Callable[[], None], every: float
) -> resource.struct_rusage:
    """Wait for ``proc``, calling ``sample()`` every ``every`` seconds meanwhile (a peak
    RSS probe), and kill it after ``timeout`` seconds. Sets ``proc.returncode``; returns
    the rusage of the child and the descendants it waited for (``os.wait4``)."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(every):
            sample()

    sampler = threading.Thread(target=loop, daemon=True)
    sampler.start()
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        killer.cancel()
        done.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
