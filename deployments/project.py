"""Read ``prefect.yaml``, the single source of truth for the deployments.

Nothing here restates a deployment: names, work pools, parameters and
schedules all come from the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PREFECT_YAML = PROJECT_ROOT / "prefect.yaml"


def load(path: Path = PREFECT_YAML) -> dict[str, Any]:
    """The parsed ``prefect.yaml`` (YAML anchors resolved)."""
    with path.open(encoding="utf-8") as f:
        return dict(yaml.safe_load(f))


def deployments(config: dict[str, Any]) -> list[dict[str, Any]]:
    return list(config.get("deployments") or [])


def deployment(config: dict[str, Any], name: str) -> dict[str, Any]:
    """The deployment called ``name``; KeyError names the ones that exist."""
    for d in deployments(config):
        if d["name"] == name:
            return d
    raise KeyError(
        f"no deployment {name!r} in prefect.yaml: {[d['name'] for d in deployments(config)]}"
    )


def flow_name(entry: dict[str, Any]) -> str:
    """The flow name of a deployment, as the API spells it (``<flow>/<deployment>``).

    Read from the ``@flow(name=...)`` of the entrypoint, so it is never restated.
    """
    from prefect.flows import load_flow_from_entrypoint

    file, func = entry["entrypoint"].split(":")
    flow: Any = load_flow_from_entrypoint(f"{PROJECT_ROOT / file}:{func}")
    return str(flow.name)


def work_pools(config: dict[str, Any]) -> list[str]:
    """Names of the work pools the deployments use, in order of first use."""
    names = [d["work_pool"]["name"] for d in deployments(config) if d.get("work_pool")]
    return list(dict.fromkeys(names))


def demo_endpoints(config: dict[str, Any]) -> dict[str, Any]:
    """What ``ingest serve --demo`` must serve: the nightly deployment's default
    S3 endpoint, bucket and prefix, GitHub API root and repositories, and the
    rest-ingest deployment's API root (the demo ticket API), when it is deployed."""
    params = deployment(config, "nightly").get("parameters") or {}
    rest: dict[str, Any] = {}
    if any(d["name"] == "rest-ingest" for d in deployments(config)):
        rest = deployment(config, "rest-ingest").get("parameters") or {}
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
