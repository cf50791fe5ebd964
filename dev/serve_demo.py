"""``ingest serve`` with the demo's local servers, from a checkout of the project:
``python -m dev.serve_demo [--port N] [--database-url URL] [--s3-port N] [--github-port N]
[--api-port N] [--free-ports]`` (``make serve SERVE_ARGS="--demo --s3-port 9100"``).

1. Start the local S3-compatible server, the GitHub-compatible server and the ticket
   API of ``sources/tickets.yaml`` on the ports of the URLs of ``prefect.demo.yaml``,
   seed them, and give this process (and so the workers) their demo credentials.
2. Serve as ``ingest serve`` does (``deployments.serve.serving``), with the parameters
   of ``prefect.demo.yaml`` merged over those of ``prefect.yaml`` when it deploys:
   ``prefect.yaml`` itself keeps production's defaults.

Without a configured Prefect API, the local Prefect server keeps its database in a
Prefect home of its own, ``<data folder>/prefect``, so the demo's dashboard holds the
demo's runs only. ``DemoServers`` is also what the deployment tests start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import yaml

from deployments import database, local_api, project, serve
from ingest.redact import redact
from ingest.settings import Settings

OVERRIDES = Path(__file__).with_name("prefect.demo.yaml")
DEMO_PULL_REQUESTS = 120  # per demo repository without a count in dev.github_demo


def load_overrides(path: Path = OVERRIDES) -> dict[str, Any]:
    """The demo's parameters for the deployments of ``prefect.yaml`` (anchors resolved)."""
    with path.open(encoding="utf-8") as f:
        return dict(yaml.safe_load(f))


def credentials() -> dict[str, str]:
    """The local S3 server accepts any key; these never reach AWS. The demo ticket API's
    key is the one its source file reads (``TICKETS_API_KEY``), a demo value, which the
    worker lets a deployment's run read (``INGEST_SOURCE_ENV_NAMES``, ingest.security)."""
    from dev.rest_demo import DEMO_KEY

    return {
        "AWS_ACCESS_KEY_ID": "demo",
        "AWS_SECRET_ACCESS_KEY": "demo",
        "AWS_DEFAULT_REGION": "us-east-1",
        "TICKETS_API_KEY": DEMO_KEY,
        "INGEST_SOURCE_ENV_NAMES": '["GITHUB_TOKEN", "TICKETS_API_KEY"]',
    }


def allowed_hosts(endpoints: dict[str, Any]) -> dict[str, str]:
    """The worker's ``INGEST_ALLOWED_HOSTS`` for the demo's API servers: a worker trusts its
    own configuration, not the defaults the Prefect server stores (ingest.security), and
    the demo's loopback APIs are in neither ``prefect.yaml`` nor the worker's settings."""
    urls = [endpoints[k] for k in ("github_url", "rest_url") if endpoints.get(k)]
    return {"INGEST_ALLOWED_HOSTS": json.dumps(urls)}


def demo_endpoints(config: dict[str, Any]) -> dict[str, Any]:
    """What the demo serves, read from ``config`` (``prefect.yaml`` with the demo's
    parameters): the nightly deployment's S3 endpoint, bucket and prefix, GitHub API root
    and repositories, and the rest-ingest deployment's API root (the demo ticket API)."""
    params = project.deployment(config, "nightly").get("parameters") or {}
    rest: dict[str, Any] = {}
    if any(d["name"] == "rest-ingest" for d in project.deployments(config)):
        rest = project.deployment(config, "rest-ingest").get("parameters") or {}
    return {
        "s3_url": params.get("endpoint_url"),
        "bucket": params["bucket"],
        "prefix": params.get("prefix", ""),
        "github_url": params.get("github_base_url"),
        "repos": list(params.get("repos") or []),
        "rest_url": rest.get("base_url"),
        "rest_source": rest.get("source"),
    }


