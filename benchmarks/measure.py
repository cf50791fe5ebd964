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


def run_and_append(
    run: Callable[[Path], str],
    *,
    work: Path,
    prefix: str,
    out: Path | None,
    title: str,
    module: str,
) -> int:
    """Run a benchmark in a scratch folder under ``work`` (removed after), print its
    Markdown section and append it to ``out`` (created with ``title`` and a line naming
    the command that writes it); ``out`` None: print only."""
    import shutil
    import tempfile

    work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=work))
    try:
        text = run(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("\n" + text)
    if out is not None:
        if not out.exists():
            out.write_text(
                f"# {title}\n\nWritten by `python -m {module}` (see its docstring for what "
                "is measured).\n\n"
            )
        with out.open("a") as f:
            f.write("\n" + text)
    return 0
