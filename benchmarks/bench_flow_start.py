"""A flow's start in a command's process, side by side with another revision: importing
the flows (each builds its run form's parameter schema) and the first
``serialize_parameters`` of an ``ingest s3`` command's parameters, which Prefect calls as
it creates the flow run (its FastAPI encoder is imported on the first call).

Each measure is a fresh child process with ``PYTHONDONTWRITEBYTECODE=1`` (as on these
machines and in CI), the trees interleaved round by round, the order swapped every other
round. Run ``python -m benchmarks.bench_flow_start --before REV [--rounds 8]``; results
are printed and appended to benchmarks/flow_start.md (``--no-save``: printed only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.bench_commands import checkout, machine

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "flow_start.md"

PROBE = """
import sys, time
t0 = time.perf_counter()
from flows.nightly import nightly
from flows.s3_ingest import s3_ingest
t1 = time.perf_counter()
s3_ingest.serialize_parameters({"bucket": "docs", "prefix": "", "concurrency": 64,
    "extract": True, "endpoint_url": None, "include": ["*.pdf"], "task_runner": "thread"})
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, "fastapi" in sys.modules)
"""


def measure(tree: Path) -> tuple[float, float, bool]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tree, env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), float(out[1]), out[2] == "True"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the revision to compare with")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--no-save", action="store_true", help="print only")
    a = p.parse_args()
    with ExitStack() as stack:
        trees = {f"at {a.before}": stack.enter_context(checkout(a.before)), "this tree": ROOT}
        results: dict[str, list[tuple[float, float, bool]]] = {k: [] for k in trees}
        for r in range(a.rounds):
            names = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for name in names:
                results[name].append(measure(trees[name]))
    lines = [
        f"## Run of {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`python -m benchmarks.bench_flow_start --before {a.before} --rounds {a.rounds}`",
        "",
        f"Machine: {machine()}.",
        "",
        "| tree | import the flows, median s | first serialize_parameters, median s "
        "| imports FastAPI | rounds, import / serialize s |",
        "|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        imports = [x[0] for x in rows]
        serial = [x[1] for x in rows]
        lines.append(
            f"| {name} | {statistics.median(imports):.3f} | {statistics.median(serial):.3f} "
            f"| {'yes' if rows[0][2] else 'no'} | "
            + ", ".join(f"{i:.2f}/{s:.2f}" for i, s in zip(imports, serial, strict=True))
            + " |"
        )
    before, after = results.values()
    ratios = [(b[0] + b[1]) / (x[0] + x[1]) for b, x in zip(before, after, strict=True)]
    lines += [
        "",
        "Per-round ratio of the two steps together, the other revision over this tree "
        "(below 1: this tree slower): " + ", ".join(f"{r:.2f}" for r in ratios) + ".",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not a.no_save:
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
