"""From listing chunks to batches: the order in which an s3-ingest run does its work.

The run lists its shards chunk by chunk; each listed chunk is compared with the stored
state; each compared chunk hands out download batches (and extraction of unchanged
objects whose text is stale). ``schedule`` decides what is submitted when:

* each shard's chunks one after another, the shards side by side; whichever listing or
  comparison ends first is acted on first, and a chunk is compared while its shard's
  next one is listed;
* at most a chunk per shard, plus one, waits to be compared, so a slow comparison holds
  the listing back instead of piling up listed chunks;
* batches go out only as fast as they finish (``ahead`` in flight at most), so the
  listing runs just ahead of the downloads instead of holding the bucket's batches in
  memory; finished batches are folded into the summary oldest first and let go.

It knows nothing of Prefect: the work is submitted through the callables of ``Steps``,
each returning a future (Prefect's task futures, or ``concurrent.futures`` in tests),
and the summary is a plain ``RunSummary``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ingest.records import (
    BatchSummary,
    ChunkResult,
    Cursor,
    ExtractSummary,
    ListedChunk,
    ObjectBatch,
    Shard,
)
from ingest.report.summary import RunSummary

T = TypeVar("T", covariant=True)


class Future(Protocol[T]):
    """What ``schedule`` needs of a future: its result, and a call when it is done."""

    def result(self) -> T: ...

    def add_done_callback(self, fn: Callable[[Any], None]) -> None: ...


@dataclass(frozen=True)
class Steps:
    """How each piece of work is submitted; every callable returns at once with a future.

    ``fetch`` downloads a batch (and extracts it too, when ``extract_fetched`` is None and
    extraction is wanted: one task per batch on a cluster). ``extract_fetched`` extracts
    what a download batch stored once it ends; ``extract_stored`` extracts objects already
    on disk. ``first_done`` blocks until one of the futures is done and returns it.
    """

    list_chunk: Callable[[Shard, Cursor], Future[ListedChunk]]
    compare: Callable[[ListedChunk], Future[ChunkResult]]
    fetch: Callable[[ObjectBatch], Future[BatchSummary]]
    first_done: Callable[[Sequence[Future[Any]]], Future[Any]]
    extract_fetched: Callable[[Future[BatchSummary]], Future[ExtractSummary]] | None = None
    extract_stored: Callable[[ObjectBatch], Future[ExtractSummary]] | None = None
    # Called with each finished batch and the number handed out so far (progress).
    on_batch: Callable[[BatchSummary, int], None] | None = None


def schedule(
    shards: Sequence[Shard], steps: Steps, summary: RunSummary, *, ahead: int | None
) -> RunSummary:
    """Do the run's listing, comparison, downloads and extraction; fold every result into
    ``summary`` (returned). ``ahead``: batches in flight at most (None: no bound, as on a
    cluster, whose workers decide how many run at once). Waits for everything it
    submitted; an error of any piece is raised once the pieces in flight are folded."""
    return _Schedule(steps, summary, ahead).run(shards)


class _Schedule:
    def __init__(self, steps: Steps, summary: RunSummary, ahead: int | None) -> None:
        self.steps, self.summary, self.ahead = steps, summary, ahead
        self.downloads: deque[Future[BatchSummary]] = deque()
        self.extracting: deque[Future[ExtractSummary]] = deque()
        self.finished: set[Future[Any]] = set()  # filled by the futures' done callbacks
        self.submitted = 0

    def run(self, shards: Sequence[Shard]) -> RunSummary:
        steps = self.steps
        pending: dict[Future[ListedChunk], Shard] = {
            steps.list_chunk(s, Cursor()): s for s in shards
        }
        comparing: set[Future[ChunkResult]] = set()
        compare_at_most = len(shards) + 1
        while pending or comparing:
            ready: list[Future[Any]] = [*comparing]
            if len(comparing) < compare_at_most:
                ready += pending
            done = steps.first_done(ready)
            if done in comparing:
                comparing.discard(done)
                self.hand_out(done.result())
                continue
            shard = pending.pop(done)
            listed: ListedChunk = done.result()
            if listed.next is not None:
                pending[steps.list_chunk(shard, listed.next)] = shard
            comparing.add(steps.compare(listed))
        self.collect(keep=0)
        return self.summary

    def _track(self, fut: Future[Any]) -> None:
        fut.add_done_callback(self.finished.add)

    def collect(self, keep: int | None) -> None:
        """Fold finished batches into the summary, oldest first, and let their futures go.
        With ``keep``, wait for the oldest until at most ``keep`` batches are in flight."""
        downloads, extracting, finished = self.downloads, self.extracting, self.finished
        while downloads and (
            downloads[0] in finished or (keep is not None and len(downloads) > keep)
        ):
            fut = downloads.popleft()
            finished.discard(fut)
            part = fut.result()
            if self.steps.on_batch is not None:
                self.steps.on_batch(part, self.submitted)
            self.summary.add_batch(part)
            if part.extracted is not None:  # the fetch extracted it too
                self.summary.add_extracted(part.extracted)
        while extracting and (keep == 0 or extracting[0] in finished):
            ext = extracting.popleft()
            finished.discard(ext)
            self.summary.add_extracted(ext.result())

    def hand_out(self, chunk: ChunkResult) -> None:
        steps = self.steps
        self.summary.add_chunk(chunk)
        self.collect(keep=None)
        for batch in chunk.fetch:
            self.collect(keep=self.ahead)
            self.submitted += 1
            fetched = steps.fetch(batch)
            self.downloads.append(fetched)
            self._track(fetched)
            if steps.extract_fetched is not None:  # starts when its download ends
                self.extracting.append(steps.extract_fetched(fetched))
                self._track(self.extracting[-1])
        if steps.extract_stored is not None:
            for batch in chunk.extract:
                self.extracting.append(steps.extract_stored(batch))
                self._track(self.extracting[-1])
