"""The s3-ingest run's scheduler (``ingest.s3.schedule``), without Prefect: its pieces are
submitted to a thread pool and return ``concurrent.futures`` futures."""

from __future__ import annotations

import random
import threading
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import pytest

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
from ingest.s3.schedule import Steps, schedule


def first_done(futures):
    done, _ = wait(list(futures), return_when=FIRST_COMPLETED)
    return next(iter(done))


@dataclass
class World:
    """A bucket of ``shards`` x ``chunks`` listing chunks, each naming ``batches`` download
    batches of ``per_batch`` objects and one batch of stale texts to extract again."""

    shards: int = 3
    chunks: int = 4
    batches: int = 3
    per_batch: int = 5
    seed: int = 0
    fail_batch: str | None = None
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(6))
    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: Counter[str] = field(default_factory=Counter)
    listed: list[tuple[int, int]] = field(default_factory=list)  # (shard, chunk) in order
    fetched: list[str] = field(default_factory=list)
    # Handed out and not yet folded into the summary, each time a batch is handed out.
    in_flight: list[int] = field(default_factory=list)
    comparing_at_list: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def run(self, job, *args):
        # Jobs finish in a shuffled order: a small random amount of work each.
        spin = self.rng.randrange(2000)
        return self.pool.submit(lambda: (sum(range(spin)), job(*args))[1])

    def list_chunk(self, shard: Shard, cursor: Cursor) -> Future[ListedChunk]:
        with self.lock:
            self.calls["list"] += 1
            self.listed.append((shard.index, cursor.chunk))
            self.comparing_at_list.append(self.calls["compare"] - self.calls["compared"])
        last = cursor.chunk + 1 >= self.chunks
        nxt = None if last else Cursor(after=f"k{cursor.chunk}", chunk=cursor.chunk + 1)
        chunk = ListedChunk(
            shard, cursor.chunk, f"s{shard.index}c{cursor.chunk}", 10, None, None, nxt
        )
        return self.run(lambda: chunk)

    def compare(self, listed: ListedChunk) -> Future[ChunkResult]:
        with self.lock:
            self.calls["compare"] += 1

        def result() -> ChunkResult:
            with self.lock:
                self.calls["compared"] += 1
            name = listed.name
            return ChunkResult(
                shard=listed.shard.index,
                listed=10,
                counts={"skipped": 2},
                fetch=[
                    ObjectBatch(f"{name}b{i}", self.per_batch, b"") for i in range(self.batches)
                ],
                extract=[ObjectBatch(f"{name}x", 1, b"")],
                extract_unchanged=1,
            )

        return self.run(result)

    def fetch(self, batch: ObjectBatch) -> Future[BatchSummary]:
        with self.lock:
            self.calls["fetch"] += 1
            self.in_flight.append(self.calls["fetch"] - self.calls["folded"])

        def result() -> BatchSummary:
            if batch.name == self.fail_batch:
                raise OSError(f"disk full writing {batch.name}")
            with self.lock:
                self.fetched.append(batch.name)
            return BatchSummary(counts={"downloaded": batch.count}, bytes=100, name=batch.name)

        return self.run(result)

    def extract_fetched(self, downloaded: Future[BatchSummary]) -> Future[ExtractSummary]:
        # As Prefect does: the extraction starts with its download's result.
        return self.run(
            lambda: ExtractSummary(counts={"ok": downloaded.result().counts["downloaded"]})
        )

    def extract_stored(self, batch: ObjectBatch) -> Future[ExtractSummary]:
        return self.run(lambda: ExtractSummary(counts={"ok": batch.count}))

    def on_batch(self, part: BatchSummary, handed_out: int) -> None:
        with self.lock:
            self.calls["folded"] += 1

    def steps(self, *, extract: bool = True) -> Steps:
        return Steps(
            list_chunk=self.list_chunk,
            compare=self.compare,
            fetch=self.fetch,
            first_done=first_done,
            extract_fetched=self.extract_fetched if extract else None,
            extract_stored=self.extract_stored,
            on_batch=self.on_batch,
        )


