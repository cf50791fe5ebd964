"""The alerts of ``automations.yaml``: Prefect automations sending to a notification block.

The file is in Prefect's own automation format; what it cannot know, the id of
the notification block on this server, is written ``ALERT_BLOCK_ID`` and filled
in here from ``INGEST_ALERT_BLOCK`` (``<block type slug>/<block name>``). The
late and stale windows can be shortened by settings (``INGEST_ALERT_LATE_AFTER``,
``INGEST_ALERT_STALE_AFTER``), which is how the tests see a late alert without
waiting 30 minutes. Every automation is validated by Prefect's ``AutomationCore``
before anything is sent to the server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

import yaml

from deployments import project
from ingest.errors import IngestError
from ingest.settings import Settings

AUTOMATIONS_YAML = project.PROJECT_ROOT / "automations.yaml"
BLOCK_PLACEHOLDER = "ALERT_BLOCK_ID"
# Which setting shortens which automation's window.
WINDOWS = {"nightly-late": "late_after", "nightly-stale": "stale_after"}  # of settings.alert


class AlertConfigError(IngestError, ValueError):
    """The alert file or the notification block it needs is not usable."""


def load(path: Path = AUTOMATIONS_YAML) -> list[dict[str, Any]]:
    """The automations declared in the file, as plain dicts."""
    with path.open(encoding="utf-8") as f:
        data = yaml.safe_load(f)
    items = data.get("automations") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise AlertConfigError(f"{path.name} declares no automations")
    return items


def render(
    block_document_id: UUID | str, settings: Settings, path: Path = AUTOMATIONS_YAML
) -> list[Any]:
    """Prefect ``AutomationCore`` models of the file, with the block id and windows filled in."""
    from prefect.events.schemas.automations import AutomationCore

    out = []
    for item in load(path):
        item = json.loads(json.dumps(item))  # a deep copy
        for action in item.get("actions", []):
            if action.get("block_document_id") == BLOCK_PLACEHOLDER:
                action["block_document_id"] = str(block_document_id)
        field = WINDOWS.get(item.get("name", ""))
        if field is not None:
            item["trigger"]["within"] = float(getattr(settings.alert, field))
        out.append(AutomationCore.model_validate(item))
    return out


def block_id(name: str) -> UUID:
    """The id of the notification block ``<type slug>/<name>`` on the configured server."""
    from prefect.blocks.core import Block
    from prefect.blocks.notifications import NotificationBlock

    if "/" not in name:
        raise AlertConfigError(
            f"INGEST_ALERT_BLOCK={name!r}: give <block type slug>/<block name>, "
            "e.g. custom-webhook/nightly-alerts or slack-webhook/nightly-alerts"
        )
    try:
        block = Block.load(name)
    except ValueError as exc:
        raise AlertConfigError(f"no notification block {name!r} on this server: {exc}") from exc
    if not isinstance(block, NotificationBlock):
        raise AlertConfigError(f"block {name!r} is a {type(block).__name__}, not a notification")
    assert block._block_document_id is not None
    return block._block_document_id


def apply(settings: Settings, path: Path = AUTOMATIONS_YAML) -> list[str]:
    """Create the file's automations on the configured server, replacing those of the same
    names (so running it again changes nothing). Returns the names created."""
    from prefect.client.orchestration import get_client

    if not settings.alert.block:
        return []
    automations = render(block_id(settings.alert.block), settings, path)
    with get_client(sync_client=True) as client:
        for automation in automations:
            for old in client.read_automations_by_name(automation.name):
                client.delete_automation(old.id)
            client.create_automation(automation)
    return [a.name for a in automations]


def as_json(automations: list[Any]) -> str:
    """The file ``prefect automation create --from-file`` reads."""
    return json.dumps({"automations": [a.model_dump(mode="json") for a in automations]}, indent=1)
