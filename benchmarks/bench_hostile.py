"""Hostile input: what the pipeline does with inputs made to leak, exhaust or escape.

Every probe runs the project's own code against real servers on loopback (the REST dev
server, an HTTP server that records what reaches it, the S3 dev server, real Prefect flow
runs in a test harness, a real extraction pool, real DuckDB) and counts, per input:

* trials, and the runs that ended as they should (the failure stays that item's: a row,
  a failed page or listing, a refused statement; the rest of the run goes on);
* secrets seen outside their origin (a credential the client added, reaching the
  recording server, or a secret of the flow's environment readable by a parser): target 0;
* files written outside the roots (anything under the probe's folder beside the data and
  download folders, or a lake file changed by a query): target 0.

Run ``python -m benchmarks.bench_hostile``; the table is printed and appended to
benchmarks/hostile.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.bench_commands import machine

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "hostile.md"
API_KEY = "probe-api-key-0123456789"  # fake
TOKEN = "ghp_" + "p" * 36  # fake
SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "probe-aws-secret-0123456789",
    "GITHUB_TOKEN": TOKEN,
    "PREFECT_API_KEY": "pnu_probe_0123456789",
    "PREFECT_API_AUTH_STRING": "admin:probe-0123456789",
    "TRACKER_API_KEY": API_KEY,
}


@dataclass
class Row:
    name: str
    trials: int = 0
    ended: int = 0
    secrets: int = 0
    outside: int = 0
    notes: list[str] = field(default_factory=list)

    def trial(self, ok: bool, *, secrets: int = 0, outside: int = 0) -> None:
        self.trials += 1
        self.ended += bool(ok)
        self.secrets += secrets
        self.outside += outside


class Recorder:
    """An HTTP server on loopback answering ``routes`` (path -> status, headers, body) and
    keeping every request line and header it received."""

    def __init__(self, routes: dict[str, tuple[int, dict[str, str], bytes]]) -> None:
        self.routes = routes
        self.seen: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                outer.seen.append(self.path + "\n" + str(self.headers))
                status, headers, body = outer.routes.get(
                    self.path.split("?")[0], (200, {}, b'{"data": [], "next_cursor": null}')
                )
                self.send_response(status)
                for k, v in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def leaks(self, *secrets: str) -> int:
        return sum(any(s in seen for s in secrets) for seen in self.seen)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def source(
    url: str,
    auth: dict[str, Any],
    *,
    paginator: dict[str, Any] | None = None,
    selector: str | None = "data",
    max_pages: int = 100_000,
    extra: bool = False,
) -> Any:
    from ingest.rest.source import parse_source

    resources = [{"name": "tickets", "endpoint": {"path": "tickets"}, "max_pages": max_pages}]
    if extra:
        resources.append({"name": "projects", "endpoint": {"path": "projects"}})
    spec = {
        "name": "tracker",
        "client": {
            "base_url": url,
            "auth": auth,
            "paginator": paginator or {"type": "cursor", "cursor_path": "next_cursor"},
            "rate_limit": {"backoff": 0.05, "max_wait": 30},
        },
        "resource_defaults": {"primary_key": "id", "endpoint": {"data_selector": selector}},
        "resources": resources,
    }
    return parse_source(json.dumps(spec), "probe.yaml")


def fetch(folder: Path, src: Any, **settings: Any) -> Any:
    from ingest.rest.config import RestConfig
    from ingest.rest.run import fetch_source
    from ingest.settings import Settings

    rest = {"retry_base": 0.01, "retry_cap": 0.05, "max_attempts": 2}
    settings = Settings(data_dir=folder, rest=rest, **settings)
    return fetch_source(RestConfig.of(settings), src, run_id="probe")


def fresh(base: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=base))


HEADER = {"type": "api_key", "name": "X-API-Key", "env": "TRACKER_API_KEY"}
QUERY = {"type": "api_key", "name": "api_key", "location": "query", "env": "TRACKER_API_KEY"}


def probe_redirects(base: Path, rows: list[Row]) -> None:
    from dev.servers.rest import DevRest
    from ingest.rest.client import RestClient
    from ingest.rest.ratelimit import RateLimitGovernor, RetryPolicy
    from ingest.rest.transport import make_http
    from ingest.security import endpoint_of

    for name, auth in (("API key header", HEADER), ("API key in the query", QUERY)):
        row = Row(f"redirect to an allowed other origin, {name} (301/302/303/307/308)")
        for code in (301, 302, 303, 307, 308):
            recorder = Recorder({})
            fault = {"kind": "redirect", "match": "/tickets", "to": recorder.url, "times": 99}
            with DevRest(api_key=API_KEY, projects=1, faults=[fault]) as api:
                # the dev server answers 302; the other codes come from a recorder in front
                front = Recorder(
                    {
                        "/tickets": (
                            code,
                            {"Location": f"{recorder.url}/tickets?api_key={API_KEY}"},
                            b"",
                        )
                    }
                )
                # the other origin is one the operator allows (INGEST_ALLOWED_HOSTS): any
                # other is refused before a request (probe_hops_refused)
                allowed = {"allowed_hosts": [recorder.url]}
                summary = fetch(fresh(base), source(front.url, auth), **allowed)
                summary2 = fetch(fresh(base), source(api.url, auth), **allowed)
            row.trial(
                bool(recorder.seen) and summary.complete and summary2.complete,
                secrets=recorder.leaks(API_KEY),
            )
            front.close()
            recorder.close()
        rows.append(row)

    row = Row("redirect to an allowed other origin, GitHub bearer token (301/302/303/307/308)")
    for code in (301, 302, 303, 307, 308):
        recorder = Recorder({"/elsewhere": (200, {}, b"[]")})
        origin = Recorder(
            {"/repos/o/r/pulls": (code, {"Location": f"{recorder.url}/elsewhere"}, b"")}
        )

        async def get(url: str = origin.url, other: str = recorder.url) -> Any:
            async with make_http(
                url, headers={}, concurrency=2, timeout=5.0, credentials=bearer(TOKEN)
            ) as http:
                gh = RestClient(
                    http,
                    RateLimitGovernor(),
                    RetryPolicy(max_attempts=1),
                    allowed_hops=frozenset({endpoint_of(other)}),
                )
                return (await gh.get("/repos/o/r/pulls")).data

        data = asyncio.run(get())
        row.trial(data == [] and bool(recorder.seen), secrets=recorder.leaks(TOKEN, "uthorization"))
        origin.close()
        recorder.close()
    rows.append(row)


def child_rss(code: str) -> tuple[dict[str, Any], float]:
    """Run ``code`` in a fresh interpreter; its printed JSON and its peak RSS in MB."""
    wrapper = (
        code + "\nimport resource\nprint('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", wrapper],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    ).stdout.splitlines()
    rss = next(float(line.split()[1]) / 1024 for line in out if line.startswith("RSS "))
    result = json.loads(next(line for line in out if line.startswith("{")))
    return result, rss


def probe_bounded_api(base: Path, rows: list[Row]) -> None:
    from dev.servers.rest import DevRest

    row = Row("100 MB page (cap 64 MB, the default)")
    code = f"""
