"""``ingest serve``: the deployments of ``prefect.yaml`` on one machine.

1. Use the configured Prefect API (``PREFECT_API_URL``) when there is one;
   otherwise start what ``prefect server start`` runs (``deployments.server_app``:
   Prefect's app, its 503s answered with a short ``Retry-After``) on loopback (SQLite under
   ``PREFECT_HOME``, or the PostgreSQL database of ``--database-url``; the
   task-run recorder batching of ``SERVER_ENV``, analytics off), with an auth string
   on every API request (``deployments.auth``) and ``--host`` to serve other machines.
2. Create the work pools that ``prefect.yaml`` names (type ``process``).
3. ``prefect deploy --all --no-prompt`` from the project folder: ``prefect.yaml``
   as it is, or with parameters merged over it (``project.with_parameters``).
4. Create the alerts of ``automations.yaml`` (Prefect automations) when
   ``INGEST_ALERT_BLOCK`` names a notification block.
5. Start a worker per pool, and wait; Ctrl-C stops everything, in reverse order.

The pieces (``PrefectServer``, ``ensure_work_pools``, ``deploy_all``, ``Worker``,
``serving``) are also what the demo of a checkout (``dev/serve_demo.py``: its local
servers, and their parameters over ``prefect.yaml``) and the tests use.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

import yaml

from deployments import alerts, auth, database, local_api, project
from deployments.local_api import stop
from ingest.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

# The task-run recorder batching and analytics off, as every command's own server has them
# (``local_api.PREFECT_DEFAULTS``, where the figures behind them are).
SERVER_ENV = dict(local_api.PREFECT_DEFAULTS)


def prefect_exe() -> str:
    """The ``prefect`` command of this environment."""
    return str(Path(sys.executable).with_name("prefect"))


def wait_healthy(api_url: str, deadline: float, proc: subprocess.Popen[Any] | None = None) -> None:
    """Poll ``/health`` until the API answers (or raise at the deadline)."""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with code {proc.returncode}")
        if local_api.healthy(api_url, 2):
            return
        time.sleep(0.2)  # polling a port that is opening, not synchronising work
    raise RuntimeError(f"no Prefect API at {api_url}")


def require_free_port(port: int, what: str) -> None:
    """Refuse to start ``what`` on a port something else already listens on."""
    with socket.socket() as s:
        s.settimeout(1)
        listening = s.connect_ex(("127.0.0.1", port)) == 0
    if listening:
        raise RuntimeError(
            f"port {port} for {what} is in use (another `ingest serve`?); stop it or "
            "choose another port"
        )


class PrefectServer:
    """What ``prefect server start`` runs (``deployments.server_app``: Prefect's UI, API
    and services, 503s with a short ``Retry-After``), on loopback in a child process.

    Its database is SQLite under ``PREFECT_HOME`` unless ``database_url`` names
    another (PostgreSQL), which only the server's environment receives. Without
    ``log`` its output goes to a temporary file whose end, secrets masked, is
    the error when it does not start (a refused password, a missing database).
    """

    def __init__(
        self,
        *,
        port: int = 4200,
        home: Path | None = None,
        env: Mapping[str, str] | None = None,
        log: TextIO | None = None,
        database_url: URL | None = None,
        host: str = auth.LOOPBACK,
        auth_string: str | None = None,
    ) -> None:
        auth.check_exposure(host, auth_string is not None)
        self.host = host
        self.port = port
        where = auth.connect_host(host)
        self.api_url = f"http://{where}:{port}/api"
        self.ui_url = f"http://{where}:{port}"
        self.env = {**os.environ, **SERVER_ENV, **(env or {})}
        self.env.pop("PREFECT_API_URL", None)
        # The server checks every request for this string (401 without it); its own
        # clients inside (the UI's settings, services) need nothing more.
        self.env.pop(auth.SERVER_VARIABLE, None)
        self.env.pop(auth.CLIENT_VARIABLE, None)
        if auth_string is not None:
            self.env[auth.SERVER_VARIABLE] = auth_string
        # The UI asks this address for the API; its default assumes port 4200. Behind a
        # proxy, the operator's PREFECT_SERVER_UI_API_URL (the proxy's address) stands.
        if not os.environ.get("PREFECT_SERVER_UI_API_URL"):
            self.env["PREFECT_SERVER_UI_API_URL"] = self.api_url
        # Links in alerts and artifacts (``flow_run|ui_url``) point at this UI.
        self.env["PREFECT_UI_URL"] = self.ui_url
        if home is not None:
            self.env["PREFECT_HOME"] = str(home)
        if database_url is not None:
            self.env.update(database.server_env(database_url))
        self.database_url = database_url
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self._own_log: IO[bytes] | None = None

    def __enter__(self) -> PrefectServer:
        require_free_port(self.port, "the Prefect server")
        # `prefect server start`, with Prefect's app inside a short Retry-After on its 503s
        # (deployments.server_app: the command takes no app of ours).
        cmd = [sys.executable, "-m", "deployments.server_app"]
        cmd += ["--host", self.host, "--port", str(self.port)]
        if self.log is None:
            self._own_log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            cmd,
            env=self.env,
            stdout=self.log or self._own_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop it
        )
        try:
            wait_healthy(self.api_url, time.monotonic() + 120, self.proc)
        except RuntimeError as exc:
            if self.proc.poll() is None:
                stop(self.proc)
            tail = local_api.output_tail(self._own_log)
            self.__exit__()
            raise RuntimeError(f"{exc}{tail}") from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop(self.proc)
        if self._own_log is not None:
            self._own_log.close()
            self._own_log = None


class Worker:
    """``prefect worker start --pool NAME`` in a child process."""

    def __init__(
        self,
        pool: str,
        env: Mapping[str, str],
        log: TextIO | None = None,
        *,
        run_once: bool = False,
    ) -> None:
        self.cmd = [prefect_exe(), "worker", "start", "--pool", pool, "--type", "process"]
        self.cmd += ["--run-once"] if run_once else []
        self.env = dict(env)
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Worker:
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=project.PROJECT_ROOT,
            env=self.env,
            stdout=self.log or None,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop(self.proc, timeout=30)


@contextlib.contextmanager
def api_settings(api_url: str, auth_string: str | None = None) -> Iterator[None]:
    """This process's Prefect client pointed at ``api_url``, with its auth string if any."""
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    updates: dict[Any, Any] = {PREFECT_API_URL: api_url}
    if auth_string is not None:
        updates[PREFECT_API_AUTH_STRING] = auth_string
    with temporary_settings(updates):
        yield


