"""Side by side with dlt on the same local nested-JSON API: a first and an incremental run.

    .venv/bin/python -m benchmarks.bench_dlt                 # 3,000 orders, 30 ms a page
    .venv/bin/python -m benchmarks.bench_dlt --orders 600 --rounds 1
    .venv/bin/python -m benchmarks.bench_dlt --command --changed 0 --rounds 5

``--command`` times what a user waits for: ingest as the ``ingest rest`` command (its
whole process: start-up, the ``rest-ingest`` flow run against a running
``prefect server start``, the commit, the summary, the exit), dlt as its whole process
(start-up, ``pipeline.run`` and its load into DuckDB). With ``--changed 0`` the second
night is the no-change rerun. The source file the command reads is the same ``config``,
written as YAML.

dlt (``dlt[duckdb]``) is never a dependency of the project: the script makes its own
virtual environment under ``benchmarks/.work/dlt-venv`` with ``uv pip install`` the first
time (``--dlt-python`` names another interpreter that has dlt). Each contender runs in a
process of its own (its peak RSS is its own), in interleaved rounds (ingest, dlt, then
dlt, ingest, ...), against one server (``dev.servers.shop``: orders with a customer
object, a list of lines, a list of tags, nullable fields, ISO timestamps; ``limit``
records a page behind a body cursor, ``since`` filtering by ``updated_at``).

Both read the same source, as dlt's ``rest_api`` documentation writes it: a cursor
paginator on ``$.next_cursor``, ``data_selector: $.data``, ``primary_key: id``,
``write_disposition: merge``, ``params: {since: "{incremental.start_value}"}`` with an
incremental cursor on ``updated_at``. ingest runs the library (``fetch_source`` and
``commit_run``, what the ``rest-ingest`` flow's tasks call, without Prefect's start-up);
dlt runs ``pipeline.run(rest_api_source(config))`` into DuckDB.

Measured per run: wall time of the run (the library call, timed inside the process,
after the imports), the CPU time the process spent in that call (every thread: what
the run costs, less sensitive than wall time to other work on the machine), wall time
of the whole process (start-up and imports included),
requests the server answered, rows and columns of the orders table and of its lines
child table, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / ".work"
DLT_VERSION = "1.31.0"


def config(url: str, initial: str) -> dict[str, Any]:
    """The source, in dlt's ``rest_api`` shape (what both contenders read)."""
    return {
        "client": {
            "base_url": url,
            "paginator": {
                "type": "cursor",
                "cursor_path": "$.next_cursor",
                "cursor_param": "cursor",
            },
        },
        "resource_defaults": {
            "primary_key": "id",
            "write_disposition": "merge",
            "endpoint": {"data_selector": "$.data"},
        },
        "resources": [
            {
                "name": "orders",
                "endpoint": {
                    "path": "orders",
                    "params": {"limit": 100, "since": "{incremental.start_value}"},
                    "incremental": {"cursor_path": "updated_at", "initial_value": initial},
                },
            }
        ],
    }


# --------------------------------------------------------------------------- workers


def run_ingest(url: str, folder: str, initial: str) -> dict[str, Any]:
    from ingest import storage
    from ingest.rest.config import RestConfig
    from ingest.rest.run import fetch_source
    from ingest.rest.source import parse_source
    from ingest.settings import Settings

    spec = {"name": "shop", **config(url, initial)}
    source = parse_source(json.dumps(spec), "shop.yaml")
    data = Path(folder)
    run_id = f"bench-{time.time_ns()}"
    started, cpu = time.perf_counter(), time.process_time()
    fetch_source(RestConfig.of(Settings(data_dir=data)), source, run_id=run_id)
    storage.commit_run(data, run_id)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    shape = {}
    for table in ("shop__orders", "shop__orders__lines"):
        _, described = storage.query(data, f"DESCRIBE {table}")
        _, [(n,)] = storage.query(data, f"SELECT count(*) FROM {table}")
        shape[table] = {"rows": n, "columns": {c: t for c, t, *_ in described}}
    return {"seconds": seconds, "cpu_seconds": cpu, "tables": shape}


def run_dlt(url: str, folder: str, initial: str) -> dict[str, Any]:
    import dlt
    from dlt.sources.rest_api import rest_api_source

    os.environ["RUNTIME__LOG_LEVEL"] = "WARNING"
    pipeline = dlt.pipeline(
        pipeline_name="shop",
        destination=dlt.destinations.duckdb(str(Path(folder) / "dlt.duckdb")),
        dataset_name="shop_data",
        pipelines_dir=str(Path(folder) / "pipelines"),
    )
    started, cpu = time.perf_counter(), time.process_time()
    pipeline.run(rest_api_source(config(url, initial), name="shop"))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    import duckdb

    shape = {}
    with duckdb.connect(str(Path(folder) / "dlt.duckdb"), read_only=True) as con:
        for table in ("orders", "orders__lines"):
            described = con.execute(f"DESCRIBE shop_data.{table}").fetchall()
            (n,) = con.execute(f"SELECT count(*) FROM shop_data.{table}").fetchone()
            shape[table] = {"rows": n, "columns": {c: t for c, t, *_ in described}}
    return {"seconds": seconds, "cpu_seconds": cpu, "tables": shape}