import json, os, sys
from pathlib import Path
from benchmarks.bench_hostile import fetch, source, HEADER
from dev.servers.rest import DevRest
os.environ["TRACKER_API_KEY"] = {API_KEY!r}
fault = {{"kind": "huge_body", "match": "/tickets", "size": 100 * 1024 * 1024, "times": 99}}
with DevRest(api_key={API_KEY!r}, projects=1, faults=[fault]) as api:
    s = fetch(Path({str(fresh(base))!r}), source(api.url, HEADER, extra=True))
print(json.dumps({{"failed": s.failed_pages, "records": s.records, "complete": s.complete}}))
"""
    for _ in range(2):
        result, rss = child_rss(code)
        ok = result["failed"] == 1 and result["records"] == 1 and not result["complete"]
        row.trial(ok)
        row.notes.append(f"peak RSS {rss:.0f} MB" + ("" if ok else f" ({result})"))
    rows.append(row)

    for pages in (10**6, 10**9):
        row = Row(f'a total or rel="last" announcing {pages:.0e} pages (max_pages 1000)')
        for kind in ("header_link", "page_number", "offset"):
            paginator = {
                "header_link": {"type": "header_link"},
                "page_number": {
                    "type": "page_number",
                    "base_page": 1,  # the dev server numbers pages from 1
                    "page_size": 5,
                    "total_path": "total_pages",
                },
                "offset": {"type": "offset", "limit": 5, "total_path": "total"},
            }[kind]
            fault = {"kind": "huge_total", "match": "/tickets", "pages": pages, "times": 1}
            with DevRest(
                api_key=API_KEY,
                projects=1,
                tickets_per_project=40,
                paginator=kind,
                default_page_size=5,
                faults=[fault],
            ) as api:
                start = time.perf_counter()
                summary = fetch(
                    fresh(base),
                    source(
                        api.url,
                        HEADER,
                        paginator=paginator,
                        selector=None if kind == "header_link" else "data",
                        max_pages=1000,
                    ),
                )
                seconds = time.perf_counter() - start
                requests = api.stats()["requests"]
            row.trial(requests == 1000 and not summary.complete)
            row.notes.append(f"{kind} {seconds:.1f} s")
        rows.append(row)

    row = Row("JSON nested 100,000 deep")
    for _ in range(3):
        fault = {"kind": "deep_json", "match": "/tickets", "depth": 100_000, "times": 99}
        with DevRest(api_key=API_KEY, projects=2, faults=[fault]) as api:
            summary = fetch(fresh(base), source(api.url, HEADER, extra=True))
        row.trial(summary.records == 2 and not summary.complete)
    rows.append(row)


def bearer(token: str | None) -> dict[str, str] | None:
    """The header GitHub's dialect sends its token in."""
    return {"Authorization": f"Bearer {token}"} if token else None


