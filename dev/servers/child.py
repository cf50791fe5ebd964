"""A local server run as a child process on a free loopback port.

The base of the project's development servers (``dev.servers.s3`` for S3,
``dev.servers.github`` for GitHub): start the command, wait until its port
answers, stop it on exit, and read its request counters at ``/_dev/stats``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any, Self


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Nothing listens on loopback ``port`` (a bind there succeeds; connections of an
    earlier server still closing do not count, as the servers bind with SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PortTakenError(RuntimeError):
    """The port asked for is held by another process."""

    def __init__(self, port: int) -> None:
        super().__init__(f"port {port} is already in use by another process")
        self.port = port


class ChildServer:
    """``with Server(...) as srv: srv.url``; subclasses set ``cmd`` and ``env``."""

    label = "server"

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd: list[str] = []
        self.env: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        if not port_is_free(self.port):
            # Its port answering would be taken for this server's: refuse before starting.
            raise PortTakenError(self.port)
        self.proc = subprocess.Popen(
            self.cmd,
            env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"{self.label} exited: {err[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    if self.proc.poll() is None:  # our child answers, not a process gone
                        return self
            except OSError:
                time.sleep(0.05)  # polling for the port to open, not synchronising work
        self.__exit__()
        raise RuntimeError(f"{self.label} did not start on port {self.port}")

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and self.proc.stderr:
            self.proc.stderr.close()

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        req = urllib.request.Request(
            f"{self.url}{path}",
            method="POST",
            data=json.dumps(body or {}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/_dev/stats", timeout=10) as r:
            return dict(json.loads(r.read()))

    def reset_stats(self) -> None:
        self.post("/_dev/reset")


def serve_uvicorn(app: Any, host: str, port: int) -> None:
    """Serve an ASGI app as the development servers do (quiet, keep-alive, fast stop)."""
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        backlog=1024,
        timeout_keep_alive=30,
        timeout_graceful_shutdown=1,
    )


class ConfiguredServer(ChildServer):
    """A ``python -m MODULE --port N --config JSON`` child whose behaviour is a dataclass
    (``config_type``), changed at run time through ``POST /_dev/config``."""

    module = ""
    config_type: Any = None

    def __init__(self, port: int | None = None, **config: Any) -> None:
        from dataclasses import asdict

        super().__init__(port)
        self.config = self.config_type(**config)
        self.cmd = [
            sys.executable,
            "-m",
            self.module,
            "--port",
            str(self.port),
            "--config",
            json.dumps(asdict(self.config)),
        ]

    def configure(self, **changes: Any) -> None:
        self.post("/_dev/config", changes)
