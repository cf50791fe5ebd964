"""A progress artifact per flow run, updated as work finishes.

Flows call ``track_batch`` once per finished batch (or ``publish_progress``
with their own figures); the first call creates a progress artifact on the
flow run, later calls update it, so the run page in the UI shows a bar and a
one-line description (batches, objects, bytes, pages) while the run runs.
Progress is decoration: an API error here is logged, never raised.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.runtime import flow_run

from ingest.records import BatchSummary
from ingest.timing import human_bytes


@dataclass(slots=True)
class _Progress:
    artifact_id: UUID | None = None
    done: int = 0
    objects: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    updated: float = 0.0


MIN_INTERVAL = 1.0  # seconds between two updates of one progress artifact
_lock = threading.Lock()
_runs: dict[str, _Progress] = {}


def publish_progress(key: str, done: int, total: int, description: str) -> None:
    """Create or update this flow run's progress artifact ``key`` (0-100 %)."""
    run_id = str(flow_run.id or "local")
    percent = 100.0 * done / total if total else 0.0
    with _lock:
        state = _runs.setdefault(f"{run_id}/{key}", _Progress())
        now = time.monotonic()
        if state.artifact_id is not None and done < total and now - state.updated < MIN_INTERVAL:
            return  # at most one API call a second: a run of 4,000 batches makes 4,000 calls
        state.updated = now
        try:
            if state.artifact_id is None:
                artifact_id: Any = create_progress_artifact(
                    percent, key=key, description=description
                )
                state.artifact_id = artifact_id
            else:
                update_progress_artifact(state.artifact_id, percent, description=description)
        except Exception as exc:  # the UI bar is not worth failing a run for
            get_run_logger().warning("progress artifact %s not updated: %s", key, exc)


def track_batch(part: BatchSummary, batches: int, key: str = "download-progress") -> None:
    """Add one finished download batch (of ``batches`` so far) to the progress artifact."""
    run_id = str(flow_run.id or "local")
    with _lock:
        state = _runs.setdefault(f"{run_id}/{key}", _Progress())
        state.done += 1
        for status, n in part.counts.items():
            state.objects[status] = state.objects.get(status, 0) + n
        state.bytes += part.bytes
        done, objects, size = state.done, dict(state.objects), state.bytes
    by_status = ", ".join(f"{k} {v}" for k, v in sorted(objects.items()))
    publish_progress(
        key,
        done,
        max(batches, done),
        f"{done} of {batches} batches, {sum(objects.values())} objects ({by_status}), "
        f"{human_bytes(size)} downloaded",
    )
