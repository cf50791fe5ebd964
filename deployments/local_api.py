"""The Prefect API an ``ingest`` command talks to, and a server for it when there is none.

In order:

1. A configured API (``PREFECT_API_URL`` in the environment or the active
   Prefect profile) always wins.
2. While ``ingest serve`` runs, it says where its API is in
   ``$PREFECT_HOME/ingest-serve.json`` (address and process id), and the
   commands use that API: their runs show up in the same UI, with no start-up.
   A file left by a process that is gone, or an API that does not answer within
   half a second, is ignored.
3. Otherwise a local server kept for the next commands (``KeptServer``): the first
   command that needs one starts it in a process of its own, which outlives the
   command, and says so; the next commands find it through
   ``$PREFECT_HOME/ingest-local-server.json`` and start nothing (a command costs
   ``import prefect`` and its work, not ~8 s of server start-up each time). It stops
   itself once no command has used it for ``INGEST_SERVE_LOCAL_SERVER_IDLE`` seconds
   (30 min), and ``ingest server stop`` stops it at once. It is a ``TemporaryServer``
   (below) run by ``python -m deployments.local_api keep``.
4. With ``INGEST_SERVE_LOCAL_SERVER_IDLE=0``, the command starts a local server of its own
   (``TemporaryServer``) and stops it after the run. Not Prefect's own temporary server, for two
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

import argparse
import fcntl
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from deployments import auth
from ingest.errors import IngestError

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
    return auth.prefect_home() / FILE_NAME


def advertise(api_url: str, auth_file: Path | None = None) -> AbstractContextManager[Path]:
    """Name ``api_url`` as this machine's running API while the block runs, and the file
    that holds its auth string (the path, never the string: ``deployments.auth``)."""
    named = {} if auth_file is None else {"auth_file": str(auth_file)}
    return advertised(advert_path(), {"api_url": api_url, **named})


@contextmanager
def advertised(path: Path, advert: dict[str, Any]) -> Iterator[Path]:
    """``advert``, with this process's id, at ``path`` while the block runs (written
    whole: a reader sees the old file or the new); removed at its end unless another
    process has replaced it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({**advert, "pid": os.getpid()}))
    tmp.replace(path)
    try:
        yield path
    finally:
        if read_json(path).get("pid") == os.getpid():
            path.unlink(missing_ok=True)


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


def read_json(path: Path) -> dict[str, Any]:
    """An advert as written (empty when there is none)."""
    try:
        advert = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return advert if isinstance(advert, dict) else {}


def live_advert(path: Path, prefixes: tuple[str, ...], timeout: float) -> dict[str, Any] | None:
    """The advert at ``path``, if its API is an address of ``prefixes``, its process lives
    and its API answers."""
    advert = read_json(path)
    api_url = advert.get("api_url")
    if not isinstance(api_url, str) or not api_url.startswith(prefixes):
        return None
    if not _alive(advert.get("pid")) or not healthy(api_url, timeout):
        return None
    return advert


def find(timeout: float = 0.5) -> str | None:
    """The API a running ``ingest serve`` advertises, if its process lives and it answers."""
    advert = live_advert(advert_path(), ("http://", "https://"), timeout)
    return None if advert is None else str(advert["api_url"])


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
    named = read_json(advert_path()).get("auth_file")
    if not isinstance(named, str):
        return False
    try:
        value = auth.read_auth_file(Path(named))
    except (auth.ServeAuthError, OSError) as exc:
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


class ServerStartError(IngestError, RuntimeError):
    """The command's own Prefect server did not start; the message ends with its output."""