def ensure_work_pools(api_url: str, pools: list[str], auth_string: str | None = None) -> None:
    """Create each work pool (type ``process``) unless it exists."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with api_settings(api_url, auth_string), get_client(sync_client=True) as client:
        for name in pools:
            with contextlib.suppress(ObjectAlreadyExists):
                client.create_work_pool(WorkPoolCreate(name=name, type="process"))


def deploy_all(
    env: Mapping[str, str], log: TextIO | None = None, config: dict[str, Any] | None = None
) -> None:
    """``prefect deploy --all --no-prompt`` from the project folder: of ``prefect.yaml``, or
    of ``config`` (``prefect.yaml`` with other parameters) written to a temporary file; the
    entrypoints and the working folder of the runs are the project folder's either way."""
    cmd = [prefect_exe(), "--no-prompt", "deploy", "--all"]
    with tempfile.TemporaryDirectory(prefix="ingest-deploy-") as tmp:
        if config is not None:
            path = Path(tmp) / "prefect.yaml"
            path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
            cmd += ["--prefect-file", str(path)]
        proc = subprocess.run(
            cmd,
            cwd=project.PROJECT_ROOT,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
    if log is not None:
        log.write(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"prefect deploy --all failed:\n{proc.stdout[-4000:]}")


def create_alerts(api_url: str, auth_string: str | None = None) -> list[str]:
    """The automations of ``automations.yaml`` on the server at ``api_url`` (none without
    ``INGEST_ALERT_BLOCK``)."""
    with api_settings(api_url, auth_string):
        return alerts.apply(Settings())


@contextlib.contextmanager
def serving(
    *,
    port: int = 4200,
    database_url: str | None = None,
    echo: Any = print,
    home: Path | None = None,
    overrides: dict[str, Any] | None = None,
    host: str = auth.LOOPBACK,
    api_auth: bool = True,
) -> Iterator[dict[str, Any]]:
    """Everything ``ingest serve`` starts, stopped in reverse order on exit.

    The local server listens on ``host`` (loopback by default) and, unless ``api_auth``
    is false, checks an auth string on every request (``deployments.auth``: the
    operator's, else the stored one, else a new one); a server beyond loopback without
    one is refused. The workers get it as ``PREFECT_API_AUTH_STRING``, the commands of
    this machine through the advert.

    ``database_url`` (else ``INGEST_SERVE_DATABASE_URL``, else Prefect's
    ``PREFECT_SERVER_DATABASE_CONNECTION_URL``) is the database of the local Prefect
    server; a configured API has its own, so the two together are refused. ``home`` is
    the Prefect home of that local server (its SQLite database) when one is started,
    instead of ``PREFECT_HOME``. ``overrides`` are parameters merged over those of
    ``prefect.yaml`` as it is deployed (``project.with_parameters``).
    """
    from prefect.settings import get_current_settings

    config = project.load()
    if overrides is not None:
        config = project.with_parameters(config, overrides)
    if database_url is None:
        database_url = database.configured_url(Settings())
    db = database.parse(database_url) if database_url else None
    with ExitStack() as stack:
        env = {**os.environ, **SERVER_ENV}
        env.pop(database.ENV_NAME, None)  # the server's alone: not the workers' business
        api_url = get_current_settings().api.url  # the environment's or the profile's
        if not api_url and db is None and os.environ.get(database.ENV_NAME):
            # Prefect's own variable: the database the server would use anyway.
            db = database.parse(os.environ[database.ENV_NAME])
        if api_url and db is not None:
            raise database.DatabaseUrlError(
                f"a database URL ({database.describe(db)}) is for the Prefect server that "
                f"`ingest serve` starts, but the configured Prefect API {api_url} is used "
                "instead; unset PREFECT_API_URL, or give that server the database"
            )
        auth_string: str | None = None
        auth_path: Path | None = None
        if api_url:
            echo(f"Using the configured Prefect API at {api_url}")
            wait_healthy(api_url, time.monotonic() + 30)
            ui_url = api_url.removesuffix("/api")
        else:
            auth.check_exposure(host, api_auth)
            if home is not None:
                home.mkdir(parents=True, exist_ok=True)
            if api_auth:
                auth_path = auth.auth_file(home)
                auth_string, _origin = auth.ensure_auth_string(auth_path, auth.configured())
            where = f", Prefect home {home}" if home else ""
            if db is not None:
                where = f" {database.describe(db)}{where}"
            echo(
                f"Starting a local Prefect server on http://{auth.connect_host(host)}:{port} "
                f"({database.kind(db)}{where}; listening on {host})"
            )
            server = stack.enter_context(
                PrefectServer(
                    port=port, home=home, database_url=db, host=host, auth_string=auth_string
                )
            )
            api_url, ui_url = server.api_url, server.ui_url
            if home is not None:
                env["PREFECT_HOME"] = str(home)
            if auth_path is not None:
                echo(auth.how_to_join(auth_path))
            else:
                echo("API auth: off (--no-auth): any local user can run flows on this server")
            env.pop(auth.SERVER_VARIABLE, None)  # the server's alone
            if auth_string is not None:
                env[auth.CLIENT_VARIABLE] = auth_string  # the workers and their flow runs
        env["PREFECT_API_URL"] = api_url
        # `ingest` commands use it (and read the auth string from the file it names)
        stack.enter_context(local_api.advertise(api_url, auth_file=auth_path))
        env.setdefault("PREFECT_UI_URL", ui_url)
        pools = project.work_pools(config)
        ensure_work_pools(api_url, pools, auth_string)
        merged = ", parameters overridden," if overrides is not None else ""
        echo(f"Work pools: {', '.join(pools)}; deploying prefect.yaml{merged} ...")
        deploy_all(env, config=config if overrides is not None else None)
        names = [d["name"] for d in project.deployments(config)]
        echo(f"Deployed: {', '.join(names)}")
        created = create_alerts(api_url, auth_string)
        if created:
            echo(f"Alerts ({Settings().alert.block}): {', '.join(created)}")
        else:
            echo("Alerts: off (set INGEST_ALERT_BLOCK to a notification block to get them)")
        workers = [stack.enter_context(Worker(p, env)) for p in pools]
        echo(f"Worker started on {', '.join(pools)}. Open {ui_url} ; Ctrl-C stops everything.")
        yield {
            "api_url": api_url,
            "ui_url": ui_url,
            "workers": workers,
            "auth_file": auth_path,
        }


def run(*, echo: Any = print, **options: Any) -> int:
    """``ingest serve``: ``serving(**options)`` until Ctrl-C or SIGTERM (or a worker
    exits); returns the exit code."""
    return until_stopped(lambda: serving(echo=echo, **options), echo=echo)


def until_stopped(
    start: Callable[[], AbstractContextManager[dict[str, Any]]], echo: Any = print
) -> int:
    """Enter ``start()`` (``serving``, or more around it) and wait until Ctrl-C or SIGTERM,
    or until one of its workers exits; returns the exit code."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Explicit, because a shell starts background jobs with SIGINT ignored.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        with start() as state:
            while all(w.proc and w.proc.poll() is None for w in state["workers"]):
                time.sleep(0.5)  # waiting for Ctrl-C; nothing to synchronise
            echo("A worker exited; stopping.")
            return 1
    except KeyboardInterrupt:
        echo("Stopped.")
        return 0
