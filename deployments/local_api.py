"""The Prefect API an ``ingest`` command talks to, and a server for it when there is none.

In order:

1. A configured API (``PREFECT_API_URL`` in the environment or the active
   Prefect profile) always wins.
2. While ``ingest serve`` runs, it says where its API is in
   ``$PREFECT_HOME/ingest-serve.json`` (address and process id), and the
   commands use that API: their runs show up in the same UI, with no start-up.
   A file left by a process that is gone, or an API that does not answer within
   half a second, is ignored.
3. Otherwise the command starts a local server of its own (``TemporaryServer``)
   and stops it after the run. Not Prefect's own temporary server, for two
   reasons measured on a fresh 2-core machine: that one must answer within
   ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` (20 s by default) while
   its first start on an empty Prefect home creates and migrates the database
   (17-36 s), so a new user's first command failed; and it runs in the
   command's process group, so Ctrl-C in a terminal killed it before the run
   could end, and the run then spent a minute failing to send its logs. This
   one waits as long as the first migration takes (the same setting when the
   user set it, else ``START_TIMEOUT``), runs in a session of its own, and is
   stopped only after Prefect's log and event queues are drained. It checks an auth
   string of its own on every API request, which only the command holds.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

FILE_NAME = "ingest-serve.json"

# Quiet, offline-friendly Prefect defaults for a command and the servers it starts; any value
# the user set wins. The recorder batching: with Prefect's defaults a SQLite server needed
# 75-90 s after a 2,000-task flow to record its task runs (and answered "database is locked"
# meanwhile); with these, 4-5 s (benchmarks/server_db.md).
PREFECT_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
}
# Seconds a command's own server may take to answer: a first start on an empty Prefect home
# creates and migrates its SQLite database (17 s idle, 36 s at load 3 on 2 cores).
START_TIMEOUT = 600.0
STARTUP_TIMEOUT_VARIABLE = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"


def advert_path() -> Path:
    """``$PREFECT_HOME/ingest-serve.json`` (Prefect's default home: ``~/.prefect``)."""
    return Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser() / FILE_NAME


@contextmanager
def advertise(api_url: str, auth_file: Path | None = None) -> Iterator[Path]:
    """Name ``api_url`` as this machine's running API while the block runs, and the file
    that holds its auth string (the path, never the string: ``deployments.auth``)."""
    path = advert_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    advert: dict[str, Any] = {"api_url": api_url, "pid": os.getpid()}
    if auth_file is not None:
        advert["auth_file"] = str(auth_file)
    tmp.write_text(json.dumps(advert))
    tmp.replace(path)
    try:
        yield path
    finally:
        with suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def read_advert() -> dict[str, Any]:
    """The advert of a running ``ingest serve`` as written (empty when there is none)."""
    try:
        advert = json.loads(advert_path().read_text())
    except (OSError, ValueError):
        return {}
    return advert if isinstance(advert, dict) else {}


def find(timeout: float = 0.5) -> str | None:
    """The API a running ``ingest serve`` advertises, if its process lives and it answers."""
    advert = read_advert()
    try:
        api_url = str(advert["api_url"])
    except KeyError:
        return None
    if not api_url.startswith(("http://", "https://")) or not _alive(advert.get("pid")):
        return None
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout) as r:
            return api_url if r.status == 200 else None
    except (OSError, ValueError):
        return None


def use_running_serve() -> str | None:
    """Point this process's Prefect at a running ``ingest serve`` when nothing else is
    configured; returns the address used, or None (Prefect's own choice stands)."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    found = find()
    if found is None:
        return None
    from prefect.context import refresh_global_settings_context
    from prefect.settings import get_current_settings

    current = get_current_settings()
    if current.api.url:  # the active profile names an API: it wins
        return None
    os.environ["PREFECT_API_URL"] = found
    if current.api.auth_string is None:
        advertised_auth()
    refresh_global_settings_context()
    return found


def advertised_auth() -> bool:
    """Set ``PREFECT_API_AUTH_STRING`` from the auth file a running ``ingest serve``
    names; True when it did. A file this user cannot read, or that others can, is not
    used (the server then answers 401, which says to set the variable)."""
    from deployments.auth import AuthError, read_auth_file

    named = read_advert().get("auth_file")
    if not isinstance(named, str):
        return False
    try:
        value = read_auth_file(Path(named))
    except (AuthError, OSError) as exc:
        log.warning("not using the auth string of the running ingest serve: %s", exc)
        return False
    if not value:
        return False
    os.environ["PREFECT_API_AUTH_STRING"] = value
    return True


def prefect_defaults(environ: dict[str, str] | None = None) -> None:
    """Set ``PREFECT_DEFAULTS`` where the user has not (``os.environ`` by default)."""
    env = os.environ if environ is None else environ
    for k, v in PREFECT_DEFAULTS.items():
        env.setdefault(k, v)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerStartError(RuntimeError):
    """The command's own Prefect server did not start; the message ends with its output."""


