"""A night after a folder was renamed, beside a full download of the same listing.

    .venv/bin/python -m benchmarks.bench_moved                 # 1,000 objects, 2 rounds
    .venv/bin/python -m benchmarks.bench_moved --objects 300 --rounds 1 --no-save
    .venv/bin/python -m benchmarks.bench_moved --not-kept     # INGEST_KEEP_FILES=false

One run starts the project's S3 dev server (moto behind keep-alive, ``--rtt-ms``
added to every request) and one ``prefect server start`` (SQLite in a scratch
Prefect home), seeds ``--objects`` text files (~20 KB) under ``projects/f0/``, and
runs ``ingest s3`` once (the first night, text extracted). Then, each round:

* the folder is renamed on the server (``CopyObject`` to ``projects/f<n>/``, then
  ``DeleteObject``; not timed; a server-side copy keeps the ETag, as S3's does);
* **moved night**: ``ingest s3`` on the first night's data folder: the moved keys are
  recognised by ETag and size (``ingest.s3.renames``) and take their files and text
  (with ``--not-kept``, every command runs with ``INGEST_KEEP_FILES=false``: no file is
  kept, so a moved key takes its stored rows alone);
* **full download**: ``ingest s3`` of the same bucket into an empty data folder: what
  a sync that decides by key pays for the rename (download and extraction of every
  object).

The two commands alternate their order round by round and run one after the other on
the same servers, so the ratio compares them under the same load. Each command is a
child process: wall seconds (with Prefect's start-up), the flow body (the seconds of
its summary line), object GETs counted by the server (its request counts, reset before
each command), parses (the ``documents`` rows the run wrote that are neither copies
of stored ones nor old keys marked deleted: ``parsed`` below), the objects copied
(``s3_objects`` rows ``copied``) and the files left under the moved folder at the
download destination. Results are printed and appended to
benchmarks/moved.md with the machine, date and load.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.bench_s3 import boto_client, child_env
from benchmarks.measure import cpu_model

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "moved.md"
WORK = Path(__file__).resolve().parent / ".work"
BUCKET = "moved"
_EXTRACTED = re.compile(r"extract-batch (\d+) documents")
# the flow's summary line: its run id, and its seconds (Prefect's start to end)
_BODY = re.compile(r"^run (\S+): .* ([\d.]+) s in Running", re.M)


def body(i: int) -> bytes:
    line = f"drawing register {i}: sheet, revision, title block, layer list\n"
    return (line * (20_000 // len(line) + 1)).encode()[:20_000]


def move(client: Any, old: str, new: str, count: int) -> None:
    def one(i: int) -> None:
        client.copy_object(
            Bucket=BUCKET,
            Key=f"{new}{i:05d}.txt",
            CopySource={"Bucket": BUCKET, "Key": f"{old}{i:05d}.txt"},
        )
        client.delete_object(Bucket=BUCKET, Key=f"{old}{i:05d}.txt")

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(one, range(count)))


def run_ingest(
    env: dict[str, str], endpoint: str, data_dir: Path, s3: Any, folder: str = ""
) -> dict[str, Any]:
    s3.reset_stats()
    cmd = [sys.executable, "-m", "cli.main", "s3", "--bucket", BUCKET]
    cmd += ["--endpoint-url", endpoint, "--data-dir", str(data_dir)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(
            f"ingest s3 failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    output = proc.stdout + proc.stderr
    return {
        "wall": wall,
        "gets": int(s3.stats().get("GET object", 0)),
        "parsed": parsed(data_dir, found.group(1)) if (found := _BODY.search(output)) else -1,
        "parse lines": sum(int(n) for n in _EXTRACTED.findall(output)),
        "body": float(found.group(2)) if found else float("nan"),
        "copied": copied(data_dir, folder),
        "files": files_under(data_dir, folder),
        "log": [line for line in output.splitlines() if " in " in line and " s" in line],
    }


def copied(data_dir: Path, folder: str = "") -> int:
    """Objects under ``folder`` stored as copied from another key."""
    from ingest import storage

    _, values = storage.query(
        data_dir,
        f"SELECT count(*) FROM s3_objects WHERE status = 'copied' AND starts_with(key, '{folder}')",
    )
    return int(values[0][0])


def parsed(data_dir: Path, run_id: str) -> int:
    """Documents the run extracted: its ``documents`` rows but the old keys' it marked
    ``deleted``, less those it copied from a stored object (a copy carries the run's id
    too; its ``s3_objects`` row says ``copied``). With files kept the run's
    ``extract-batch`` lines give the same count; with files not kept the parses happen in
    ``fetch-batch``, whose line does not say."""
    from ingest import storage

    _, values = storage.query(
        data_dir,
        f"""SELECT (SELECT count(*) FROM documents WHERE run_id = '{run_id}'
                    AND status IS DISTINCT FROM 'deleted')
                 - (SELECT count(*) FROM s3_objects WHERE run_id = '{run_id}'
                    AND status = 'copied')""",
    )
    return int(values[0][0])


def files_under(data_dir: Path, folder: str) -> int:
    """Files the run left at the download destination under ``folder`` (none when files
    are not kept)."""
    root = data_dir / "objects" / BUCKET / folder
    return sum(1 for p in root.rglob("*") if p.is_file()) if folder and root.is_dir() else 0


def main(argv: Sequence[str] | None = None) -> int:
    from ingest import catalog

    catalog.load()  # every table, as the command and a run load them
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objects", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rtt-ms", type=float, default=20.0)
    p.add_argument("--no-save", action="store_true", help="print only")
    p.add_argument("--show-log", action="store_true", help="print each run's timing lines")
    p.add_argument(
        "--not-kept",
        action="store_true",
        help="every command with INGEST_KEEP_FILES=false (no downloaded file is kept)",
    )
    a = p.parse_args(argv)

    from deployments.serve import PrefectServer
    from dev.servers.s3 import DevServer, free_port

    WORK.mkdir(parents=True, exist_ok=True)
    rows: list[str] = []
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="moved-", dir=WORK)))
        env = child_env(scratch)
        env["PREFECT_HOME"] = str(scratch / "prefect-home")
        if a.not_kept:
            env["INGEST_KEEP_FILES"] = "false"
        os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
        s3 = stack.enter_context(DevServer(latency_ms=a.rtt_ms, env=env))
        log = stack.enter_context(open(scratch / "prefect-server.log", "w"))
        prefect = stack.enter_context(
            PrefectServer(port=free_port(), home=scratch / "prefect-home", env=env, log=log)
        )
        env["PREFECT_API_URL"] = prefect.api_url
        client = boto_client(s3.url, pool=32)
        client.create_bucket(Bucket=BUCKET)
        with ThreadPoolExecutor(32) as pool:
            list(
                pool.map(
                    lambda i: client.put_object(
                        Bucket=BUCKET, Key=f"projects/f0/{i:05d}.txt", Body=body(i)
                    ),
                    range(a.objects),
                )
            )
        night = scratch / "night"
        first = run_ingest(env, s3.url, night, s3)
        print(f"first night: { {k: v for k, v in first.items() if k != 'log'} }", flush=True)
        for r in range(1, a.rounds + 1):
            move(client, f"projects/f{r - 1}/", f"projects/f{r}/", a.objects)
            order = ["moved", "full"] if r % 2 else ["full", "moved"]
            got: dict[str, dict[str, Any]] = {}
            for which in order:
                target = night if which == "moved" else scratch / f"full-{r}"
                got[which] = run_ingest(env, s3.url, target, s3, f"projects/f{r}/")
                shown = {k: v for k, v in got[which].items() if k != "log"}
                print(f"round {r} {which}: {shown}", flush=True)
                if a.show_log:
                    print("\n".join(got[which]["log"]), flush=True)
            m, f = got["moved"], got["full"]
            rows.append(
                f"| {r} ({' then '.join(order)}) | {m['wall']:.1f} s | {m['body']:.1f} s "
                f"| {m['gets']} | {m['parsed']} | {m['copied']} | {m['files']} | {f['wall']:.1f} s "
                f"| {f['body']:.1f} s | {f['gets']} | {f['parsed']} "
                f"| **{m['wall'] / f['wall']:.2f}x** | **{m['body'] / f['body']:.2f}x** |"
            )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    text = "\n".join(
        [
            f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: {a.objects} objects renamed, "
            f"{a.rtt_ms:g} ms a request"
            + (", files not kept (INGEST_KEEP_FILES=false)" if a.not_kept else ""),
            "",
            f"`python -m benchmarks.bench_moved --objects {a.objects} --rounds {a.rounds}"
            f"{' --not-kept' if a.not_kept else ''}`; "
            f"{cpu_model()}, {os.cpu_count()} CPUs, load average at the end {load}; "
            f"first night {first['wall']:.1f} s ({first['gets']} GETs, {first['parsed']} parsed).",
            "",
            "| round | moved night | its flow body | GETs | parsed | copied | files left "
            "| full download | its flow body | GETs | parsed | moved / full | bodies |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )
    print("\n" + text)
    if not a.no_save:
        if not OUT.exists():
            OUT.write_text(
                "# A renamed folder: the night after, beside a full download\n\n"
                "Written by `python -m benchmarks.bench_moved` (see its docstring for what is "
                "measured).\n\n"
            )
        with OUT.open("a") as out:
            out.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