def worker(kind: str, url: str, folder: str, initial: str) -> None:
    out = (run_ingest if kind == "ingest" else run_dlt)(url, folder, initial)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out))


# --------------------------------------------------------------------------- orchestration


def dlt_python(given: str | None) -> str:
    if given:
        return given
    venv = WORK / "dlt-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        uv = ROOT / ".tools" / "bin" / "uv"
        subprocess.run([str(uv), "venv", "-q", "-p", "3.11", str(venv)], check=True)
        subprocess.run(
            # compiled, as the project's own environment is (make setup), so neither
            # contender pays for compiling its imports on every start
            [
                *(str(uv), "pip", "install", "-q", "--compile-bytecode"),
                *("-p", str(python), f"dlt[duckdb]=={DLT_VERSION}"),
            ],
            check=True,
        )
    return str(python)


def timed(args: list[str], env: dict[str, str], what: str) -> tuple[str, float, float]:
    """A child process run to its end: its output, wall seconds and CPU seconds (every
    thread of it, from the rusage of waited-for children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"{what} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return done.stdout, seconds, cpu


def contender(python: str, kind: str, url: str, folder: Path, initial: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [python, "-m", "benchmarks.bench_dlt", "--worker", kind, url, str(folder), initial]
    out, process, process_cpu = timed(args, env, kind)
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{kind} said no result:\n{out[-2000:]}")
    return {
        **json.loads(lines[-1][len("RESULT ") :]),
        "process_seconds": process,
        "process_cpu_seconds": process_cpu,
    }


def command(env: dict[str, str], url: str, folder: Path, initial: str) -> dict[str, Any]:
    """``ingest rest`` on the source as a file, its whole process timed; the rows read
    after it, untimed."""
    import yaml

    from ingest import storage

    source = folder / "shop.yaml"
    if not source.exists():
        source.write_text(yaml.safe_dump({"name": "shop", **config(url, initial)}))
    data = folder / "data"
    args = [sys.executable, "-m", "cli.main", "rest", str(source), "--data-dir", str(data)]
    _, seconds, cpu = timed(args, env, "ingest rest")
    shape = {}
    for table in ("shop__orders", "shop__orders__lines"):
        _, described = storage.query(data, f"DESCRIBE {table}")
        _, [(n,)] = storage.query(data, f"SELECT count(*) FROM {table}")
        shape[table] = {"rows": n, "columns": {c: t for c, t, *_ in described}}
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "process_seconds": seconds,
        "process_cpu_seconds": cpu,
        # not measured: the children's peak is the largest of every child so far (dlt's too)
        "peak_rss_mb": float("nan"),
        "tables": shape,
    }


def prefect_server(stack: ExitStack) -> dict[str, str]:
    """A running ``prefect server start`` (SQLite under a temporary home, as a deployment
    has), and the environment of a command that uses it."""
    from benchmarks.bench_s3 import child_env
    from deployments.serve import PrefectServer
    from dev.servers.memory_s3 import free_port

    scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=WORK)))
    base = child_env(scratch)
    base["PREFECT_HOME"] = str(scratch / "client-home")
    base.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a user's machine, bytecode compiled
    server = stack.enter_context(
        PrefectServer(port=free_port(), home=scratch / "server-home", env=base)
    )
    return {**base, "PREFECT_API_URL": server.api_url}


def stamp(n: int) -> str:
    return f"2025-05-{1 + n // 1440:02d}T{n // 60 % 24:02d}:{n % 60:02d}:00Z"


def main(argv: list[str] | None = None) -> None:
    from ingest import catalog

    catalog.load()  # every table, as the command and a run load them
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--changed", type=int, default=30, help="orders updated before run 2")
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dlt-python")
    parser.add_argument(
        "--command",
        action="store_true",
        help="time ingest as the `ingest rest` command against a running Prefect server, "
        "dlt as its whole process",
    )
    parser.add_argument("--worker", nargs=4, metavar=("KIND", "URL", "DIR", "INITIAL"))
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return
    from dev.servers.shop import ShopServer, order

    python = dlt_python(args.dlt_python)
    initial = "2025-01-01T00:00:00Z"
    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        k: {"first": [], "incremental": []} for k in ("ingest", "dlt")
    }
    with ExitStack() as stack:
        shop = stack.enter_context(ShopServer(latency=args.latency_ms / 1000))
        served = prefect_server(stack) if args.command else {}
        for rnd in range(args.rounds):
            order_of = ("ingest", "dlt") if rnd % 2 == 0 else ("dlt", "ingest")
            for kind in order_of:
                shop.orders = [order(n, updated_at=stamp(n)) for n in range(1, args.orders + 1)]
                with tempfile.TemporaryDirectory(dir=WORK) as folder:
                    exe = sys.executable if kind == "ingest" else python
                    for phase in ("first", "incremental"):
                        if phase == "incremental":
                            for n in range(args.changed):
                                shop.orders[n * 7 % args.orders]["updated_at"] = stamp(
                                    args.orders + 10 + n
                                )
                        shop.requests.clear()
                        if args.command and kind == "ingest":
                            got = command(served, shop.url, Path(folder), initial)
                        else:
                            got = contender(exe, kind, shop.url, Path(folder), initial)
                        got["requests"] = len(shop.requests)
                        results[kind][phase].append(got)
                        print(
                            f"round {rnd + 1} {kind:6} {phase:11} {got['seconds']:.2f} s "
                            f"(CPU {got['cpu_seconds']:.2f} s, "
                            f"process {got['process_seconds']:.2f} s, "
                            f"process CPU {got['process_cpu_seconds']:.2f} s) "
                            f"{got['requests']} requests {got['peak_rss_mb']:.0f} MB",
                            flush=True,
                        )
    print()
    print(report(results, args))
    WORK.mkdir(exist_ok=True)
    (WORK / f"dlt-{int(time.time())}.json").write_text(json.dumps(results, indent=1))


def report(results: dict[str, dict[str, list[dict[str, Any]]]], args: Any) -> str:
    how = (
        "ingest as the `ingest rest` command against a running Prefect server (its whole "
        "process); dlt as its whole process"
        if args.command
        else "the library calls in a process each"
    )
    lines = [
        f"{args.orders} orders, 100 a page, {args.latency_ms:g} ms a page, {args.changed} "
        f"changed before the incremental run; median of {args.rounds} interleaved rounds; "
        f"{how}",
        "",
        "| contender | run | run wall s | run CPU s | process wall s | requests | orders rows "
        "| orders columns | lines rows | lines columns | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, (orders_t, lines_t) in (
        ("ingest", ("shop__orders", "shop__orders__lines")),
        ("dlt", ("orders", "orders__lines")),
    ):
        for phase in ("first", "incremental"):
            runs = results[kind][phase]
            last = runs[-1]["tables"]
            lines.append(
                f"| {kind} | {phase} | {statistics.median(r['seconds'] for r in runs):.2f} | "
                f"{statistics.median(r['cpu_seconds'] for r in runs):.2f} | "
                f"{statistics.median(r['process_seconds'] for r in runs):.2f} | "
                f"{runs[-1]['requests']} | {last[orders_t]['rows']} | "
                f"{len(last[orders_t]['columns'])} | {last[lines_t]['rows']} | "
                f"{len(last[lines_t]['columns'])} | "
                f"{statistics.median(r['peak_rss_mb'] for r in runs):.0f} |"
            )
    lines += [""]
    for phase in ("first", "incremental"):
        for what, field in (
            ("process wall", "process_seconds"),
            ("process CPU", "process_cpu_seconds"),
        ):
            ours_s = [r[field] for r in results["ingest"][phase]]
            theirs_s = [r[field] for r in results["dlt"][phase]]
            per_round = ", ".join(f"{a / b:.2f}" for a, b in zip(ours_s, theirs_s, strict=True))
            lines.append(
                f"- {phase}, {what}: ingest {statistics.median(ours_s):.2f} s, dlt "
                f"{statistics.median(theirs_s):.2f} s (medians): "
                f"{statistics.median(ours_s) / statistics.median(theirs_s):.2f}x; "
                f"ratio per round {per_round}"
            )
    lines += ["", "Per round, run wall s / run CPU s / process wall s:", ""]
    for kind in ("ingest", "dlt"):
        for phase in ("first", "incremental"):
            each = ", ".join(
                f"{r['seconds']:.2f} / {r['cpu_seconds']:.2f} / {r['process_seconds']:.2f}"
                for r in results[kind][phase]
            )
            lines.append(f"- {kind} {phase}: {each}")
    ours = results["ingest"]["first"][-1]["tables"]["shop__orders"]["columns"]
    theirs = results["dlt"]["first"][-1]["tables"]["orders"]["columns"]
    lines += ["", "| orders column | ingest | dlt |", "|---|---|---|"]
    for column in sorted(set(ours) | set(theirs)):
        lines.append(f"| {column} | {ours.get(column, '')} | {theirs.get(column, '')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