@pytest.mark.parametrize("seed", range(5))
def test_every_batch_is_fetched_extracted_and_counted_once(seed: int) -> None:
    w = World(seed=seed)
    shards = [Shard(i) for i in range(w.shards)]
    summary = schedule(shards, w.steps(), RunSummary("run"), ahead=3)
    n_chunks = w.shards * w.chunks
    n_batches = n_chunks * w.batches
    assert sorted(w.fetched) == sorted(
        f"s{s}c{c}b{b}" for s in range(w.shards) for c in range(w.chunks) for b in range(w.batches)
    )
    assert summary.counts == {"downloaded": n_batches * w.per_batch, "skipped": 2 * n_chunks}
    assert summary.bytes == 100 * n_batches
    # Texts of the downloads, the stale stored ones, and those already current.
    assert summary.extracted == {"ok": n_batches * w.per_batch + n_chunks, "unchanged": n_chunks}
    assert w.calls["folded"] == n_batches
    w.pool.shutdown()


@pytest.mark.parametrize("seed", range(5))
def test_each_shard_is_listed_in_order_and_once(seed: int) -> None:
    w = World(seed=seed)
    schedule([Shard(i) for i in range(w.shards)], w.steps(), RunSummary("run"), ahead=3)
    for s in range(w.shards):
        assert [c for shard, c in w.listed if shard == s] == list(range(w.chunks))
    w.pool.shutdown()


@pytest.mark.parametrize("ahead", [0, 1, 4])
def test_batches_in_flight_stay_within_ahead(ahead: int) -> None:
    """The listing stays just ahead of the downloads: when a batch is handed out, at most
    ``ahead`` earlier ones are still unfolded, whatever order they finish in."""
    for seed in range(3):
        w = World(seed=seed, batches=4)
        schedule([Shard(i) for i in range(w.shards)], w.steps(), RunSummary("run"), ahead=ahead)
        assert max(w.in_flight) <= ahead + 1
        w.pool.shutdown()


def test_without_a_bound_every_batch_may_be_out() -> None:
    w = World(shards=1, chunks=1, batches=6)
    # Fetches that cannot finish until all six are handed out: a bound would deadlock.
    gate = threading.Event()
    fetch = w.fetch
    holders = ThreadPoolExecutor(6)  # not the pool the fetches themselves run on

    def held(batch: ObjectBatch) -> Future[BatchSummary]:
        if w.calls["fetch"] == 5:
            gate.set()
        inner = fetch(batch)
        return holders.submit(lambda: (gate.wait(30), inner.result())[1])

    steps = w.steps()
    steps = Steps(**{**steps.__dict__, "fetch": held})
    summary = schedule([Shard(0)], steps, RunSummary("run"), ahead=None)
    assert gate.is_set() and summary.counts["downloaded"] == 6 * w.per_batch
    holders.shutdown()
    w.pool.shutdown()


def test_comparisons_waiting_are_bounded_by_the_shards() -> None:
    w = World(shards=2, chunks=6)
    schedule([Shard(i) for i in range(w.shards)], w.steps(), RunSummary("run"), ahead=2)
    assert max(w.comparing_at_list) <= w.shards + 1
    w.pool.shutdown()


def test_whole_batches_extract_in_the_fetch() -> None:
    """On a cluster a batch is one task: no separate extraction, and what the fetch
    extracted is counted."""
    w = World(shards=1, chunks=2, batches=2)
    fetch = w.fetch

    def whole(batch: ObjectBatch) -> Future[BatchSummary]:
        inner = fetch(batch)

        def with_text() -> BatchSummary:
            part = inner.result()
            part.extracted = ExtractSummary(counts={"ok": part.counts["downloaded"]})
            return part

        return w.pool.submit(with_text)

    steps = Steps(**{**w.steps(extract=False).__dict__, "fetch": whole})
    summary = schedule([Shard(0)], steps, RunSummary("run"), ahead=1)
    assert summary.extracted == {"ok": 4 * w.per_batch + 2, "unchanged": 2}
    w.pool.shutdown()


def test_a_failed_batch_raises_its_error() -> None:
    w = World(shards=2, chunks=2, fail_batch="s1c0b1")
    with pytest.raises(OSError, match="disk full writing s1c0b1"):
        schedule([Shard(i) for i in range(w.shards)], w.steps(), RunSummary("run"), ahead=2)
    w.pool.shutdown()


def test_no_shards_is_an_empty_run() -> None:
    w = World()
    summary = schedule([], w.steps(), RunSummary("run"), ahead=2)
    assert (summary.counts, w.calls["list"]) == ({}, 0)
    w.pool.shutdown()
