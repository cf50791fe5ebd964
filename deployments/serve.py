"""``ingest serve``: the deployments of ``prefect.yaml`` on one machine.

1. Use the configured Prefect API (``PREFECT_API_URL``) when there is one;
   otherwise start ``prefect server start`` on loopback (SQLite under
   ``PREFECT_HOME``, or the PostgreSQL database of ``--database-url``; the
   task-run recorder batching of ``SERVER_ENV``, analytics off).
2. Create the work pools that ``prefect.yaml`` names (type ``process``).
3. With ``--demo``, start the local S3-compatible and GitHub-compatible servers
   on the ports of the nightly deployment's default parameters, and seed them.
4. ``prefect deploy --all --no-prompt`` from the project folder.
5. Create the alerts of ``automations.yaml`` (Prefect automations) when
   ``INGEST_ALERT_BLOCK`` names a notification block.
6. Start a worker per pool, and wait; Ctrl-C stops everything, in reverse order.

With ``--demo`` and no configured API, the local server keeps its database in
its own Prefect home, ``<data folder>/prefect``, so the demo's dashboard holds
the demo's runs only.

The pieces (``PrefectServer``, ``DemoServers``, ``ensure_work_pools``,
``deploy_all``, ``Worker``) are also what the tests use.
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
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import boto3

from deployments import alerts, database, local_api, project
from ingest.redact import redact
from ingest.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

# The task-run recorder batching: with Prefect's defaults a SQLite server took 75-90 s to
# record a 2,000-task run and answered "database is locked" meanwhile, 4-5 s with these
# (benchmarks/findings.md, "Prefect"); analytics off.
SERVER_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
}
DEMO_PULL_REQUESTS = 120  # per demo repository without a count in dev.github_demo


def prefect_exe() -> str:
    """The ``prefect`` command of this environment."""
    return str(Path(sys.executable).with_name("prefect"))


def configured_api_url() -> str | None:
    """``PREFECT_API_URL`` from the environment or the active Prefect profile."""
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return str(url) if url else None


def wait_healthy(api_url: str, deadline: float, proc: subprocess.Popen[Any] | None = None) -> None:
    """Poll ``/health`` until the API answers (or raise at the deadline)."""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{api_url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
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


def stop(proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    """SIGINT (a clean shutdown for prefect and uvicorn), then terminate, then kill."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    proc.wait()


class PrefectServer:
    """``prefect server start`` on loopback in a child process.

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
    ) -> None:
        self.port = port
        self.api_url = f"http://127.0.0.1:{port}/api"
        self.ui_url = f"http://127.0.0.1:{port}"
        self.env = {**os.environ, **SERVER_ENV, **(env or {})}
        self.env.pop("PREFECT_API_URL", None)
        # The UI asks this address for the API; its default assumes port 4200.
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
        self._own_log: Any = None

    def __enter__(self) -> PrefectServer:
        require_free_port(self.port, "the Prefect server")
        cmd = [prefect_exe(), "server", "start", "--host", "127.0.0.1", "--port", str(self.port)]
        out = self.log
        if out is None:
            out = self._own_log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            cmd,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop it
        )
        try:
            wait_healthy(self.api_url, time.monotonic() + 120, self.proc)
        except RuntimeError as exc:
            if self.proc.poll() is None:
                stop(self.proc)
            tail = self._output_tail()
            self.__exit__()
            raise RuntimeError(f"{exc}{tail}") from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def _output_tail(self, lines: int = 12) -> str:
        """The last lines of the server's own output (secrets masked), when this object
        keeps it: the reason it stopped."""
        if self._own_log is None:
            return ""
        self._own_log.seek(0)
        tail = "\n".join(self._own_log.read().strip().splitlines()[-lines:])
        return f"; its output ends with:\n{redact(tail)}" if tail else ""

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


def ensure_work_pools(api_url: str, pools: list[str]) -> None:
    """Create each work pool (type ``process``) unless it exists."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        for name in pools:
            with contextlib.suppress(ObjectAlreadyExists):
                client.create_work_pool(WorkPoolCreate(name=name, type="process"))


