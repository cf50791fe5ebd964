"""A progress artifact per flow run, updated as work finishes.

Flows call ``track_batch`` once per finished batch (or ``publish_progress``
with their own figures); the first call creates a progress artifact on the
flow run, later calls update it, so the run page in the UI shows a bar and a
one-line description (batches, objects, bytes, pages) while the run runs.
Each bar's state (its artifact, its counts) is the run's: kept in the run's
context (``RunContext.once``), gone with it. Progress is decoration: an API
error here is logged, never raised.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from ingest.context import RunContext
from ingest.records import BatchSummary
from ingest.report.timing import human_bytes


@dataclass(slots=True)
class _Progress:
    artifact_id: UUID | None = None
    done: int = 0
    objects: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    updated: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


MIN_INTERVAL = 1.0  # seconds between two updates of one progress artifact


def _state(ctx: RunContext, key: str) -> _Progress:
    return ctx.once(("progress", key), _Progress)


def publish_progress(ctx: RunContext, key: str, done: int, total: int, description: str) -> None:
    """Create or update the progress artifact ``key`` (0-100 %) of the run of ``ctx``."""
    percent = 100.0 * done / total if total else 0.0
    state = _state(ctx, key)
    with state.lock:
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


def track_batch(
    ctx: RunContext, part: BatchSummary, batches: int, key: str = "download-progress"
) -> None:
    """Add one finished download batch (of ``batches`` so far) to the progress artifact."""
    state = _state(ctx, key)
    with state.lock:
        state.done += 1
        for status, n in part.counts.items():
            state.objects[status] = state.objects.get(status, 0) + n
        state.bytes += part.bytes
        done, objects, size = state.done, dict(state.objects), state.bytes
    by_status = ", ".join(f"{k} {v}" for k, v in sorted(objects.items()))
    publish_progress(
        ctx,
        key,
        done,
        max(batches, done),
        f"{done} of {batches} batches, {sum(objects.values())} objects ({by_status}), "
        f"{human_bytes(size)} downloaded",
    )