@contextmanager
def harness() -> Iterator[None]:
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def outside(root: Path, allowed: set[str]) -> int:
    return sum(
        1 for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] not in allowed
    )


def probe_s3(base: Path, rows: list[Row]) -> None:
    import boto3

    from dev.servers.s3 import DevServer
    from flows.s3_ingest import s3_ingest

    with DevServer() as server, harness():
        s3 = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")

        def run(bucket: str, objects: dict[str, bytes], **kw: Any) -> tuple[Any, Path]:
            s3.create_bucket(Bucket=bucket)
            for k, v in objects.items():
                s3.put_object(Bucket=bucket, Key=k, Body=v)
            folder = fresh(base)
            summary = s3_ingest(
                bucket=bucket,
                endpoint_url=server.url,
                data_dir=str(folder / "data"),
                download_dir=str(folder / "downloads"),
                **kw,
            )
            return summary, folder

        fine = {f"docs/ok-{i:02d}.txt": b"fine" for i in range(40)}
        row = Row("prefix without /: docs/a.txt beside docsa.txt, docs2/a.txt, docs")
        for i in range(3):
            objects = {"docs/a.txt": b"A", "docsa.txt": b"B", "docs2/a.txt": b"C", "docs": b"D"}
            summary, folder = run(f"probe-prefix-{i}", objects, prefix="docs")
            on_disk = (folder / "downloads" / "a.txt").read_bytes()
            row.trial(
                summary.counts == {"downloaded": 1} and on_disk == b"A",
                outside=outside(folder, {"data", "downloads"}),
            )
        rows.append(row)

        row = Row("keys that climb out: ../, //, \\, control characters, ./")
        hostile = [
            "docs/../../escape.txt",
            "docs/a//b.txt",
            "docs/back\\slash.txt",
            "docs/ctl\x01.txt",
            "docs/./dot",
            "docs/.ingest-tmp/x",
        ]
        for i in range(2):
            more = {f"docs/more-{n:02d}.txt": b"fine" for n in range(30)}  # failures under 10 %
            summary, folder = run(
                f"probe-climb-{i}", {k: b"evil" for k in hostile} | fine | more, prefix="docs/"
            )
            row.trial(
                summary.counts == {"downloaded": 70, "failed": len(hostile)},
                outside=outside(folder, {"data", "downloads"}),
            )
        rows.append(row)

        row = Row("keys equal but for case or normal form, s3_refuse_folded_collisions on")
        os.environ["INGEST_S3_REFUSE_FOLDED_COLLISIONS"] = "true"
        try:
            for i in range(2):
                pairs = {
                    "docs/Report.txt": b"R",
                    "docs/report.txt": b"r",
                    unicodedata.normalize("NFC", "docs/café.txt"): b"c",
                    unicodedata.normalize("NFD", "docs/café.txt"): b"d",
                }
                summary, folder = run(f"probe-fold-{i}", pairs | fine, prefix="docs/")
                row.trial(
                    summary.counts == {"downloaded": 42, "failed": 2},
                    outside=outside(folder, {"data", "downloads"}),
                )
        finally:
            del os.environ["INGEST_S3_REFUSE_FOLDED_COLLISIONS"]
        rows.append(row)

        row = Row("download folder over the lake (data/, data/lake, data/..)")
        for i, where in enumerate(("data", "data/lake", ".")):
            s3.create_bucket(Bucket=f"probe-over-{i}")
            s3.put_object(Bucket=f"probe-over-{i}", Key="s3_objects/_delta_log/x.json", Body=b"{}")
            folder = fresh(base)
            try:
                s3_ingest(
                    bucket=f"probe-over-{i}",
                    endpoint_url=server.url,
                    data_dir=str(folder / "data"),
                    download_dir=str(folder / where),
                )
                ok = False
            except ValueError:
                ok = True
            row.trial(ok, outside=sum(1 for p in folder.rglob("*.json")))
        rows.append(row)


