"""Functions a test source file names by import path (``tests.rest_steps:paid_only``): dlt's
``processing_steps`` (filter, map) and ``incremental.convert``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

NOT_A_FUNCTION = 42


def paid_only(record: dict[str, Any]) -> bool:
    return bool(record.get("paid"))


def with_band(record: dict[str, Any]) -> dict[str, Any]:
    """A map: the record with a field of its own, its ``lines`` left out."""
    out = {k: v for k, v in record.items() if k != "lines"}
    out["band"] = "big" if float(record["total"]) >= 100 else "small"
    return out


def epoch(value: str) -> int:
    """An ISO timestamp as Unix seconds (an API whose ``since`` takes those)."""
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())


def broken(record: dict[str, Any]) -> dict[str, Any]:
    raise KeyError("no_such_field")