def deploy_all(env: Mapping[str, str], log: TextIO | None = None) -> None:
    """``prefect deploy --all --no-prompt`` from the project folder."""
    proc = subprocess.run(
        [prefect_exe(), "--no-prompt", "deploy", "--all"],
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


class DemoServers:
    """The local S3-compatible, GitHub-compatible and ticket API servers the default
    parameters of ``prefect.yaml`` point at, seeded with the demo data."""

    def __init__(self, config: dict[str, Any], *, any_port: bool = False) -> None:
        """``any_port`` serves on free ports instead (tests, which may run side by side);
        ``endpoints`` then holds the URLs actually served."""
        self.endpoints = project.demo_endpoints(config)
        self.any_port = any_port
        self.stack = ExitStack()

    def __enter__(self) -> DemoServers:
        from dev import samples
        from dev.github_demo import DEMO_REPOS
        from dev.rest_demo import tickets_server
        from dev.servers.github import DevGitHub
        from dev.servers.s3 import DevServer

        e = self.endpoints
        try:
            s3_port = project.loopback_port(e["s3_url"])
            if s3_port:
                if not self.any_port:
                    require_free_port(s3_port, "the demo S3 server")
                server = self.stack.enter_context(
                    DevServer(port=None if self.any_port else s3_port)
                )
                e["s3_url"] = server.url
                client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
                with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                    client.create_bucket(Bucket=e["bucket"])
                for key, body in samples.documents().items():
                    client.put_object(Bucket=e["bucket"], Key=e["prefix"] + key, Body=body)
            gh_port = project.loopback_port(e["github_url"])
            if gh_port:
                if not self.any_port:
                    require_free_port(gh_port, "the demo GitHub server")
                repos = {r: DEMO_REPOS.get(r, DEMO_PULL_REQUESTS) for r in e["repos"]}
                github = DevGitHub(port=None if self.any_port else gh_port, repos=repos)
                e["github_url"] = self.stack.enter_context(github).url
            rest_port = project.loopback_port(e["rest_url"])
            if rest_port:
                if not self.any_port:
                    require_free_port(rest_port, "the demo ticket API")
                api = tickets_server(port=None if self.any_port else rest_port)
                e["rest_url"] = self.stack.enter_context(api).url
        except BaseException:
            self.stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def demo_home() -> Path:
    """The Prefect home of ``ingest serve --demo``: ``<data folder>/prefect``."""
    home = (Settings().local_path / "prefect").resolve()
    home.mkdir(parents=True, exist_ok=True)
    return home


def create_alerts(api_url: str) -> list[str]:
    """The automations of ``automations.yaml`` on the server at ``api_url`` (none without
    ``INGEST_ALERT_BLOCK``)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        return alerts.apply(Settings())


def demo_credentials() -> dict[str, str]:
    """The local S3 server accepts any key; these never reach AWS. The demo ticket API's
    key is the one its source file reads (``TICKETS_API_KEY``), a demo value."""
    from dev.rest_demo import DEMO_KEY

    return {
        "AWS_ACCESS_KEY_ID": "demo",
        "AWS_SECRET_ACCESS_KEY": "demo",
        "AWS_DEFAULT_REGION": "us-east-1",
        "TICKETS_API_KEY": DEMO_KEY,
    }


@contextlib.contextmanager
def serving(
    *,
    demo: bool = False,
    port: int = 4200,
    database_url: str | None = None,
    echo: Any = print,
) -> Iterator[dict[str, Any]]:
    """Everything ``ingest serve`` starts, stopped in reverse order on exit.

    ``database_url`` (else ``INGEST_SERVE_DATABASE_URL``, else Prefect's
    ``PREFECT_SERVER_DATABASE_CONNECTION_URL``) is the database of the local Prefect
    server; a configured API has its own, so the two together are refused.
    """
    config = project.load()
    if database_url is None:
        secret = Settings().serve_database_url
        database_url = secret.get_secret_value() if secret else None
    db = database.parse(database_url) if database_url else None
    with ExitStack() as stack:
        env = {**os.environ, **SERVER_ENV}
        env.pop(database.ENV_NAME, None)  # the server's alone: not the workers' business
        api_url = configured_api_url()
        if not api_url and db is None and os.environ.get(database.ENV_NAME):
            # Prefect's own variable: the database the server would use anyway.
            db = database.parse(os.environ[database.ENV_NAME])
        if api_url and db is not None:
            raise database.DatabaseUrlError(
                f"a database URL ({database.describe(db)}) is for the Prefect server that "
                f"`ingest serve` starts, but the configured Prefect API {api_url} is used "
                "instead; unset PREFECT_API_URL, or give that server the database"
            )
        if api_url:
            echo(f"Using the configured Prefect API at {api_url}")
            wait_healthy(api_url, time.monotonic() + 30)
            ui_url = api_url.removesuffix("/api")
        else:
            # The demo's dashboard shows the demo's runs only: its own Prefect home (and
            # SQLite database) under the data folder, not the shared ~/.prefect.
            home = demo_home() if demo else None
            where = f", Prefect home {home}" if home else ""
            if db is not None:
                where = f" {database.describe(db)}{where}"
            echo(
                f"Starting a local Prefect server on http://127.0.0.1:{port} "
                f"({database.kind(db)}{where})"
            )
            server = stack.enter_context(PrefectServer(port=port, home=home, database_url=db))
            api_url, ui_url = server.api_url, server.ui_url
            if home is not None:
                env["PREFECT_HOME"] = str(home)
        env["PREFECT_API_URL"] = api_url
        stack.enter_context(local_api.advertise(api_url))  # `ingest` commands use it
        env.setdefault("PREFECT_UI_URL", ui_url)
        if demo:
            env.update(demo_credentials())
            os.environ.update(demo_credentials())
            servers = stack.enter_context(DemoServers(config))
            e = servers.endpoints
            echo(f"Demo S3 server on {e['s3_url']} (s3://{e['bucket']}/{e['prefix']}, seeded)")
            echo(f"Demo GitHub server on {e['github_url']} ({', '.join(e['repos'])})")
            if e["rest_url"]:
                echo(f"Demo ticket API on {e['rest_url']} (for {e['rest_source']})")
        pools = project.work_pools(config)
        ensure_work_pools(api_url, pools)
        echo(f"Work pools: {', '.join(pools)}; deploying prefect.yaml ...")
        deploy_all(env)
        names = [d["name"] for d in project.deployments(config)]
        echo(f"Deployed: {', '.join(names)}")
        created = create_alerts(api_url)
        if created:
            echo(f"Alerts ({Settings().alert_block}): {', '.join(created)}")
        else:
            echo("Alerts: off (set INGEST_ALERT_BLOCK to a notification block to get them)")
        workers = [stack.enter_context(Worker(p, env)) for p in pools]
        echo(f"Worker started on {', '.join(pools)}. Open {ui_url} ; Ctrl-C stops everything.")
        yield {"api_url": api_url, "ui_url": ui_url, "workers": workers}


def run(
    *, demo: bool = False, port: int = 4200, database_url: str | None = None, echo: Any = print
) -> int:
    """Serve until Ctrl-C or SIGTERM (or a worker exits); returns the exit code."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Explicit, because a shell starts background jobs with SIGINT ignored.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        with serving(demo=demo, port=port, database_url=database_url, echo=echo) as state:
            while all(w.proc and w.proc.poll() is None for w in state["workers"]):
                time.sleep(0.5)  # waiting for Ctrl-C; nothing to synchronise
            echo("A worker exited; stopping.")
            return 1
    except KeyboardInterrupt:
        echo("Stopped.")
        return 0
