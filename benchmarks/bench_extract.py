"""Text extraction benchmark: the flow's extraction stage side by side with its baselines.

On one corpus (the shared fixture documents plus generated ones in Korean,
each copied ``--copies`` times under new names), measured one after the other
in this process:

* ``direct``     the best library per kind called directly, one process, one file at a
                 time (pypdfium2, ezdxf model-space TEXT/MTEXT, python-docx, selectolax,
                 charset-normalizer): the single-process baseline;
* ``in-process`` our ``extract_document`` (fallbacks, block walk ...) in one process;
* ``pool``       ``ingest.extract.batch.extract_batch`` on the warm worker pool (one
                 worker per core), batches submitted from two threads as the flow does;
* ``flow``       the ``extract-batch`` Prefect task in a flow over the same batches
                 (ThreadPoolTaskRunner, timing rows, Parquet parts): stage wall time from
                 ``task_timings``, so the flow's own start-up is not counted;
* ``overlap``    download (moto dev server with added latency) + extract, either
                 download-then-extract or each batch extracted as soon as it is downloaded;
* ``search``     ``ingest search`` (SQLite FTS5) on 100,000 generated documents, against a
                 DuckDB ``ILIKE`` scan of the same Parquet files.

``python -m benchmarks.bench_extract`` writes ``benchmarks/extract.md`` and
``benchmarks/.work/extract.json``. ``--quick`` shrinks everything for a smoke run.

``python -m benchmarks.bench_extract --drawings`` measures only DWG beside DXF (one
drawing AutoCAD saved as DWG R14 to R2018 and as DXF R2000 and R2004, and an R2000
drawing generated as both; ``tests/fixtures/dwg``): drawings per second in one process
and on the warm pool, and ezdwg's own ``to_dxf`` route, which extraction does not take;
it writes ``benchmarks/extract-dwg.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(__file__).resolve().parent / ".work"
FIXTURES = ROOT / ".." / "shared" / "fixtures" / "documents"
OUT = Path(__file__).resolve().parent / "extract.md"
OUT_DWG = Path(__file__).resolve().parent / "extract-dwg.md"
DWG_FIXTURES = ROOT / "tests" / "fixtures" / "dwg"
DWG_RELEASES = ("AC1014", "AC1015", "AC1018", "AC1021", "AC1024", "AC1027", "AC1032")
# The DXF each is paired with: AutoCAD's R2000 DXF for its R2000 DWG, its R2004 DXF else.
DXF_OF = {"AC1015": "AC1015"}
BATCH = 100  # objects per batch task (the flow's s3_batch_size; 250 by default)


# ---------------------------------------------------------------------------- corpus


def build_corpus(folder: Path, copies: int) -> list[Path]:
    """Fixture documents and generated ones, ``copies`` times under distinct names."""
    from dev import samples
    from tests.extract_support import KOREAN, cid_pdf, drawing, word_document

    originals: dict[str, bytes] = {}
    if FIXTURES.is_dir():
        for p in sorted(FIXTURES.iterdir()):
            if p.name != "MANIFEST.tsv":
                originals[p.name] = p.read_bytes()
    for key, body in samples.documents().items():
        if ".." not in key:
            originals["sample-" + key.replace("/", "-")] = body
    originals["gen-korean.pdf"] = cid_pdf([KOREAN] * 40)
    originals["gen-plan.dxf"] = drawing("cp949")
    originals["gen-plan-escapes.dxf"] = drawing()
    originals["gen-spec.docx"] = word_document()
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(copies):
        for name, body in originals.items():
            path = folder / f"{i:03d}-{name}"
            path.write_bytes(body)
            files.append(path)
    return files


def kind_of(path: Path) -> str:
    from ingest.extract.detect import detect_kind

    with path.open("rb") as f:
        head = f.read(1 << 16)
    return detect_kind(head, path.name) if head else "empty"


# ---------------------------------------------------------------------------- direct baseline


def direct_extract(path: Path, kind: str) -> tuple[int, int]:
    """(pages, chars) with the best library for the kind, called directly, nothing else."""
    if kind == "pdf":
        import pypdfium2 as pdfium

        try:
            pdf = pdfium.PdfDocument(path)
        except pdfium.PdfiumError:
            return 0, 0
        chars = 0
        for page in pdf:
            chars += len(page.get_textpage().get_text_bounded())
        n = len(pdf)
        pdf.close()
        return n, chars
    if kind == "dxf":
        import ezdxf
        from ezdxf import recover

        try:
            doc = ezdxf.readfile(path)
        except Exception:
            try:
                doc, _ = recover.readfile(path)
            except Exception:
                return 0, 0
        texts = [e.plain_text() for e in doc.modelspace().query("TEXT MTEXT")]
        return 1, sum(len(t) for t in texts)
    if kind == "docx":
        import docx

        d = docx.Document(str(path))
        parts = [p.text for p in d.paragraphs]
        parts += [c.text for t in d.tables for r in t.rows for c in r.cells]
        return 1, sum(len(p) for p in parts)
    if kind == "html":
        from selectolax.lexbor import LexborHTMLParser

        tree = LexborHTMLParser(path.read_bytes())
        return 1, len(tree.body.text() if tree.body else "")
    if kind in ("txt", "csv", "md", "json", "xml"):
        from charset_normalizer import from_bytes

        best = from_bytes(path.read_bytes()).best()
        return 1, len(str(best)) if best else 0
    return 0, 0


def cpu_seconds(pids: Sequence[int] = ()) -> float:
    """CPU time (user + system) of this process and of the given processes (pool workers,
    which are children of the fork server, not of this process)."""
    t = os.times()
    total = t.user + t.system
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def by_kind(files: Sequence[Path], kinds: dict[Path, str], pages: dict[Path, int]) -> dict:
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"files": 0, "mb": 0.0, "pages": 0})
    for f in files:
        k = out[kinds[f]]
        k["files"] += 1
        k["mb"] += f.stat().st_size / 1e6
        k["pages"] += pages.get(f, 0)
    return dict(out)


# ---------------------------------------------------------------------------- stages


def run_direct(files: Sequence[Path], kinds: dict[Path, str]) -> dict[str, Any]:
    per_kind: dict[str, float] = defaultdict(float)
    cpu = cpu_seconds()
    start = time.perf_counter()
    for f in files:
        t0 = time.perf_counter()
        direct_extract(f, kinds[f])
        per_kind[kinds[f]] += time.perf_counter() - t0
    return {
        "seconds": time.perf_counter() - start,
        "cpu": cpu_seconds() - cpu,
        "per_kind": dict(per_kind),
    }


def run_in_process(files: Sequence[Path], kinds: dict[Path, str]) -> dict[str, Any]:
    from ingest.extract import extract_document

    per_kind: dict[str, float] = defaultdict(float)
    pages: dict[Path, int] = {}
    cpu = cpu_seconds()
    start = time.perf_counter()
    for f in files:
        t0 = time.perf_counter()
        pages[f] = extract_document(f).pages
        per_kind[kinds[f]] += time.perf_counter() - t0
    return {
        "seconds": time.perf_counter() - start,
        "cpu": cpu_seconds() - cpu,
        "per_kind": dict(per_kind),
        "pages": pages,
    }


def batches_of(files: Sequence[Path]) -> list[list[tuple[str, str, str]]]:
    stored = [(f.name, "etag", str(f)) for f in files]
    return [stored[i : i + BATCH] for i in range(0, len(stored), BATCH)]


def fenced_for(config: Any, files: Sequence[Path]) -> Any:
    """A run's pool ``config`` whose parsers' fence also grants the benchmark's folders
    (a run's files lie in its download folder; these lie where the benchmark made them)."""
    folders = sorted({str(f.parent) for f in files})
    return dataclasses.replace(config, read_roots=(*(config.read_roots or ()), *folders))


def start_pool(files: Sequence[Path], settings: Any, copies: int) -> dict[str, Any]:
    """A pool (the flow contender's run is handed the same one), started and warmed."""
    from ingest.extract.batch import extract_batch, pool_config
    from ingest.extract.pool import WorkerPool

    warmup = batches_of(files[: len(files) // copies])[0]

    def started() -> Any:
        # The pool starts on its first jobs: its fork server (subprocess, importing the
        # parsers), then one forked worker per core.
        pool = WorkerPool(fenced_for(pool_config(settings.extracting), files))
        pool.map("os:getpid", [()] * pool.config.size)
        return pool

    cold, pool = timed(started)
    # One pass over one copy first: each worker's first file of a kind pays lazy
    # initialisation (ezdxf's recover and render modules, pdfium's fonts ...) that a
    # long-lived pool pays once; the in-process contenders had theirs in the warm-up too.
    warm, _ = timed(
        lambda: extract_batch(settings.extracting, "bench", warmup, run_id="warm", pool=pool)
    )
    return {"pool": pool, "start_seconds": cold, "warmup_seconds": warm}


def run_pool(files: Sequence[Path], settings: Any, pool: Any) -> dict[str, Any]:
    from ingest.extract.batch import extract_batch

    pids = pool.pids()
    cpu = cpu_seconds(pids)
    with ThreadPoolExecutor(2) as ex:
        seconds, results = timed(
            lambda: list(
                ex.map(
                    lambda b: extract_batch(
                        settings.extracting, "bench", b, run_id="bench", pool=pool
                    ),
                    batches_of(files),
                )
            )
        )
    statuses: dict[str, int] = defaultdict(int)
    for docs in results:
        for d in docs:
            statuses[d.status] += 1
    # A worker recycled during the run takes its CPU time with it: no figure then.
    cpu = cpu_seconds(pids) - cpu if sorted(pool.pids()) == sorted(pids) else float("nan")
    return {
        "seconds": seconds,
        "cpu": cpu,
        "workers": pool.config.size,
        "statuses": dict(statuses),
    }


def run_flow(files: Sequence[Path], settings: Any, data_dir: Path, pool: Any) -> dict[str, Any]:
    """The extract-batch task in a real flow, its run handed the warm ``pool`` (as a
    run's own pool is once started); stage wall time from task_timings.

    ``data_dir`` must be new: with the rows of an earlier round there, every object
    would be skipped as unchanged.
    """
    from deployments.local_api import prefect_defaults, use_running_serve

    prefect_defaults()  # as the ingest command's: quiet, offline, a running serve's API
    use_running_serve()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # The temporary server starts slowly when other runs load the machine.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    from prefect import flow
    from prefect.task_runners import ThreadPoolTaskRunner

    from ingest import context, storage
    from ingest.records import BatchSummary
    from ingest.report import summary as report
    from tasks.extraction import extract_batch

    flow_settings = settings.model_copy(update={"data_dir": data_dir})

    @flow(name="bench-extract", task_runner=ThreadPoolTaskRunner(max_workers=4))
    def bench_extract(groups: list[list[tuple[str, str, str]]]) -> str:
        from prefect.runtime import flow_run

        run_id = str(flow_run.id)
        names = []
        for i, group in enumerate(groups):  # as download-batch leaves them: staged rows
            rows = [
                {"bucket": "bench", "key": k, "etag": e, "local_path": p, "status": "downloaded"}
                for k, e, p in group
            ]
            storage.stage(flow_settings.location, run_id, "s3_objects", f"batch-{i}", rows)
            names.append(f"batch-{i}")
        with context.opened(flow_settings, run_id, pool=pool):
            futures = [
                extract_batch.submit(flow_settings, "bench", run_id, BatchSummary(name=name))
                for name in names
            ]
            for f in futures:
                f.result()
        return str(flow_run.id)

    total, run_id = timed(lambda: bench_extract(batches_of(files)))
    stages = report.stage_table(data_dir, run_id)
    wall = next(s["wall_seconds"] for s in stages if s["stage"] == "extract-batch")
    return {"seconds": wall, "flow_seconds": total}


def run_overlap(
    files: Sequence[Path],
    settings: Any,
    work: Path,
    latency_ms: float,
    concurrency: int,
    rounds: int,
    pool: Any,
) -> dict[str, Any]:
    """Download + extract, one after the other or overlapped batch by batch (as the flow),
    on the warm ``pool``."""
    import boto3

    from dev.servers.s3 import DevServer
    from ingest import s3
    from ingest.extract.batch import extract_batch
    from ingest.s3 import sync

    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    out: dict[str, Any] = {"latency_ms": latency_ms, "concurrency": concurrency}
    series: dict[str, list[float]] = defaultdict(list)
    with DevServer(latency_ms=latency_ms) as server:
        from botocore.config import Config

        admin = boto3.client(
            "s3",
            endpoint_url=server.url,
            region_name="us-east-1",
            config=Config(max_pool_connections=16),
        )
        admin.create_bucket(Bucket="bench")
        with ThreadPoolExecutor(16) as ex:
            list(
                ex.map(
                    lambda f: admin.put_object(
                        Bucket="bench", Key=f"in/{f.name}", Body=f.read_bytes()
                    ),
                    files,
                )
            )

        # One connection for every round (as one run's tasks share theirs): the rounds
        # differ only in their data_dir.
        conn = s3.S3Connection.open(
            settings.updated(s3={"endpoint_url": server.url, "concurrency": concurrency}).s3
        )

        def listing(cfg: Any) -> list[Any]:
            objects, token = [], None
            while True:
                page = s3.list_page(conn.client, "bench", "in/", token)
                objects += page.objects
                if not page.next_token:
                    return objects
                token = page.next_token

        def download(cfg: Any, batch: list[Any], i: int) -> list[tuple[str, str, str]]:
            root = cfg.downloads.root("bench")
            results = sync.download_batch(conn, root, batch, prefix="in/", run_id=f"r{i}")
            return [(r.key, r.etag or "", r.local_path) for r in results if r.local_path]

        for mode in ("sequential", "overlapped") * rounds:
            series["round"].append(len(series["round"]))
            cfg = settings.updated(
                data_dir=work / f"{mode}-{len(series['round'])}",
                s3={"endpoint_url": server.url, "concurrency": concurrency},
            )
            objects = listing(cfg)
            groups = [objects[i : i + BATCH] for i in range(0, len(objects), BATCH)]
            start = time.perf_counter()
            with ThreadPoolExecutor(4) as ex:  # the flow's task runner size
                if mode == "sequential":
                    stored = list(
                        ex.map(lambda ib, cfg=cfg: download(cfg, ib[1], ib[0]), enumerate(groups))
                    )
                    series["download_seconds"].append(time.perf_counter() - start)
                    t0 = time.perf_counter()
                    list(
                        ex.map(
                            lambda s, cfg=cfg: extract_batch(
                                cfg.extracting, "bench", s, run_id="x", pool=pool
                            ),
                            stored,
                        )
                    )
                    series["extract_seconds"].append(time.perf_counter() - t0)
                else:
                    # Submitted in the flow's order: download i, then extract i (waits on it).
                    futures = []
                    for i, group in enumerate(groups):
                        d = ex.submit(download, cfg, group, i)
                        futures.append(
                            ex.submit(
                                lambda d=d, cfg=cfg: extract_batch(
                                    cfg.extracting, "bench", d.result(), run_id="x", pool=pool
                                )
                            )
                        )
                    for f in futures:
                        f.result()
            series[f"{mode}_seconds"].append(time.perf_counter() - start)
        conn.close()
    series.pop("round")
    out |= {k: statistics.median(v) for k, v in series.items()}
    out["ratios"] = [
        o / (d + e)
        for o, d, e in zip(
            series["overlapped_seconds"],
            series["download_seconds"],
            series["extract_seconds"],
            strict=True,
        )
    ]
    out["series"] = dict(series)
    return out


# ---------------------------------------------------------------------------- search


WORDS_KO = (  # noqa: SIM905 - a readable word list
    "도면 배관 계통도 평면도 단면도 입면도 지하주차장 기계실 전기실 소방 설비 밸브 펌프 "
    "덕트 배수 급수 위생 냉난방 공조 조명 콘센트 분전반 검토 결과 수정 승인 변경 "
    "회의실 사무실 계단실 승강기 옥상 외벽 창호 방수 단열 구조 철근 콘크리트"
).split()
WORDS_EN = (  # noqa: SIM905
    "drawing plan section elevation valve pump duct drainage supply sanitary heating "
    "cooling lighting outlet panel review result revision approval change meeting office "
    "stair elevator roof wall window waterproof insulation structure rebar concrete "
    "north south east west level basement inspection report schedule"
).split()


def search_count(data_dir: Path, words: str) -> int:
    """How many documents match (not just the top 10): the work a ranked query does."""
    import sqlite3

    from ingest import search

    with sqlite3.connect(search.index_path(data_dir)) as con:
        row = con.execute(
            "SELECT count(*) FROM doc_fts WHERE doc_fts MATCH ?", [search.fts_query(words)]
        ).fetchone()
    return int(row[0])


def run_search(work: Path, n_docs: int, parts: int) -> dict[str, Any]:
    import duckdb

    from ingest import search, storage
    from ingest.records import Document

    rng = random.Random(20261130)
    data_dir = work / "search"
    shutil.rmtree(data_dir, ignore_errors=True)
    when = datetime(2026, 11, 30, tzinfo=UTC)
    kinds = ("pdf", "dxf", "docx", "html", "txt")
    per_part = n_docs // parts
    text_mb = 0.0
    sample_words: list[str] = []
    # A Zipf-like vocabulary: 20,000 made-up Korean words (2-3 Hangul syllables) and the
    # English list, with the domain words above among the frequent ones.
    syllables = [chr(0xAC00 + rng.randrange(11172)) for _ in range(400)]
    made_up = [
        "".join(rng.choice(syllables) for _ in range(rng.choice((2, 2, 3)))) for _ in range(20_000)
    ]
    vocab = WORDS_KO + WORDS_EN + made_up
    weights = [1 / (rank + 10) for rank in range(len(vocab))]
    rng.shuffle(vocab)  # domain words land at random ranks, not all at the top
    for p in range(parts):
        rows = []
        for i in range(per_part):
            words = rng.choices(vocab, weights, k=rng.randint(40, 160))
            # Korean particles glued to words, as in real text (도면을, 배관의 ...)
            text = " ".join(w + rng.choice(("", "", "을", "의", "에서")) for w in words)
            if p == parts // 2 and i == 7:
                sample_words = words
            text += f" 도면번호 A-{p:03d}-{i:04d}"
            text_mb += len(text.encode()) / 1e6
            rows.append(
                Document(
                    bucket="b",
                    key=f"docs/{p:03d}/{i:05d}.{kinds[i % 5]}",
                    etag="e",
                    kind=kinds[i % 5],
                    status="ok",
                    text=text,
                    chars=len(text),
                    extracted_at=when + timedelta(seconds=i),
                    run_id=f"run{p:03d}",
                ).as_row()
            )
        storage.stage(data_dir, f"run{p:03d}", "documents", "batch-000000", rows)
        storage.commit_run(data_dir, f"run{p:03d}")
    build, indexed = timed(lambda: search.refresh_index(data_dir))
    noop, _ = timed(lambda: search.refresh_index(data_dir))
    # Queries with hits: the word in every document, the most frequent made-up word, two
    # words of one document (Korean, as searched: without their particles), an English
    # word, an identifier, and a rare pair.
    sample = [w for w in sample_words if w[0] >= "\uac00"]
    queries = [
        "도면",
        vocab[0],
        f"{sample[0]} {sample[1]}",
        "valve",
        "A-042-0007",
        "지하주차장 평면도",
    ]
    lat: dict[str, list[float]] = {}
    hits: dict[str, int] = {}
    for q in queries:
        for kind in (None, "pdf"):
            label = q + (" --kind pdf" if kind else "")
            times = []
            for _ in range(7):
                t, res = timed(
                    lambda q=q, kind=kind: search.search(
                        data_dir, q, limit=10, kind=kind, refresh=False
                    )
                )
                times.append(t)
            lat[label] = times
            hits[label] = len(res)
    glob = storage.data_files(data_dir, "documents")
    scan_times = []
    with duckdb.connect() as con:
        for _ in range(3):
            t, _ = timed(
                lambda: con.execute(
                    "SELECT key, len(text) - len(replace(text, '평면도', '')) AS n "
                    "FROM read_parquet(?) WHERE text ILIKE '%지하주차장%' "
                    "AND text ILIKE '%평면도%' ORDER BY n DESC LIMIT 10",
                    [glob],
                ).fetchall()
            )
            scan_times.append(t)
    matches = {
        label: search_count(data_dir, q) for label, q in (("도면", "도면"), ("valve", "valve"))
    }
    cold, _ = timed(lambda: search.search(data_dir, "지하주차장 평면도", refresh=True))
    return {
        "documents": n_docs,
        "text_mb": round(text_mb, 1),
        "indexed": indexed,
        "build_seconds": build,
        "noop_refresh_seconds": noop,
        "index_mb": search.index_path(data_dir).stat().st_size / 1e6,
        "query_ms": {k: statistics.median(v) * 1000 for k, v in lat.items()},
        "query_hits": hits,
        "cli_path_ms": cold * 1000,
        "duckdb_ilike_ms": statistics.median(scan_times) * 1000,
        "matching_documents": matches,
    }


# ---------------------------------------------------------------------------- report


def summarize_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median seconds over the rounds; the rest (per kind, statuses) from the median round."""
    ordered = sorted(rounds, key=lambda r: r["seconds"])
    mid = dict(ordered[len(ordered) // 2])
    mid.pop("pages", None)
    mid["all_seconds"] = [round(r["seconds"], 3) for r in rounds]
    return mid


def markdown(r: dict[str, Any]) -> str:
    c, d, ip, pl, fl, ov = (
        r[k] for k in ("corpus", "direct", "in_process", "pool", "flow", "overlap")
    )
    lines = [
        "# Text extraction benchmark",
        "",
        f"Run {r['date']} on {r['machine']}; `python -m benchmarks.bench_extract"
        f"{' ' + ' '.join(r['argv']) if r['argv'] else ''}`.",
        "",
        f"Corpus: {c['files']} files, {c['mb']:.1f} MB, {c['pages']} pages "
        f"({c['originals']} distinct documents x {c['copies']} copies: the shared fixtures, "
        "the demo samples and generated Korean PDF/DXF/DOCX).",
        "",
        "## Throughput (same files, one after the other in one run)",
        "",
        "| contender | wall s | files/s | pages/s | MB/s | vs direct |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, sec in (
        ("direct: best library, 1 process", d["seconds"]),
        ("in-process: extract_document, 1 process", ip["seconds"]),
        (f"pool: {pl['workers']} warm workers", pl["seconds"]),
        ("flow: extract-batch tasks (stage wall)", fl["seconds"]),
    ):
        lines.append(
            f"| {label} | {sec:.2f} | {c['files'] / sec:.0f} | {c['pages'] / sec:.0f} "
            f"| {c['mb'] / sec:.2f} | {d['seconds'] / sec:.2f}x |"
        )
    ideal = ip["seconds"] / pl["workers"]
    ra = {k: statistics.median(v) for k, v in r["ratios"].items()}
    lines += [
        "",
        f"Median of {r['rounds']} rounds; in each round the four contenders ran one after the "
        f"other on the same files, and the ratios below are medians of the per-round ratios. "
        f"Seconds per round: direct {d['all_seconds']}, in-process {ip['all_seconds']}, "
        f"pool {pl['all_seconds']}, flow {fl['all_seconds']}.",
        "",
        f"- Pool vs the best library in one process: **{ra['pool_vs_direct']:.2f}x** "
        f"(target >= 1.7x); vs our own extractor in one process: "
        f"**{ra['pool_vs_in_process']:.2f}x** ({pl['workers']} workers).",
        f"- Pool overhead against perfect scaling of the in-process time over "
        f"{pl['workers']} workers ({ideal:.2f} s): {100 * (pl['seconds'] / ideal - 1):.1f} %.",
        f"- Orchestration overhead of the flow stage (Prefect tasks, timing rows, Parquet parts, "
        f"the unchanged-check query) over the bare pool: "
        f"**{100 * ra['flow_overhead']:.1f} %** (target <= 10 %).",
        f"- Pool start-up (its first jobs: the fork server, started with subprocess, "
        f"importing the parsers; {pl['workers']} workers forked from it): "
        f"{pl['start_seconds']:.2f} s, then a warm-up pass over one copy of the corpus "
        f"({pl['warmup_seconds']:.2f} s), both paid once per run (its pool) and not in the figures "
        "above; a replaced worker is forked from the warm fork server.",
        f"- Outcomes: {pl['statuses']}.",
        "",
        "CPU time (user + system; for the pool, its workers' and this process's) does not "
        "depend on what else runs on the machine; when the machine is busy the wall times "
        "above understate what two free cores do, and the CPU figures give the capacity they "
        "would have:",
        "",
        "| contender | CPU s | files per CPU-s | capacity on 2 free cores vs direct |",
        "|---|---:|---:|---:|",
        f"| direct | {d['cpu']:.2f} | {c['files'] / d['cpu']:.0f} | 1.00x |",
        f"| in-process | {ip['cpu']:.2f} | {c['files'] / ip['cpu']:.0f} | "
        f"{d['cpu'] / ip['cpu']:.2f}x |",
        f"| pool, {pl['workers']} workers | {pl['cpu']:.2f} | {c['files'] / pl['cpu']:.0f} | "
        f"{pl['workers'] * d['cpu'] / pl['cpu']:.2f}x |"
        if pl["cpu"] == pl["cpu"]  # not NaN
        else f"| pool, {pl['workers']} workers | n/a (a worker was recycled) | | |",
        "",
        "Per kind (in-process extractor vs direct library, one process):",
        "",
        "| kind | files | MB | pages | direct s | in-process s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, k in sorted(c["by_kind"].items()):
        lines.append(
            f"| {kind} | {k['files']} | {k['mb']:.2f} | {k['pages']} | "
            f"{d['per_kind'].get(kind, 0):.2f} | {ip['per_kind'].get(kind, 0):.2f} |"
        )
    lines += [
        "",
        "## Download + extract: overlapped vs one after the other",
        "",
        f"moto dev server with {ov['latency_ms']:g} ms added per request, "
        f"{ov['concurrency']} requests in flight, batches of {BATCH}, 4 runner threads (as the "
        "flow); plain functions, no Prefect.",
        "",
        "| mode | wall s |",
        "|---|---:|",
        f"| download only | {ov['download_seconds']:.2f} |",
        f"| extract only | {ov['extract_seconds']:.2f} |",
        f"| download, then extract | {ov['sequential_seconds']:.2f} |",
        f"| overlapped (extract batch i while later batches download) | "
        f"{ov['overlapped_seconds']:.2f} |",
        "",
        f"Overlapped / (download + extract), median of the per-round ratios: "
        f"**{statistics.median(ov['ratios']):.2f}** (below 1 means faster than the sum of its "
        f"stages); rounds: {[round(x, 2) for x in ov['ratios']]}.",
    ]
    s = r.get("search")
    if s:
        lines += [
            "",
            f"## Search on {s['documents']:,} documents",
            "",
            f"{s['text_mb']} MB of generated Korean/English text in 100 Parquet parts. "
            f"Index build (`refresh_index`, from Parquet): {s['build_seconds']:.1f} s; "
            f"index file {s['index_mb']:.0f} MB; a refresh with nothing new: "
            f"{s['noop_refresh_seconds'] * 1000:.1f} ms.",
            "",
            "| query | median ms | hits |",
            "|---|---:|---:|",
        ]
        for q, ms in s["query_ms"].items():
            lines.append(f"| `{q}` | {ms:.1f} | {s['query_hits'][q]} |")
        lines += [
            "",
            f"Documents matching `도면` / `valve`: {s['matching_documents']['도면']:,} / "
            f"{s['matching_documents']['valve']:,} (a ranked query scores every match). "
            f"The same conjunctive query as a DuckDB `ILIKE` scan of the Parquet files, "
            f"ordered by a crude count of the word (no Korean tokenizing, no BM25): "
            f"{s['duckdb_ilike_ms']:.0f} ms. One `search()` call with its refresh check, as "
            f"the CLI does: {s['cli_path_ms']:.1f} ms.",
        ]
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- DWG beside DXF


def drawing_pairs(folder: Path) -> list[tuple[str, Path, Path]]:
    """(label, DWG, DXF of the same drawing): the AutoCAD-saved set and a generated R2000."""
    import lzma

    from tests.ingest.extract.test_extract_dwg import r2000_pair

    folder.mkdir(parents=True, exist_ok=True)
    dwg2000, dxf2000 = r2000_pair(folder)
    pairs = [("generated R2000 (5 KB DWG)", dwg2000, dxf2000)]
    for version in DWG_RELEASES:
        dxf_version = DXF_OF.get(version, "AC1018")
        dxf = folder / f"sample_{dxf_version}_ascii.dxf"
        if not dxf.exists():
            packed = DWG_FIXTURES / f"acadsharp_sample_{dxf_version}_ascii.dxf.xz"
            dxf.write_bytes(lzma.decompress(packed.read_bytes()))
        dwg = folder / f"sample_{version}.dwg"
        packed = DWG_FIXTURES / f"acadsharp_sample_{version}.dwg.xz"
        dwg.write_bytes(lzma.decompress(packed.read_bytes()))
        pairs.append((f"AutoCAD sample {version} (DXF {dxf_version})", dwg, dxf))
    return pairs


def via_to_dxf(dwg: Path, out: Path) -> Any:
    """ezdwg's own route: write a DXF with ``to_dxf``, read it back with our DXF path."""
    import ezdwg

    from ingest.extract.dxf import extract_dxf

    ezdwg.clear_decode_caches()
    ezdwg.to_dxf(ezdwg.read(str(dwg)), str(out))
    return extract_dxf(out.read_bytes())


def run_drawings(work: Path, rounds: int, copies: int) -> dict[str, Any]:
    from collections import Counter

    from ingest.extract import extract_document
    from ingest.extract.batch import extract_batch, pool_config
    from ingest.extract.pool import WorkerPool
    from ingest.settings import Settings

    pairs = drawing_pairs(work / "drawings")
    for _label, dwg, dxf in pairs:  # warm imports and caches
        extract_document(dwg), extract_document(dxf)
    per: dict[str, dict[str, list[float]]] = {label: defaultdict(list) for label, *_ in pairs}
    lost: dict[str, dict[str, int]] = {}
    for _ in range(rounds):
        for label, dwg, dxf in pairs:
            cpu = time.process_time()
            t, got = timed(lambda d=dwg: extract_document(d))
            per[label]["dwg"].append(t)
            per[label]["dwg_cpu"].append(time.process_time() - cpu)
            cpu = time.process_time()
            t, want = timed(lambda d=dxf: extract_document(d))
            per[label]["dxf"].append(t)
            per[label]["dxf_cpu"].append(time.process_time() - cpu)
            t, routed = timed(lambda d=dwg: via_to_dxf(d, work / "routed.dxf"))
            per[label]["to_dxf"].append(t)
            have, ours, theirs = (Counter(x.text.split("\n")) for x in (want, got, routed))
            lost[label] = {
                "ours": sum((have - ours).values()),
                "to_dxf": sum((have - theirs).values()),
                "to_dxf_layouts": len(routed.metadata["layouts"]),
                "layouts": len(got.metadata["layouts"]),
            }
    # The pool: the AutoCAD-saved drawings, ``copies`` times, as DWG and as the DXF.
    folder = work / "copies"
    folder.mkdir()
    dwgs, dxfs = [], []
    for i in range(copies):
        for _label, dwg, dxf in pairs[1:]:
            target = folder / f"{i:03d}-{dwg.name}"
            shutil.copyfile(dwg, target)
            dwgs.append(target)
            target = folder / f"{i:03d}-{dwg.stem}.dxf"
            shutil.copyfile(dxf, target)
            dxfs.append(target)
    settings = Settings(data_dir=work / "data")
    pooled: dict[str, list[float]] = defaultdict(list)
    pooled_cpu: dict[str, list[float]] = defaultdict(list)
    with WorkerPool(fenced_for(pool_config(settings.extracting), [*dwgs, *dxfs])) as pool:
        pool.map("os:getpid", [()] * pool.config.size)
        extract_batch(
            settings.extracting, "bench", batches_of(dwgs[:5] + dxfs[:5])[0], run_id="w", pool=pool
        )
        for _ in range(rounds):
            for kind, files in (("dwg", dwgs), ("dxf", dxfs)):
                result = run_pool(files, settings, pool)
                assert result["statuses"] == {"ok": len(files)}, result["statuses"]
                pooled[kind].append(result["seconds"])
                pooled_cpu[kind].append(result["cpu"])
        workers = pool.config.size
    return {
        "pairs": [
            {
                "label": label,
                "dwg_kb": dwg.stat().st_size / 1e3,
                "dxf_kb": dxf.stat().st_size / 1e3,
                **{k: statistics.median(v) for k, v in per[label].items()},
                "lost": lost[label],
            }
            for label, dwg, dxf in pairs
        ],
        "pool": {
            "files": len(dwgs),
            "workers": workers,
            **{k: statistics.median(v) for k, v in pooled.items()},
            "cpu": {k: statistics.median(v) for k, v in pooled_cpu.items()},
            "ratios": [d / x for d, x in zip(pooled["dwg"], pooled["dxf"], strict=True)],
        },
    }


def drawings_markdown(r: dict[str, Any]) -> str:
    p = r["pool"]
    lines = [
        "# DWG beside DXF: extraction throughput",
        "",
        f"Run {r['date']} on {r['machine']}; `{r['command']}`.",
        "",
        "The same drawing as DWG and as DXF: AutoCAD's sample drawing saved in "
        f"{len(DWG_RELEASES)} DWG releases and as ASCII DXF R2000 (paired with the R2000 DWG) "
        "and R2004 (paired with the others) (ACadSharp, `tests/fixtures/dwg`), and an R2000 "
        "drawing generated as both (ezdwg's writer, ezdxf). Each drawing goes through "
        "`extract_document` (DWG: ezdwg into the ezdxf model, then the DXF walk; DXF: "
        "ezdxf's reader, then the same walk). `to_dxf` is ezdwg's own route (write a DXF, "
        "read it back), measured as the alternative and not taken. Median of "
        f"{r['rounds']} alternating rounds, one process.",
        "",
        "| drawing | DWG KB | DXF KB | DWG s | DXF s | DWG/s | DXF/s | DWG vs DXF "
        "| CPU s: DWG / DXF | to_dxf s | lines lost: ours / to_dxf | layouts: ours / to_dxf |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d in r["pairs"]:
        lost = d["lost"]
        lines.append(
            f"| {d['label']} | {d['dwg_kb']:.0f} | {d['dxf_kb']:.0f} | {d['dwg']:.3f} "
            f"| {d['dxf']:.3f} | {1 / d['dwg']:.1f} | {1 / d['dxf']:.1f} "
            f"| {d['dxf'] / d['dwg']:.2f}x | {d['dwg_cpu']:.3f} / {d['dxf_cpu']:.3f} "
            f"| {d['to_dxf']:.3f} "
            f"| {lost['ours']} / {lost['to_dxf']} | {lost['layouts']} / {lost['to_dxf_layouts']} |"
        )
    lines += [
        "",
        "\"DWG vs DXF\" is the DXF's time over the DWG's (above 1: the DWG is faster). "
        "\"Lines lost\" counts text lines the DXF's extraction has and the route's has not "
        "(ours: the sample's MULTILEADER text, 35 lines, which ezdwg does not read, and in "
        "AC1032 the multi-line attribute whose tag AutoCAD renamed when it saved the R2004 "
        'DXF; to_dxf: also lines of MTEXT left with their formatting codes). "Layouts": '
        "to_dxf writes model space only, so every paper space sheet and its title block is "
        "lost.",
        "",
        f"On the warm pool ({p['workers']} workers, batches of {BATCH} from two threads as "
        f"the flow submits them), {p['files']} drawings (the {len(DWG_RELEASES)} "
        f"AutoCAD-saved DWGs, {p['files'] // len(DWG_RELEASES)} copies) against as many "
        "copies of their DXFs: DWG "
        f"{p['dwg']:.2f} s ({p['files'] / p['dwg']:.1f} drawings/s), DXF {p['dxf']:.2f} s "
        f"({p['files'] / p['dxf']:.1f} drawings/s); DWG time / DXF time per round: "
        + ", ".join(f"{x:.2f}" for x in p["ratios"])
        + f". CPU seconds (workers and this process): DWG {p['cpu']['dwg']:.2f}, DXF "
        f"{p['cpu']['dxf']:.2f}: on two free cores, about "
        f"{2 * p['files'] / p['cpu']['dwg']:.1f} and {2 * p['files'] / p['cpu']['dxf']:.1f} "
        "drawings/s.",
        "",
        "CPU time depends less than wall time on what else runs on the machine (see the "
        "load average above).",
        "",
    ]
    return "\n".join(lines)


def main_drawings(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    sys.path.insert(0, str(ROOT))
    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="extract-dwg-", dir=WORK))
    try:
        copies = 2 if args.quick else 8
        result = run_drawings(work, 1 if args.quick else args.rounds, copies)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result |= {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, load average at start "
        f"{os.getloadavg()[0]:.1f} (a machine shared with other engineers' runs)",
        "command": "python -m benchmarks.bench_extract "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "rounds": 1 if args.quick else args.rounds,
    }
    (WORK / "extract-dwg.json").write_text(json.dumps(result, indent=1, default=str))
    text = drawings_markdown(result)
    if not args.no_write:
        OUT_DWG.write_text(text)
    print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from ingest import catalog

    catalog.load()  # every table, as the command and a run load them
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--drawings", action="store_true", help="only DWG beside DXF (writes extract-dwg.md)"
    )
    parser.add_argument("--copies", type=int, default=12, help="copies of each document")
    parser.add_argument("--search-docs", type=int, default=100_000)
    parser.add_argument("--latency-ms", type=float, default=40.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite extract.md")
    parser.add_argument(
        "--batch", type=int, default=BATCH, help="objects per batch task (the flow's default: 250)"
    )
    args = parser.parse_args(argv)
    globals()["BATCH"] = args.batch
    if args.drawings:
        return main_drawings(args, argv)
    if args.quick:
        args.copies, args.search_docs, args.rounds = 2, 2_000, 1
    sys.path.insert(0, str(ROOT))
    from ingest.settings import Settings

    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="extract-", dir=WORK))
    pool_obj = None
    try:
        files = build_corpus(work / "corpus", args.copies)
        kinds = {f: kind_of(f) for f in files}
        settings = Settings(data_dir=work / "data")
        run_direct(files[: len(files) // args.copies], kinds)  # warm imports and caches
        started = start_pool(files, settings, args.copies)
        pool_obj = started.pop("pool")
        series: dict[str, list[dict[str, Any]]] = defaultdict(list)
        # Contenders alternate within each round and ratios are taken within a round, so a
        # burst of load from other processes on this shared machine hits both sides alike.
        for r in range(args.rounds):
            series["direct"].append(run_direct(files, kinds))
            series["in_process"].append(run_in_process(files, kinds))
            series["pool"].append(run_pool(files, settings, pool_obj))
            series["flow"].append(run_flow(files, settings, work / f"flow-{r}", pool_obj))
            print({k: round(v[-1]["seconds"], 2) for k, v in series.items()}, flush=True)
        direct, in_process, pool, flow = (
            summarize_rounds(series[k]) for k in ("direct", "in_process", "pool", "flow")
        )
        pool |= started
        ratios = {
            "pool_vs_direct": [
                d["seconds"] / p["seconds"]
                for d, p in zip(series["direct"], series["pool"], strict=True)
            ],
            "pool_vs_in_process": [
                i["seconds"] / p["seconds"]
                for i, p in zip(series["in_process"], series["pool"], strict=True)
            ],
            "flow_overhead": [
                f["seconds"] / p["seconds"] - 1
                for f, p in zip(series["flow"], series["pool"], strict=True)
            ],
        }
        overlap = run_overlap(
            files,
            settings,
            work / "overlap",
            args.latency_ms,
            args.concurrency,
            args.rounds,
            pool_obj,
        )
        print(f"overlap {overlap}", flush=True)
        pages = series["in_process"][0]["pages"]
        result: dict[str, Any] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{platform.system()} {platform.machine()}, load average at start "
            f"{os.getloadavg()[0]:.1f} (a machine shared with other engineers' runs)",
            "argv": list(argv if argv is not None else sys.argv[1:]),
            "corpus": {
                "files": len(files),
                "copies": args.copies,
                "originals": len(files) // args.copies,
                "mb": sum(f.stat().st_size for f in files) / 1e6,
                "pages": sum(pages.values()),
                "by_kind": by_kind(files, kinds, pages),
            },
            "direct": direct,
            "in_process": in_process,
            "pool": pool,
            "flow": flow,
            "overlap": overlap,
            "ratios": ratios,
            "rounds": args.rounds,
        }
        if not args.skip_search:
            result["search"] = run_search(work, args.search_docs, parts=100)
            print(f"search {result['search']}", flush=True)
        (WORK / "extract.json").write_text(json.dumps(result, indent=1, default=str))
        text = markdown(result)
        if not args.no_write:
            OUT.write_text(text)
        print(text)
    finally:
        if pool_obj is not None:
            pool_obj.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