def loopback_port(url: str | None) -> int | None:
    """The port of a loopback URL (a demo server to start), else None."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        return None
    return parts.port


# The demo's servers: the endpoint each serves, what it is called, the option moving it.
SERVERS: dict[str, int | None] = {"s3_url": None, "github_url": None, "rest_url": None}
SERVER_NAMES = {
    "s3_url": "the demo S3 server",
    "github_url": "the demo GitHub server",
    "rest_url": "the demo ticket API",
}
SERVER_OPTIONS = {"s3_url": "--s3-port", "github_url": "--github-port", "rest_url": "--api-port"}


class DemoServers:
    """The local S3-compatible, GitHub-compatible and ticket API servers that the demo's
    parameters (``prefect.demo.yaml``) point at, seeded with the demo data."""

    def __init__(
        self,
        overrides: dict[str, Any] | None = None,
        *,
        any_port: bool = False,
        ports: dict[str, int | None] | None = None,
    ) -> None:
        """``any_port`` serves on free ports instead (tests, which may run side by side;
        ``--free-ports``); ``ports`` ({"s3_url": 9100, ...}) moves a server to the port
        given. ``endpoints`` then holds the URLs actually served, and ``overrides`` the
        demo's parameters with those URLs (what the deployments are created with)."""
        self.declared = load_overrides() if overrides is None else overrides
        config = project.with_parameters(project.load(), self.declared)
        self.endpoints = demo_endpoints(config)
        self.any_port = any_port
        self.ports = {
            name: port or loopback_port(self.endpoints[name]) for name, port in SERVERS.items()
        } | {k: v for k, v in (ports or {}).items() if v}
        self.served: dict[str, str] = {}  # declared URL -> URL served
        self.stack = ExitStack()

    def check_ports(self) -> None:
        """Refuse, before anything starts, a port of a demo server something listens on."""
        if self.any_port:
            return
        for name, what in SERVER_NAMES.items():
            port = self.ports.get(name)
            if port and loopback_port(self.endpoints[name]):
                try:
                    serve.require_free_port(port, what)
                except RuntimeError:
                    raise RuntimeError(
                        f"port {port} for {what} is in use; stop what listens there, or move "
                        f"the server with {SERVER_OPTIONS[name]} N (or --free-ports)"
                    ) from None

    def port_of(self, name: str) -> int | None:
        """The port to serve ``name`` on: None (a free one) with ``any_port``."""
        return None if self.any_port else self.ports.get(name)

    def __enter__(self) -> DemoServers:
        from dev import samples
        from dev.github_demo import DEMO_REPOS
        from dev.rest_demo import tickets_server
        from dev.servers.github import DevGitHub
        from dev.servers.s3 import DevServer

        e = self.endpoints
        self.check_ports()
        try:
            if loopback_port(e["s3_url"]):
                server = self.stack.enter_context(DevServer(port=self.port_of("s3_url")))
                self._serve(e, "s3_url", server.url)
                client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
                with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                    client.create_bucket(Bucket=e["bucket"])
                for key, body in samples.documents().items():
                    client.put_object(Bucket=e["bucket"], Key=e["prefix"] + key, Body=body)
            if loopback_port(e["github_url"]):
                repos = {r: DEMO_REPOS.get(r, DEMO_PULL_REQUESTS) for r in e["repos"]}
                github = DevGitHub(port=self.port_of("github_url"), repos=repos)
                self._serve(e, "github_url", self.stack.enter_context(github).url)
            if loopback_port(e["rest_url"]):
                api = tickets_server(port=self.port_of("rest_url"))
                self._serve(e, "rest_url", self.stack.enter_context(api).url)
        except BaseException:
            self.stack.close()
            raise
        return self

    def _serve(self, endpoints: dict[str, Any], name: str, url: str) -> None:
        """The server declared at ``endpoints[name]`` listens at ``url``."""
        self.served[endpoints[name]] = url
        endpoints[name] = url

    @property
    def overrides(self) -> dict[str, Any]:
        """The demo's parameters, each URL of a server started here replaced by the one it
        serves on (the same, unless ``any_port``)."""
        return {
            "deployments": [
                {
                    "name": d["name"],
                    "parameters": {
                        k: self.served.get(v, v) if isinstance(v, str) else v
                        for k, v in (d.get("parameters") or {}).items()
                    },
                }
                for d in project.deployments(self.declared)
            ]
        }

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def demo_home() -> Path:
    """The Prefect home of the demo's local Prefect server: ``<data folder>/prefect``."""
    return (Settings().local_path / "prefect").resolve()


@contextlib.contextmanager
def serving_demo(
    *,
    port: int = 4200,
    database_url: str | None = None,
    echo: Any = print,
    servers: DemoServers | None = None,
) -> Iterator[dict[str, Any]]:
    """The demo's servers, then ``serve.serving`` with the demo's parameters (the URLs the
    servers actually serve on written into the deployments); all stopped in reverse order
    on exit."""
    os.environ.update(credentials())
    with servers or DemoServers() as servers:
        e = servers.endpoints
        os.environ.update(allowed_hosts(e))  # before serve.serving starts the workers
        echo(f"Demo S3 server on {e['s3_url']} (s3://{e['bucket']}/{e['prefix']}, seeded)")
        echo(f"Demo GitHub server on {e['github_url']} ({', '.join(e['repos'])})")
        if e["rest_url"]:
            echo(f"Demo ticket API on {e['rest_url']} (for {e['rest_source']})")
        with serve.serving(
            port=port,
            database_url=database_url,
            echo=echo,
            home=demo_home(),
            overrides=servers.overrides,
        ) as state:
            yield state


def main(argv: list[str] | None = None) -> int:
    """``python -m dev.serve_demo``: serve until Ctrl-C; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m dev.serve_demo",
        description="ingest serve with the demo's local S3, GitHub and ticket API servers, "
        "seeded, and the deployments of prefect.yaml pointed at them.",
    )
    parser.add_argument("--port", type=int, default=4200, help="Port of the Prefect UI [4200].")
    parser.add_argument(
        "--database-url", help="Database of the local Prefect server (as ingest serve's)."
    )
    for name, option in SERVER_OPTIONS.items():
        parser.add_argument(
            option,
            type=int,
            dest=name,
            metavar="PORT",
            help=f"Port of {SERVER_NAMES[name]} [the port of dev/prefect.demo.yaml's URL].",
        )
    parser.add_argument(
        "--free-ports",
        action="store_true",
        help="Serve the demo's servers on free ports (written into the deployments).",
    )
    args = parser.parse_args(argv)
    try:
        servers = DemoServers(
            any_port=args.free_ports, ports={name: getattr(args, name) for name in SERVERS}
        )
        servers.check_ports()  # before anything starts, the Prefect server included
    except RuntimeError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 1
    local_api.prefect_defaults()
    local_api.use_running_serve()  # as `ingest serve` does
    try:
        return serve.until_stopped(
            lambda: serving_demo(port=args.port, database_url=args.database_url, servers=servers)
        )
    except database.DatabaseUrlError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