def probe_query(base: Path, rows: list[Row]) -> None:
    from ingest import storage
    from ingest.storage.warehouse import ReadOnlyQueryError

    folder = fresh(base)
    now = datetime.now(UTC)
    row_ = {
        "bucket": "b",
        "key": "k",
        "etag": "e",
        "size": 1,
        "last_modified": now,
        "local_path": "/x/k",
        "status": "downloaded",
        "run_id": "r",
        "ingested_at": now,
    }
    storage.stage(folder, "r", "s3_objects", "p", [row_])
    storage.commit_run(folder, "r")
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    statements = [
        f"COPY s3_objects TO '{folder}/lake/s3_objects/evil.parquet' (FORMAT parquet)",
        f"COPY (SELECT 1) TO '{base}/out.csv'",
        f"ATTACH '{base}/x.duckdb' AS x",
        "INSTALL httpfs",
        "LOAD httpfs",
        "CREATE TABLE t AS SELECT 1",
        "DROP VIEW s3_objects",
        "CREATE OR REPLACE TEMP VIEW s3_objects AS SELECT 1",
        "SET enable_external_access=true",
        "SELECT 1; DROP VIEW s3_objects",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM glob('/etc/*')",
        f"SELECT * FROM read_parquet('{folder}/lake/s3_objects/**/*.parquet')",
        "CALL pragma_version()",
    ]
    row = Row(f"ingest query: {len(statements)} statements that write, attach, load or read files")
    for sql in statements:
        try:
            storage.query_read_only(folder, sql)
            ok = False
        except ReadOnlyQueryError:
            ok = True
        except Exception as exc:  # DuckDB's permission error for a file read
            ok = "disabled by configuration" in str(exc)
        after = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        changed = sum(before.get(p) != b for p, b in after.items()) + len(set(before) - set(after))
        stray = sum(1 for p in base.glob("out.csv")) + sum(1 for p in base.glob("x.duckdb"))
        row.trial(ok, outside=changed + stray)
    rows.append(row)


