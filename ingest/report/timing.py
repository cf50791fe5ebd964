"""Run timing: every task attempt becomes a ``task_timings`` row.

Timings are staged by the task itself as it ends (success or failure) and
committed with the run's other rows, so they survive a crashed run (the next
run commits what a dead one staged) and never depend on the Prefect server
recording task runs (the temporary server drops most of them on large runs).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from ingest import storage
from ingest.records import TaskTiming
from ingest.redact import redact
from ingest.storage.location import DataDir

log = logging.getLogger(__name__)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def describe(t: TaskTiming, noun: str = "objects") -> str:
    """``download-batch 250 objects, 7.5 MB in 1.32 s``."""
    text = f"{t.task_name} {t.items} {noun}"
    if t.bytes:
        text += f", {human_bytes(t.bytes)}"
    text += f" in {t.seconds:.2f} s"
    if t.attempts > 1:
        text += f" (attempt {t.attempts})"
    if t.state != "completed":
        text += f" [{t.state}: {t.error}]"
    return text


@contextmanager
def record(
    data_dir: DataDir,
    *,
    flow_run_id: str,
    flow_name: str,
    task_run_id: str,
    task_name: str,
    attempt: int = 1,
    noun: str = "objects",
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
    worker: str | None = None,
) -> Iterator[TaskTiming]:
    """Time the block; the caller fills ``items`` and ``bytes`` on the yielded record."""
    timing = TaskTiming(
        flow_run_id=flow_run_id,
        flow_name=flow_name,
        task_run_id=task_run_id,
        task_name=task_name,
        started_at=datetime.now(UTC),
        attempts=attempt,
        worker=worker,
    )
    start = time.perf_counter()
    try:
        yield timing
    except BaseException as exc:
        timing.state = "failed"
        timing.error = redact(f"{type(exc).__name__}: {exc}")[:500]
        raise
    finally:
        # One measurement for the log line, the row and the summary: the end is the start
        # plus the figure the line prints, so a stage of one task has that figure as wall.
        timing.seconds = time.perf_counter() - start
        timing.ended_at = timing.started_at + timedelta(seconds=timing.seconds)
        storage.stage(
            data_dir,
            flow_run_id,
            "task_timings",
            f"{task_name}-{task_run_id}-{attempt}",
            [timing.as_row()],
        )
        (logger or log).info("%s", describe(timing, noun))


# A run's duration as its summary gives it before the run has ended, and the figure its
# end-of-run hook puts in its place once Prefect has recorded the end (``final_seconds``).
_SO_FAR = re.compile(r"(\d+\.\d+) s in Running up to this summary")


def seconds_so_far(seconds: float) -> str:
    """``12.34 s in Running up to this summary``: a run's time in Running by Prefect's rule
    when its summary was written (its end replaces it: ``final_seconds``)."""
    return f"{seconds:.2f} s in Running up to this summary"


def final_seconds(text: str, seconds: float) -> str:
    """``text`` with each ``seconds_so_far`` phrase replaced by the run's final duration,
    its start to end as Prefect recorded them."""
    return _SO_FAR.sub(f"{seconds:.2f} s in Running (its start to end in Prefect)", text)