class TemporaryServer:
    """A Prefect API server for one command: loopback, a free port, no UI, the services of
    Prefect's own temporary server, the database of ``PREFECT_HOME``.

    ``with TemporaryServer() as server: server.api_url``. It runs in a session of its own
    (a Ctrl-C in the terminal reaches the command, not the server) and its output goes to a
    temporary file whose end is the error when it does not start.
    """

    def __init__(self, *, timeout: float | None = None, env: Mapping[str, str] | None = None):
        from deployments.auth import CLIENT_VARIABLE, SERVER_VARIABLE

        self.timeout = timeout if timeout is not None else startup_timeout()
        self.env = {**os.environ, **(env or {})}
        prefect_defaults(self.env)
        self.env.pop("PREFECT_API_URL", None)
        # An auth string of this server alone: other users of the machine reach its port
        # too, and could otherwise create runs on it while the command runs.
        self.auth_string = secrets.token_urlsafe(32)
        self.env.pop(CLIENT_VARIABLE, None)
        self.env[SERVER_VARIABLE] = self.auth_string
        self.env.update(
            PREFECT_UI_ENABLED="0", PREFECT__SERVER_EPHEMERAL="1", PREFECT__SERVER_FINAL="1"
        )
        self.port = 0
        self.api_url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    def _spawn(self) -> subprocess.Popen[bytes]:
        import prefect

        self.port = _free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        cmd = [
            sys.executable, "-m", "uvicorn",
            "--app-dir", str(Path(prefect.__file__).parent.parent),
            "--factory", "prefect.server.api.server:create_app",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--log-level", "error", "--lifespan", "on",
        ]  # fmt: skip
        assert self._out is not None
        return subprocess.Popen(
            cmd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def __enter__(self) -> TemporaryServer:
        self._out = tempfile.TemporaryFile()
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        deadline = time.monotonic() + self.timeout
        for _attempt in range(3):  # a free port taken between our probe and the bind
            self.proc = self._spawn()
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if _healthy(self.api_url, 2.0):
                    return
                time.sleep(0.1)  # polling a port that is opening, not synchronising work
            else:
                raise ServerStartError(
                    f"the local Prefect server did not answer within {self.timeout:.0f} s "
                    f"(raise {STARTUP_TIMEOUT_VARIABLE}, or set PREFECT_API_URL to a running "
                    f"server){self._tail()}"
                )
            if b"address already in use" not in self._output().lower():
                break
        code = self.proc.returncode if self.proc else None
        raise ServerStartError(f"the local Prefect server exited with code {code}{self._tail()}")

    def _output(self) -> bytes:
        if self._out is None:
            return b""
        self._out.seek(0)
        return self._out.read()

    def _tail(self, lines: int = 12) -> str:
        from ingest.redact import redact

        text = self._output().decode("utf-8", "replace").strip()
        tail = "\n".join(text.splitlines()[-lines:])
        return f"; its output ends with:\n{redact(tail)}" if tail else ""

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # uvicorn's graceful shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._out is not None:
            self._out.close()
            self._out = None


def _healthy(api_url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout) as r:
            return bool(r.status == 200)
    except (OSError, ValueError):
        return False


def startup_timeout() -> float:
    """``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` when the user set it, else
    ``START_TIMEOUT``: Prefect's 20 s default is shorter than a first migration."""
    raw = os.environ.get(STARTUP_TIMEOUT_VARIABLE)
    try:
        return float(raw) if raw else START_TIMEOUT
    except ValueError:
        return START_TIMEOUT


def drain_prefect_queues(timeout: float = 10.0) -> None:
    """Send what Prefect's log and event workers still hold, before the API goes away."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with suppress(Exception):  # a worker that never started has nothing to send
            worker.drain_all(timeout=timeout)


@contextmanager
def command_api(echo: Any = None) -> Iterator[str | None]:
    """The Prefect API for this command's runs (see the module's docstring); yields its
    address, or None when the user's configuration names one.

    A server started here is stopped when the block ends, after the run's logs and events
    are sent. ``echo`` (a function of one string) says that one is being started.
    """
    prefect_defaults()
    if os.environ.get("PREFECT_API_URL"):
        yield None
        return
    found = use_running_serve()
    if found is not None:
        yield found
        return
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:  # the active profile names an API
        yield None
        return
    from prefect.context import refresh_global_settings_context

    if echo is not None:
        echo(
            "starting a local Prefect server for this command (its first start creates its "
            "database; set PREFECT_API_URL, or keep `ingest serve` running, to skip this)"
        )
    saved_auth = os.environ.get("PREFECT_API_AUTH_STRING")
    with TemporaryServer() as server:
        os.environ["PREFECT_API_URL"] = server.api_url
        os.environ["PREFECT_API_AUTH_STRING"] = server.auth_string  # LocalCluster workers too
        refresh_global_settings_context()
        try:
            yield server.api_url
        finally:
            drain_prefect_queues()
            os.environ.pop("PREFECT_API_URL", None)
            if saved_auth is None:
                os.environ.pop("PREFECT_API_AUTH_STRING", None)
            else:
                os.environ["PREFECT_API_AUTH_STRING"] = saved_auth
            refresh_global_settings_context()