class TemporaryServer:
    """A Prefect API server for one command: loopback, a free port, no UI, the services of
    Prefect's own temporary server, the database of ``PREFECT_HOME``.

    ``with TemporaryServer() as server: server.api_url``. It runs in a session of its own
    (a Ctrl-C in the terminal reaches the command, not the server) and its output goes to a
    temporary file whose end is the error when it does not start.
    """

    def __init__(self, *, timeout: float | None = None, env: Mapping[str, str] | None = None):
        self.timeout = timeout if timeout is not None else startup_timeout()
        self.env = {**os.environ, **(env or {})}
        prefect_defaults(self.env)
        self.env.pop("PREFECT_API_URL", None)
        # An auth string of this server alone: other users of the machine reach its port
        # too, and could otherwise create runs on it while the command runs.
        self.auth_string = secrets.token_urlsafe(32)
        self.env.pop(auth.CLIENT_VARIABLE, None)
        self.env[auth.SERVER_VARIABLE] = self.auth_string
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
        # Prefect's app, its 503s with a short Retry-After (deployments.server_app).
        cmd = [
            sys.executable, "-m", "uvicorn",
            "--app-dir", str(Path(prefect.__file__).parent.parent),
            "--factory", "deployments.server_app:create_app",
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
                if healthy(self.api_url, 2.0):
                    return
                time.sleep(0.1)  # polling a port that is opening, not synchronising work
            else:
                raise ServerStartError(
                    f"the local Prefect server did not answer within {self.timeout:.0f} s "
                    f"(raise {STARTUP_TIMEOUT_VARIABLE}, or set PREFECT_API_URL to a running "
                    f"server){output_tail(self._out)}"
                )
            if b"address already in use" not in self._output().lower():
                break
        code = self.proc.returncode if self.proc else None
        raise ServerStartError(
            f"the local Prefect server exited with code {code}{output_tail(self._out)}"
        )

    def _output(self) -> bytes:
        if self._out is None:
            return b""
        self._out.seek(0)
        return self._out.read()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop(self.proc, 10, (signal.SIGTERM,))  # uvicorn's graceful shutdown
        self.proc = None
        if self._out is not None:
            self._out.close()
            self._out = None


def output_tail(out: IO[bytes] | None, lines: int = 12) -> str:
    """The end of what a server wrote to ``out`` (secrets masked), as an error's last
    words: the reason it stopped."""
    if out is None:
        return ""
    from ingest.redact import redact

    out.seek(0)
    tail = "\n".join(out.read().decode("utf-8", "replace").strip().splitlines()[-lines:])
    return f"; its output ends with:\n{redact(tail)}" if tail else ""


def stop(
    proc: subprocess.Popen[Any],
    timeout: float = 20,
    signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM),
) -> None:
    """Each of ``signals`` in turn (SIGINT: a clean shutdown for prefect and uvicorn), each
    given ``timeout`` seconds, then kill."""
    if proc.poll() is not None:
        return
    for sig in signals:
        with suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    proc.wait()


def healthy(api_url: str, timeout: float) -> bool:
    """Whether the API at ``api_url`` answers its ``/health`` within ``timeout``."""
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


# ---------------------------------------------------------------- the kept local server

KEPT_FILE = "ingest-local-server.json"
KEPT_AUTH = "ingest-local-server-auth"
KEPT_LOG = "ingest-local-server.log"
KEPT_LOCK = "ingest-local-server.lock"
# Seconds between the keeper's looks at its server and at when a command last used it.
KEEPER_TICK = 5.0


def kept_path() -> Path:
    """``$PREFECT_HOME/ingest-local-server.json``: where the kept server says where it is."""
    return auth.prefect_home() / KEPT_FILE


def local_server_idle() -> float:
    """``INGEST_SERVE_LOCAL_SERVER_IDLE``: seconds the kept server stays unused (0: none)."""
    from ingest.settings import Settings

    return float(Settings().serve.local_server_idle)


def find_kept(timeout: float = 0.5) -> dict[str, Any] | None:
    """The kept server's advert, if its keeper lives and its API answers."""
    return live_advert(kept_path(), ("http://127.0.0.1:",), timeout)


def used_now() -> None:
    """Tell the keeper a command uses its server now (the advert's time is the last use)."""
    with suppress(OSError):
        os.utime(kept_path())


@contextmanager
def _kept_lock() -> Iterator[None]:
    """One command at a time finds or starts the kept server: two commands started
    together start one server, not two."""
    home = auth.prefect_home()
    home.mkdir(parents=True, exist_ok=True)
    with open(home / KEPT_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def database_is_new() -> bool:
    """Prefect's SQLite database under PREFECT_HOME does not exist yet (a first start then
    creates and migrates it); False when another database is configured."""
    if any(
        os.environ.get(v)
        for v in (
            "PREFECT_API_DATABASE_CONNECTION_URL",
            "PREFECT_SERVER_DATABASE_CONNECTION_URL",
        )
    ):
        return False
    return not (auth.prefect_home() / "prefect.db").exists()


def start_kept(idle: float, echo: Any = None) -> dict[str, Any]:
    """Start the kept server's keeper, detached, and wait until its API answers."""
    if echo is not None:
        first = "; its first start creates its database" if database_is_new() else ""
        echo(
            f"starting a local Prefect server, kept for the next commands until unused for "
            f"{idle / 60:g} min (ingest server stop stops it{first})"
        )
    timeout = startup_timeout()
    log_path = auth.prefect_home() / KEPT_LOG
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deployments.local_api", "keep", "--idle", str(idle)],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the terminal's Ctrl-C is the command's, not the server's
            cwd=str(Path(__file__).resolve().parent.parent),
            env=_keeper_env(),
        )
    deadline = time.monotonic() + timeout + 5
    while time.monotonic() < deadline:
        advert = read_json(kept_path())
        if advert.get("pid") == proc.pid and (found := find_kept(2.0)) is not None:
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.1)  # polling for the server's port to open, not synchronising work
    else:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    with open(log_path, "rb") as log_file:
        tail = output_tail(log_file)
    raise ServerStartError(f"the local Prefect server did not start (its log: {log_path}){tail}")


def _keeper_env() -> dict[str, str]:
    """The keeper's environment: Prefect's settings and what a process needs, not the
    command's credentials (AWS_*, tokens), which a server outliving it has no use for."""
    keep = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith(("PREFECT_", "PYTHON"))}
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_API_AUTH_STRING", None)
    env["PYTHONPATH"] = _pythonpath()
    return env


