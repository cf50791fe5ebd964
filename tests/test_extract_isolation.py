"""A parser that hangs, raises or kills its process costs one row; the run goes on."""

from __future__ import annotations

from pathlib import Path

from ingest.extract.batch import extract_batch
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.settings import Settings

HOOK = "tests.extract_support:misbehaving_extractor"


def test_hang_crash_and_raise_do_not_stop_the_run(tmp_path: Path) -> None:
    names = ["a-good.txt", "b-hang.txt", "c-good.txt", "d-crash.txt", "e-raise.txt", "f-good.txt"]
    stored = []
    for i, name in enumerate(names):
        path = tmp_path / name
        path.write_text(f"문서 {i} text of {name}", encoding="utf-8")
        stored.append((name, f"etag-{i}", str(path)))
    with WorkerPool(PoolConfig(workers=2, time_limit=3, preload=(HOOK,))) as pool:
        before = set(pool.pids())
        docs = extract_batch(Settings(), "b", stored, run_id="r", pool=pool, extractor=HOOK)
        by_key = {d.key: d for d in docs}
        assert [d.key for d in docs] == names  # one row each, in order
        assert by_key["b-hang.txt"].status == "timeout"
        assert "time limit" in (by_key["b-hang.txt"].error or "")
        assert by_key["d-crash.txt"].status == "failed"
        assert "SIGSEGV" in (by_key["d-crash.txt"].error or "")
        assert by_key["e-raise.txt"].status == "failed"
        assert "parser bug" in (by_key["e-raise.txt"].error or "")
        for name in ("a-good.txt", "c-good.txt", "f-good.txt"):
            assert by_key[name].status == "ok"
            assert by_key[name].text.startswith("문서")
        assert all(d.kind == "txt" for d in docs)
        # The hung and the crashed workers were replaced; the pool still has two and works.
        assert pool.stats.timeouts == 1 and pool.stats.crashes == 1
        assert pool.stats.replaced >= 2
        assert len(pool.pids()) == 2 and set(pool.pids()) != before
        again = extract_batch(Settings(), "b", stored[:1], run_id="r2", pool=pool, extractor=HOOK)
        assert again[0].status == "ok"


def test_memory_limit_turns_a_balloon_into_a_row(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("x")
    with WorkerPool(PoolConfig(workers=1, time_limit=30, memory_limit_mb=1024)) as pool:
        outcome = pool.submit("tests.extract_support:allocate", 4 * 1024**3).result()
        assert outcome.status in ("error", "crashed")
        assert outcome.status == "crashed" or "MemoryError" in (outcome.error or "")
        assert pool.submit("os:getpid").result().status == "ok"