def probe_extraction(base: Path, rows: list[Row]) -> None:
    from ingest.extract.batch import extract_batch
    from ingest.extract.pool import PoolConfig, WorkerPool
    from ingest.settings import Settings

    folder = fresh(base)
    marks = folder / "marks.txt"
    marks.write_text("a" + "\u0301" * 250_000 + "\u0323" * 250_000, encoding="utf-8")
    big = folder / "big.txt"
    big.write_text("abcdefghij\n" * 3_000_000, encoding="utf-8")  # 33 MB, 33 M characters
    row = Row("text of 500,000 combining marks (1 MB; time limit 120 s)")
    with WorkerPool(PoolConfig(workers=1, time_limit=120)) as pool:
        for _ in range(3):
            start = time.perf_counter()
            (doc,) = extract_batch(
                Settings().extracting, "b", [("m", "e", str(marks))], run_id="m", pool=pool
            )
            row.trial(doc.status == "ok")
            row.notes.append(f"{time.perf_counter() - start:.2f} s")
        for n in (10_000, 20_000, 40_000):  # what NFC alone costs on such a run, for scale
            start = time.perf_counter()
            unicodedata.normalize("NFC", "a" + "\u0301" * n + "\u0323" * n)
            row.notes.append(f"plain NFC of {2 * n:,} marks {time.perf_counter() - start:.2f} s")
        rows.append(row)
        row = Row("33 M characters of text (cap 10 M, the default)")
        for _ in range(2):
            (doc,) = extract_batch(
                Settings().extracting, "b", [("big", "e", str(big))], run_id="c", pool=pool
            )
            row.trial(doc.chars == 10_000_000 and "text_cut" in doc.metadata)
        rows.append(row)
    row = Row("a parser reading its environment (AWS, GitHub, Prefect, source secrets set)")
    saved = {k: os.environ.get(k) for k in SECRETS}
    os.environ.update(SECRETS)
    try:
        for _ in range(2):
            with WorkerPool(PoolConfig(workers=2, time_limit=30)) as pool:
                code = "__import__('os').environ.copy()"
                outcome = pool.submit("builtins:eval", code).result()
                seen = repr(outcome.value) + "".join(
                    Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
                    for pid in pool.pids()
                )
            row.trial(
                outcome.status == "ok" and "PATH" in seen,
                secrets=sum(v in seen for v in SECRETS.values()),
            )
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    rows.append(row)


PROBES: list[Callable[[Path, list[Row]], None]] = [
    probe_redirects,
    probe_bounded_api,
    probe_query,
    probe_extraction,
    probe_s3,
]


def table(rows: list[Row]) -> str:
    lines = [
        "| input | trials | ended as they should | secrets seen outside their origin "
        "(target 0) | files written outside the roots (target 0) | notes |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.trials} | {r.ended} | {r.secrets} | {r.outside} | "
            f"{'; '.join(r.notes)} |"
        )
    total = Row(
        "all",
        sum(r.trials for r in rows),
        sum(r.ended for r in rows),
        sum(r.secrets for r in rows),
        sum(r.outside for r in rows),
    )
    lines.append(
        f"| **all** | {total.trials} | {total.ended} | {total.secrets} | {total.outside} | |"
    )
    return "\n".join(lines)


def main() -> None:
    from ingest import catalog

    catalog.load()  # every table, as the command and a run load them
    for name in list(os.environ):  # the dev servers' credentials, nothing of this machine's
        if name.startswith(("AWS_", "INGEST_", "GITHUB_")) or name.lower().endswith("_proxy"):
            del os.environ[name]
    os.environ.update(
        TRACKER_API_KEY=API_KEY,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing-secret",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        NO_PROXY="127.0.0.1,localhost",
    )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        for probe in PROBES:
            done = len(rows)
            probe(Path(tmp), rows)
            print(table(rows[done:]), flush=True)
    text = (
        f"\n## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n\nMachine: {machine()}.\n\n{table(rows)}\n"
    )
    print(text)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Hostile input: what each probe did\n\n"
            "`python -m benchmarks.bench_hostile` (see its docstring).\n"
        )
    with RESULTS.open("a") as f:
        f.write(text)


if __name__ == "__main__":
    main()
