"""``ingest serve`` with the demo's local servers, from a checkout of the project:
``python -m dev.serve_demo [--port N] [--database-url URL]`` (``make serve
SERVE_ARGS=--demo``).

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


class DemoServers:
    """The local S3-compatible, GitHub-compatible and ticket API servers that the demo's
    parameters (``prefect.demo.yaml``) point at, seeded with the demo data."""

    def __init__(self, overrides: dict[str, Any] | None = None, *, any_port: bool = False) -> None:
        """``any_port`` serves on free ports instead (tests, which may run side by side);
        ``endpoints`` then holds the URLs actually served, and ``overrides`` the demo's
        parameters with those URLs."""
        self.declared = load_overrides() if overrides is None else overrides
        config = project.with_parameters(project.load(), self.declared)
        self.endpoints = demo_endpoints(config)
        self.any_port = any_port
        self.served: dict[str, str] = {}  # declared URL -> URL served
        self.stack = ExitStack()

    def __enter__(self) -> DemoServers:
        from dev import samples
        from dev.github_demo import DEMO_REPOS
        from dev.rest_demo import tickets_server
        from dev.servers.github import DevGitHub
        from dev.servers.s3 import DevServer

        e = self.endpoints
        try:
            s3_port = loopback_port(e["s3_url"])
            if s3_port:
                if not self.any_port:
                    serve.require_free_port(s3_port, "the demo S3 server")
                server = self.stack.enter_context(
                    DevServer(port=None if self.any_port else s3_port)
                )
                self._serve(e, "s3_url", server.url)
                client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
                with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                    client.create_bucket(Bucket=e["bucket"])
                for key, body in samples.documents().items():
                    client.put_object(Bucket=e["bucket"], Key=e["prefix"] + key, Body=body)
            gh_port = loopback_port(e["github_url"])
            if gh_port:
                if not self.any_port:
                    serve.require_free_port(gh_port, "the demo GitHub server")
                repos = {r: DEMO_REPOS.get(r, DEMO_PULL_REQUESTS) for r in e["repos"]}
                github = DevGitHub(port=None if self.any_port else gh_port, repos=repos)
                self._serve(e, "github_url", self.stack.enter_context(github).url)
            rest_port = loopback_port(e["rest_url"])
            if rest_port:
                if not self.any_port:
                    serve.require_free_port(rest_port, "the demo ticket API")
                api = tickets_server(port=None if self.any_port else rest_port)
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
    *, port: int = 4200, database_url: str | None = None, echo: Any = print
) -> Iterator[dict[str, Any]]:
    """The demo's servers, then ``serve.serving`` with the demo's parameters; all stopped
    in reverse order on exit."""
    os.environ.update(credentials())
    with DemoServers() as servers:
        e = servers.endpoints
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
    args = parser.parse_args(argv)
    local_api.prefect_defaults()
    local_api.use_running_serve()  # as `ingest serve` does
    try:
        return serve.until_stopped(
            lambda: serving_demo(port=args.port, database_url=args.database_url)
        )
    except database.DatabaseUrlError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
