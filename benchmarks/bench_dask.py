"""Scaling benchmark: ``ingest s3`` on 1, 2 and 4 Dask workers beside the thread runner.

A latency-bound workload: many small objects behind a fixed round trip (80 ms by
default) added to every S3 request by the in-memory S3 server
(``dev.servers.memory_s3``, a loop timer: no CPU while waiting). One run, side by
side, on the same bucket and one running ``prefect server start``:

* ``thread``   ``ingest s3 ... --task-runner thread`` (the flow's own threads);
* ``dask-N``   ``ingest s3 ... --task-runner dask`` with ``INGEST_DASK_ADDRESS`` of a
               cluster of N ``dask worker`` processes (``dev.servers.dask_cluster``:
               one folder each, 2 threads each), started before the command as an
               existing cluster is;
* ``dask-local`` (``--local``) the same with no address: a LocalCluster started by the
               flow run itself (its start-up inside the command's time).

Every contender downloads every object into a fresh lake (``--no-keep-files
--no-extract``: rows, no files, no parsing, so the runners are compared on the
same job), with the same per-process request pool (``--concurrency``, default
8): a process keeps at most that many requests in flight, so one process moves
at most concurrency / RTT objects a second, and N worker processes N times that
until the CPU (2 cores here, shared) or the flow's hand-out is the limit.

Measures: the command's wall time; the batch stage's wall time (first
``fetch-batch`` start to last end, from ``task_timings``) and objects per
second over it; GETs (server counter); batches per worker.

    .venv/bin/python -m benchmarks.bench_dask                 # 4,000 objects, 80 ms
    .venv/bin/python -m benchmarks.bench_dask --objects 1000 --workers 1,2   # smoke

Results: printed as Markdown and appended to ``benchmarks/dask.md`` with the
machine and date; raw figures in ``benchmarks/results/dask-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.measure import cpu_model

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
REPORT = Path(__file__).resolve().parent / "dask.md"
BUCKET = "bench"


@dataclass
class Result:
    name: str
    workers: int
    seconds: float  # the command, process start to exit
    stage_seconds: float  # first fetch-batch start to last end
    objects: int
    gets: int
    batches: dict[str, int] = field(default_factory=dict)
    returncode: int = 0

    @property
    def rate(self) -> float:
        return self.objects / self.stage_seconds if self.stage_seconds else 0.0


def machine() -> dict[str, Any]:
    cpu = cpu_model()
    return {
        "cpus": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "python": platform.python_version(),
        "load_average_start": os.getloadavg(),
    }


def stage(lake: Path) -> tuple[float, dict[str, int]]:
    """The batch stage's wall seconds and batches per worker, from ``task_timings``."""
    from ingest import storage

    _, rows = storage.query(
        lake,
        "SELECT min(started_at), max(ended_at) FROM task_timings WHERE task_name = 'fetch-batch'",
    )
    first, last = rows[0]
    _, per = storage.query(
        lake,
        "SELECT worker, count(*) FROM task_timings WHERE task_name = 'fetch-batch' "
        "GROUP BY ALL ORDER BY 1",
    )
    seconds = (last - first).total_seconds() if first and last else 0.0
    return seconds, {str(w): int(n) for w, n in per}


def run_one(
    name: str, workers: int, s3: Any, env: dict[str, str], scratch: Path, a: argparse.Namespace
) -> Result:
    lake = scratch / f"lake-{name}"
    cmd = [str(Path(sys.executable).with_name("ingest")), "s3", "--bucket", BUCKET]
    cmd += ["--endpoint-url", s3.url, "--data-dir", str(lake), "--no-keep-files"]
    cmd += ["--no-extract", "--concurrency", str(a.concurrency)]
    cmd += ["--task-runner", "thread" if name == "thread" else "dask"]
    s3.admin("/_dev/reset")
    log = scratch / f"{name}.log"
    t = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.run(
            cmd, cwd=scratch, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=a.timeout
        )
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        print(log.read_text()[-3000:], file=sys.stderr)
    stage_seconds, per = stage(lake) if proc.returncode == 0 else (0.0, {})
    with urllib_open(f"{s3.url}/_dev/stats") as r:
        gets = int(json.loads(r.read()).get("GET object", 0))
    return Result(name, workers, seconds, stage_seconds, a.objects, gets, per, proc.returncode)


def urllib_open(url: str) -> Any:
    import urllib.request

    return urllib.request.urlopen(url, timeout=30)


