"""A Dask cluster of child processes on loopback, each worker in its own folder.

``dask scheduler`` and ``dask worker`` exactly as a team starts them on their
machines, for the tests and the scaling benchmark: every worker runs in a folder
of its own (working directory, temporary files, Prefect home), shares no file
with the others or with the flow, and reports its task runs to the Prefect API
it is given. Workers run under their nanny, as ``dask worker`` starts them by
default (and LocalCluster, dask-kubernetes, dask-jobqueue): the worker is a
daemonic process the nanny restarts. Each worker's processes (nanny, worker,
the extraction pool's) are a session of their own, so ``kill`` takes them all at
once, as losing that machine would; ``nanny=False`` starts ``--no-nanny`` workers.

    with DaskCluster(root, workers=2, env={"PREFECT_API_URL": url}) as cluster:
        cluster.address  # tcp://127.0.0.1:PORT, for INGEST_DASK_ADDRESS
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Self

from dev.servers.child import free_port

DASK = str(Path(sys.executable).with_name("dask"))


class DaskCluster:
    """A scheduler and ``workers`` named ``w1``, ``w2`` ... as child processes."""

    def __init__(
        self,
        root: Path,
        *,
        workers: int = 2,
        threads: int = 2,
        env: dict[str, str] | None = None,
        start_timeout: float = 120.0,
        nanny: bool = True,
    ) -> None:
        self.root = root
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.names = [f"w{i + 1}" for i in range(workers)]
        self.threads = threads
        self.env = {**os.environ, "PREFECT_LOGGING_LEVEL": "WARNING", **(env or {})}
        self.start_timeout = start_timeout
        self.nanny = nanny
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self._temps: dict[str, Path] = {}

    def folder(self, name: str) -> Path:
        return self.root / name

    def _start(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        folder = self.folder(name)
        folder.mkdir(parents=True, exist_ok=True)
        log = open(folder / f"{name}.log", "wb")  # noqa: SIM115 (closed in __exit__)
        self._logs.append(log)
        return subprocess.Popen(
            [DASK, *args],
            cwd=folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its process group: the machine's processes, for kill()
        )

    def temp_folder(self, name: str) -> Path:
        """The worker's TMPDIR, outside its working folder, as a machine's /tmp is."""
        if name not in self._temps:
            self._temps[name] = Path(tempfile.mkdtemp(prefix=f"dask-{name}-"))
        return self._temps[name]

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        folder = self.folder(name)
        env = {
            **self.env,
            "TMPDIR": str(self.temp_folder(name)),
            "PREFECT_HOME": str(folder / "prefect-home"),
        }
        proc = self._start(
            name,
            [
                "worker",
                self.address,
                "--name",
                name,
                "--nthreads",
                str(self.threads),
                "--nanny" if self.nanny else "--no-nanny",
                "--no-dashboard",
                "--local-directory",
                str(folder / "dask"),
            ],
            env,
        )
        self.workers[name] = proc
        return proc

    def __enter__(self) -> Self:
        self.scheduler = self._start(
            "scheduler",
            ["scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"],
            self.env,
        )
        try:
            for name in self.names:
                self.start_worker(name)
            self.wait_for_workers(len(self.names))
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_for_workers(self, n: int) -> None:
        """Block until ``n`` workers are connected to the scheduler."""
        from distributed import Client

        with Client(self.address, timeout=self.start_timeout) as client:
            client.wait_for_workers(n, timeout=self.start_timeout)

    def worker_names(self) -> set[str]:
        """Names of the workers the scheduler has now."""
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            info = client.scheduler_info(n_workers=-1)
        return {str(w["name"]) for w in info["workers"].values()}

    def processing(self, name: str) -> list[str]:
        """Keys of the tasks the scheduler has given the worker ``name`` and not got back."""
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            info = client.scheduler_info(n_workers=-1)
            addresses = [a for a, w in info["workers"].items() if str(w["name"]) == name]
            if not addresses:
                return []
            return [str(k) for k in client.processing(workers=addresses).get(addresses[0], ())]

    def kill(self, name: str) -> None:
        """SIGKILL a worker's processes (nanny, worker, extraction pool) at once: the machine
        is gone, nothing of it says goodbye."""
        proc = self.workers[name]
        _kill_group(proc)
        proc.wait()

    def __exit__(self, *exc: object) -> None:
        for proc in [*self.workers.values(), self.scheduler]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers.values(), self.scheduler]:
            if proc is None:
                continue
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            _kill_group(proc)  # whatever of its session outlived it
        for log in self._logs:
            log.close()
        for temp in self._temps.values():
            shutil.rmtree(temp, ignore_errors=True)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group (session) ``proc`` leads, if any of it is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
