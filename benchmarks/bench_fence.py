"""What the parsers' Landlock fence costs: a worker's start, and extracting documents.

Side by side, rounds alternating which goes first:

* ``restrict``: ``ingest.extract.fence.restrict`` in a freshly forked process, its rules
  worked out before the fork as the fork server does (so: opening each path, the three
  system calls and ``prctl``), the time of the call itself;
* ``start``: a new pool (fork server, then its workers) until every worker has answered a
  job, unfenced and fenced (``PoolConfig.read_roots``);
* ``extract``: the shared fixture documents (``../shared/fixtures/documents``: PDF, DOCX,
  DXF, DWG, HTML, text) through ``extract_batch`` on that pool, first pass (each worker
  imports ezdxf, python-docx, pdfminer.six on its first file of their kind, inside the
  fence for the fenced pool) and a second pass (warm).

Results: ``fence.md``.

    .venv/bin/python -m benchmarks.bench_fence [--rounds 5] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from ingest.extract import fence
from ingest.extract.batch import extract_batch
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.settings import Settings

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "documents"


def restrict_seconds(roots: list[str]) -> float:
    """The time of ``fence.restrict`` in a child forked for it (the fence is for good)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read)
            started = time.perf_counter()
            fence.restrict(roots, None)
            os.write(write, f"{time.perf_counter() - started:.9f}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as answer:
        text = answer.read()
    os.waitpid(pid, 0)
    return float(text)


def one_pool(config: PoolConfig, stored: list[tuple[str, str, str]]) -> dict[str, float]:
    started = time.perf_counter()
    with WorkerPool(config) as pool:
        pool.map("os:getpid", [()] * config.size)
        ready = time.perf_counter()
        docs = extract_batch(Settings().extracting, "bench", stored, run_id="first", pool=pool)
        first = time.perf_counter()
        extract_batch(Settings().extracting, "bench", stored, run_id="second", pool=pool)
        second = time.perf_counter()
    bad = [d.key for d in docs if d.status not in ("ok", "empty", "encrypted", "failed")]
    assert not bad, bad
    return {"start": ready - started, "first": first - ready, "second": second - first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    abi = fence.landlock_abi()
    if abi < 1:
        sys.exit("this kernel has no Landlock: nothing to compare")
    names = sorted(p.name for p in FIXTURES.iterdir() if p.name != "MANIFEST.tsv")
    stored = [(name, f"etag-{i}", str(FIXTURES / name)) for i, name in enumerate(names)]
    plain = PoolConfig(workers=args.workers, time_limit=120)
    fenced = PoolConfig(workers=args.workers, time_limit=120, read_roots=(str(FIXTURES),))
    fence.rules_for((str(FIXTURES),), None)  # as the fork server works them out, once
    restricts = [restrict_seconds([str(FIXTURES)]) for _ in range(20)]
    results: dict[str, list[dict[str, float]]] = {"unfenced": [], "fenced": []}
    for i in range(args.rounds):
        order = [("unfenced", plain), ("fenced", fenced)]
        for label, config in order if i % 2 == 0 else order[::-1]:
            results[label].append(one_pool(config, stored))
    print(
        f"Landlock ABI {abi}; {len(stored)} documents; {args.workers} workers; load "
        f"{os.getloadavg()[0]:.1f}; {args.rounds} rounds"
    )
    print(
        f"fence.restrict: median {statistics.median(restricts) * 1000:.2f} ms "
        f"({min(restricts) * 1000:.2f}-{max(restricts) * 1000:.2f}), 20 forks"
    )
    print("| measure | unfenced s (median, min-max) | fenced s (median, min-max) | ratio |")
    print("|---|---|---|---:|")
    for measure in ("start", "first", "second"):
        a = [r[measure] for r in results["unfenced"]]
        b = [r[measure] for r in results["fenced"]]
        print(
            f"| {measure} | {statistics.median(a):.2f} ({min(a):.2f}-{max(a):.2f}) "
            f"| {statistics.median(b):.2f} ({min(b):.2f}-{max(b):.2f}) "
            f"| {statistics.median(b) / statistics.median(a):.2f} |"
        )


if __name__ == "__main__":
    main()