def _pythonpath() -> str:
    """This checkout first, so the keeper runs the same code as the command."""
    here = str(Path(__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH")
    return here if not rest else f"{here}{os.pathsep}{rest}"


def stop_kept(timeout: float = 15.0) -> int | None:
    """Stop the kept server (its keeper stops the server and removes its advert); the
    keeper's process id, or None when none runs."""
    pid = read_json(kept_path()).get("pid")
    if not _alive(pid):
        kept_path().unlink(missing_ok=True)
        return None
    assert isinstance(pid, int)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid) and kept_path().exists():
        time.sleep(0.05)  # waiting for a process to end, not synchronising work
    return pid


def keep(idle: float) -> int:
    """``python -m deployments.local_api keep``: run a ``TemporaryServer`` until no command
    used it for ``idle`` seconds, or SIGTERM (``ingest server stop``); say where it is in
    the advert meanwhile, its auth string in a file of this user only."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    path, auth_path = kept_path(), auth.prefect_home() / KEPT_AUTH
    with TemporaryServer() as server:
        auth.write_auth_file(auth_path, server.auth_string)
        advert = {"api_url": server.api_url, "auth_file": str(auth_path), "idle": idle}
        try:
            with advertised(path, advert):
                print(f"serving {server.api_url}, pid {os.getpid()}", flush=True)
                while not stopping.wait(min(KEEPER_TICK, max(idle, 0.1))):
                    assert server.proc is not None
                    if server.proc.poll() is not None:
                        print("the server exited", flush=True)
                        return 1
                    try:
                        unused = time.time() - path.stat().st_mtime
                        named = json.loads(path.read_text()).get("pid")
                    except (OSError, ValueError):
                        print("its advert was removed: stopping", flush=True)
                        return 0
                    if named != os.getpid():  # another keeper took over (this one seemed down)
                        print(f"pid {named} serves the commands now: stopping", flush=True)
                        return 0
                    if unused > idle:
                        print(f"unused for {unused:.0f} s: stopping", flush=True)
                        return 0
                print("stopped", flush=True)
                return 0
        finally:
            auth_path.unlink(missing_ok=True)


@contextmanager
def _using(api_url: str, auth_string: str | None) -> Iterator[str]:
    """This process's Prefect pointed at ``api_url`` for the block, then as it was."""
    from prefect.context import refresh_global_settings_context

    saved = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING")}
    os.environ["PREFECT_API_URL"] = api_url
    if auth_string is not None:
        os.environ["PREFECT_API_AUTH_STRING"] = auth_string  # LocalCluster workers too
    refresh_global_settings_context()
    try:
        yield api_url
    finally:
        drain_prefect_queues()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        refresh_global_settings_context()


def kept_api(echo: Any = None, idle: float | None = None) -> tuple[str, str | None]:
    """The kept server's address and auth string: found, else started (see the module's
    docstring)."""
    idle = local_server_idle() if idle is None else idle
    with _kept_lock():
        # a busy machine's server may take a while to answer: not taken for gone at once
        advert = find_kept(timeout=3.0) or start_kept(idle, echo)
    used_now()
    try:
        auth_string = auth.read_auth_file(Path(str(advert.get("auth_file", ""))))
    except (auth.ServeAuthError, OSError) as exc:
        raise ServerStartError(f"the local Prefect server's auth file: {exc}") from None
    return str(advert["api_url"]), auth_string


@contextmanager
def command_api(echo: Any = None) -> Iterator[str | None]:
    """The Prefect API for this command's runs (see the module's docstring); yields its
    address, or None when the user's configuration names one.

    A server started here is stopped when the block ends, after the run's logs and events
    are sent. ``echo`` (a function of one string) says that one is being started.
    """
    from prefect.settings import get_current_settings

    prefect_defaults()
    configured = os.environ.get("PREFECT_API_URL")
    found = use_running_serve()  # None when the environment or the active profile names one
    if configured or found is not None or get_current_settings().api.url:
        yield found
        return
    if local_server_idle() > 0:
        api_url, auth_string = kept_api(echo)
        try:
            with _using(api_url, auth_string):
                yield api_url
        finally:
            used_now()  # its idle time counts from the command's end
        return
    if echo is not None:
        first = "its first start creates its database; " if database_is_new() else ""
        echo(
            f"starting a local Prefect server for this command ({first}set PREFECT_API_URL, "
            "or keep `ingest serve` running, to skip this)"
        )
    with TemporaryServer() as server, _using(server.api_url, server.auth_string):
        yield server.api_url


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m deployments.local_api",
        description="keep: run the local Prefect server kept for the ingest commands.",
    )
    sub = p.add_subparsers(dest="what", required=True)
    k = sub.add_parser("keep", help="serve until unused for --idle seconds, or SIGTERM")
    k.add_argument("--idle", type=float, default=1800.0)
    a = p.parse_args(argv)
    prefect_defaults()
    return keep(a.idle)


if __name__ == "__main__":
    sys.exit(main())