def table(results: list[Result]) -> str:
    base = next((r.rate for r in results if r.name == "thread"), 0.0)
    lines = [
        "| runner | worker processes | command s | batch stage s | objects/s | vs thread "
        "| GETs | batches per worker |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio = f"{r.rate / base:.2f}x" if base and r.rate else "-"
        per = ", ".join(f"{w}: {n}" for w, n in r.batches.items())
        lines.append(
            f"| {r.name} | {r.workers} | {r.seconds:.1f} | {r.stage_seconds:.1f} | "
            f"{r.rate:.0f} | {ratio} | {r.gets} | {per} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from ingest import catalog

    catalog.load()  # every table, as the command and a run load them
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--objects", type=int, default=4000)
    p.add_argument("--size", type=int, default=2048, help="bytes per object")
    p.add_argument("--rtt-ms", type=float, default=80.0, help="added to every S3 request")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight per process")
    p.add_argument("--batch-size", type=int, default=100, help="objects per batch task")
    p.add_argument("--workers", default="1,2,4", help="Dask worker counts to run")
    p.add_argument("--threads", type=int, default=2, help="batch tasks at once per worker")
    p.add_argument("--local", action="store_true", help="also a LocalCluster run (no address)")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--no-save", action="store_true")
    a = p.parse_args(argv)

    from deployments.serve import PrefectServer
    from dev.servers.child import free_port
    from dev.servers.dask_cluster import DaskCluster
    from dev.servers.memory_s3 import MemoryS3

    started = datetime.now(UTC)
    info = machine()
    scratch = Path(tempfile.mkdtemp(prefix="bench-dask-"))
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "INGEST_S3_BATCH_SIZE": str(a.batch_size),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_HOME": str(scratch / "prefect-home"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }
    counts = [int(x) for x in a.workers.split(",") if x]
    results: list[Result] = []
    try:
        with ExitStack() as stack:
            s3 = stack.enter_context(MemoryS3(latency_ms=a.rtt_ms))
            s3.seed(BUCKET, a.objects, size=a.size)
            log = stack.enter_context(open(scratch / "prefect-server.log", "w"))
            prefect = stack.enter_context(
                PrefectServer(port=free_port(), home=scratch / "prefect-home", env=env, log=log)
            )
            env["PREFECT_API_URL"] = prefect.api_url
            print(
                f"{a.objects} objects of {a.size} B, {a.rtt_ms:g} ms per request, concurrency "
                f"{a.concurrency} per process, batches of {a.batch_size}; {info['cpus']} CPUs, "
                f"load {info['load_average_start']}",
                flush=True,
            )
            results.append(run_one("thread", 1, s3, env, scratch, a))
            print(table(results), flush=True)
            for n in counts:
                with DaskCluster(
                    scratch / f"cluster-{n}", workers=n, threads=a.threads, env=env
                ) as cluster:
                    results.append(
                        run_one(
                            f"dask-{n}",
                            n,
                            s3,
                            {**env, "INGEST_DASK_ADDRESS": cluster.address},
                            scratch,
                            a,
                        )
                    )
                print(table(results), flush=True)
            if a.local:
                cores = len(os.sched_getaffinity(0))
                results.append(run_one("dask-local", cores, s3, env, scratch, a))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    info["load_average_end"] = os.getloadavg()
    text = "\n".join(
        [
            f"## {started:%Y-%m-%d %H:%M} UTC",
            "",
            f"Machine: {info['cpus']} CPUs ({info['cpu']}), Python {info['python']}; load "
            f"average {'/'.join(f'{x:.1f}' for x in info['load_average_start'])} at the start, "
            f"{'/'.join(f'{x:.1f}' for x in info['load_average_end'])} at the end (shared "
            "with other jobs).",
            "",
            f"Command: `python -m benchmarks.bench_dask {' '.join(argv or sys.argv[1:])}`".replace(
                "  ", " "
            ),
            "",
            f"{a.objects} objects of {a.size} B, {a.rtt_ms:g} ms added to every request, "
            f"`--concurrency {a.concurrency}` (per process), batches of {a.batch_size}, "
            f"{a.threads} threads per Dask worker.",
            "",
            table(results),
            "",
        ]
    )
    print("\n" + text)
    if not a.no_save:
        RESULTS.mkdir(exist_ok=True)
        stamp = started.strftime("%Y-%m-%dT%H%M")
        (RESULTS / f"dask-{stamp}.json").write_text(
            json.dumps(
                {
                    "started": started.isoformat(),
                    "machine": info,
                    "args": vars(a),
                    "results": [asdict(r) | {"rate": r.rate} for r in results],
                },
                indent=1,
                default=str,
            )
        )
        if not REPORT.exists():
            REPORT.write_text(
                "# Dask scaling benchmark results (`make bench-dask`)\n\n"
                "Each run of `python -m benchmarks.bench_dask` appends a section; the method is "
                "in the module's docstring and docs/scale-out.md.\n\n"
            )
        with open(REPORT, "a") as f:
            f.write(text + "\n")
    return 0 if all(r.returncode == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
