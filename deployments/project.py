"""Read ``prefect.yaml``, the single source of truth for the deployments.

Nothing here restates a deployment: names, work pools, parameters and
schedules all come from the file.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

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


def with_parameters(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the parameters of ``overrides`` merged over those of its deployments.

    ``overrides`` is shaped like ``prefect.yaml`` (``deployments:``, each entry a ``name``
    and the ``parameters`` it sets; other top-level keys such as ``definitions`` hold its
    anchors and are ignored): what one installation sets for its site without editing the
    file, such as the demo's local servers. Nothing but parameters can be overridden, and
    only in deployments ``config`` declares.
    """
    merged = copy.deepcopy(config)
    for entry in deployments(overrides):
        unknown = set(entry) - {"name", "parameters"}
        if unknown:
            raise ValueError(
                f"deployment {entry.get('name')!r} of the overrides sets {sorted(unknown)}: "
                "only parameters can be overridden"
            )
        target = deployment(merged, entry["name"])
        target["parameters"] = {**(target.get("parameters") or {}), **entry["parameters"]}
    return merged
