"""DuckDB over a lake on object storage: which reader, side by side.

The same ``documents`` table (``--rows`` rows of ``--text-chars`` of text each, 16
``part`` partitions, written by ``ingest.storage.lake.merge``) on a local disk and on
the local S3 server (moto, ``--latency-ms`` added to every request), read by DuckDB
1.5.6 four ways, each
opening the table and running the query from scratch every time (as one
``ingest query`` would):

* ``local files``: the local lake, DuckDB's ``read_parquet`` over the table's files
  (what a local lake uses; the reference);
* ``delta-rs arrow``: the s3 lake, delta-rs's pyarrow dataset of the current version
  registered in DuckDB (what an s3 lake uses: filters and columns pushed down, only
  the row groups needed are fetched, through delta-rs's own object-store client);
* ``delta-rs table``: the s3 lake read whole into Arrow by delta-rs
  (``to_pyarrow_table``), then queried: a download of the table per query;
* ``pyarrow s3fs``: the s3 lake's files (from the Delta log) read by a pyarrow dataset on
  ``pyarrow.fs.S3FileSystem``, Arrow's own S3 client.

DuckDB's own ``httpfs``/``delta`` extensions are not a contender: they would be
downloaded at run time, and the registry's packages are built for DuckDB 1.5.5
(``duckdb-extension-*``) and 1.4.4 (``duckdb-ext-*``), not for the pinned 1.5.6.

Run: ``.venv/bin/python -m benchmarks.bench_lake [--rows 50000] [--latency-ms 20]``.
Prints a Markdown table and writes ``benchmarks/results/lake-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack, closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from dev.servers.s3 import DevServer
from ingest import duck
from ingest.settings import Settings
from ingest.storage import lake, warehouse
from ingest.storage.location import LakeSession
from ingest.storage.tables import SPECS

QUERIES = {
    "count(*)": "SELECT count(*) FROM t",
    "one key": "SELECT etag, chars FROM t WHERE bucket = 'b' AND key = 'docs/0000123.pdf'",
    "2 columns, group": "SELECT status, sum(chars) FROM t GROUP BY status ORDER BY 1",
    "text search": "SELECT count(*) FROM t WHERE text LIKE '%valve v-1234 %'",
}
WORDS = ["drawing", "valve", "pump", "floor", "plan", "section", "elevation", "detail", "note"]


def rows(n: int, text_chars: int) -> pa.Table:
    """``documents`` rows with ``text_chars`` of seeded text each (compresses ~3x)."""
    rng = random.Random(7)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < text_chars:
            words.append(rng.choice(WORDS) if rng.random() < 0.8 else f"v-{rng.randrange(10**4)}")
        out.append(
            {
                "bucket": "b",
                "key": f"docs/{i:07d}.pdf",
                "etag": f"{i:032x}",
                "kind": "pdf",
                "status": ("extracted", "failed", "deleted")[i % 3],
                "pages": 1 + i % 20,
                "chars": text_chars,
                "text": " ".join(words) + " ",
                "extractor": "bench",
                "run_id": "bench",
                "extracted_at": t0 + timedelta(seconds=i),
            }
        )
    return pa.Table.from_pylist(out)


_peak = 0


def run(con_sql: Callable[[], tuple[Any, str]], sql: str, relations: duck.Relations) -> list[Any]:
    """Open the table and run ``sql`` (in a connection with the lake session's
    ``relations``); ``_peak``: the Arrow bytes held once it is open (a table read whole
    holds it all; a dataset holds nothing until scanned)."""
    global _peak
    data, body = con_sql()
    _peak = pa.total_allocated_bytes()
    with duck.connect(relations=relations) as con:
        if data is not None:
            con.register("src", data)
        con.execute(f"CREATE TEMP VIEW t AS {body}")
        return con.execute(sql).fetchall()


def main(argv: list[str] | None = None) -> None:
    from ingest import catalog

    catalog.load()  # every table, as the command and a run load them
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--text-chars", type=int, default=2000)
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench-secret")
    table = "documents"
    spec = SPECS[table]
    data = rows(a.rows, a.text_chars)
    with (
        ExitStack() as stack,
        tempfile.TemporaryDirectory() as tmp,
        DevServer(latency_ms=a.latency_ms) as server,
    ):
        boto3.client("s3", endpoint_url=server.url, region_name="us-east-1").create_bucket(
            Bucket="bench-lake"
        )
        local = Path(tmp) / "local"
        remote = Settings(
            data_dir="s3://bench-lake/lake", lake={"endpoint_url": server.url}, local_dir=Path(tmp)
        ).location
        # As a run or a command reaches its lake: through one session (credentials and
        # client resolved once), closed at the end.
        remote = remote.bound(stack.enter_context(closing(LakeSession(remote))))
        lake.merge(local, table, data)
        lake.merge(remote, table, data)
        opts = remote.storage_options()
        s3fs = pafs.S3FileSystem(
            endpoint_override=server.url,
            scheme="http",
            access_key=opts["AWS_ACCESS_KEY_ID"],
            secret_key=opts["AWS_SECRET_ACCESS_KEY"],
            region="us-east-1",
        )

        def local_files() -> tuple[Any, str]:
            return None, warehouse.table_sql(local, table)

        def delta_arrow() -> tuple[Any, str]:
            return None, warehouse.table_sql(remote, table)

        def delta_table() -> tuple[Any, str]:
            dt = lake.open_table(remote, table)
            assert dt is not None
            return dt.to_pyarrow_table(), warehouse.arrow_view_sql(spec, "src")

        def pyarrow_s3fs() -> tuple[Any, str]:
            dt = lake.open_table(remote, table)
            assert dt is not None
            paths = [u.removeprefix("s3://") for u in dt.file_uris()]
            ds = pads.dataset(paths, filesystem=s3fs, format="parquet", partitioning="hive")
            return ds, warehouse.arrow_view_sql(spec, "src")

        contenders = {
            "local files": local_files,
            "delta-rs arrow": delta_arrow,
            "delta-rs table": delta_table,
            "pyarrow s3fs": pyarrow_s3fs,
        }
        results: dict[str, dict[str, dict[str, float]]] = {}
        answers: dict[str, list[Any]] = {}
        for name, how in contenders.items():
            results[name] = {}
            for label, sql in QUERIES.items():
                walls, gets, peaks = [], [], []
                for _ in range(a.repeat):
                    server.reset_stats()
                    pa.default_memory_pool().release_unused()
                    before = pa.total_allocated_bytes()
                    t = time.perf_counter()
                    got = run(how, sql, remote.relations)
                    walls.append(time.perf_counter() - t)
                    gets.append(server.stats().get("GET object", 0))
                    peaks.append(max(0, _peak - before))
                    if answers.setdefault(label, got) != got:
                        raise SystemExit(f"{name} answered {label} differently: {got}")
                results[name][label] = {
                    "seconds": statistics.median(walls),
                    "gets": statistics.median(gets),
                    "arrow_mb": statistics.median(peaks) / 1e6,
                }
    reference = results["delta-rs arrow"]
    print(f"\n{a.rows:,} rows, {a.latency_ms:g} ms per request; median of {a.repeat}\n")
    print("| reader | " + " | ".join(QUERIES) + " |")
    print("|---|" + "---|" * len(QUERIES))
    for name, per in results.items():
        cells = [
            f"{v['seconds']:.3f} s ({v['seconds'] / reference[q]['seconds']:.2f}x), "
            f"{v['gets']:.0f} GET, {v['arrow_mb']:.0f} MB"
            for q, v in per.items()
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    out = Path(__file__).parent / "results" / f"lake-{datetime.now(UTC):%Y-%m-%dT%H%M}.json"
    out.write_text(
        json.dumps(
            {
                "table": table,
                "rows": a.rows,
                "text_chars": a.text_chars,
                "latency_ms": a.latency_ms,
                "repeat": a.repeat,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
                "results": results,
            },
            indent=1,
        )
    )
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
