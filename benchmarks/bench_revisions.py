"""Two revisions side by side on every benchmark they share: did a refactor change a figure?

    .venv/bin/python -m benchmarks.bench_revisions --before 4fe4e0d            # all, quick sizes
    .venv/bin/python -m benchmarks.bench_revisions --before 4fe4e0d --only s3,lake

Each revision is checked out in a detached worktree of its own under ``benchmarks/.work``
(``--after`` defaults to ``HEAD``: the committed tree, not the working copy), so each side
runs its own benchmark script against its own code, and neither writes into this
checkout. Both sides run in this virtual environment, with ``PYTHONPATH`` set to their
worktree, so that the child processes a benchmark starts (``ingest`` commands, Dask
workers, servers) import that side's code too. The sides alternate benchmark by
benchmark (before, after; then after, before for the next), at the sizes of ``QUICK``: a
smoke size of each, minutes rather than hours, so the figures compare the revisions with
each other, not with the full runs written beside each benchmark.

A benchmark prints its tables and writes its Markdown section into its own
``benchmarks/*.md`` in its worktree; what it printed and the lines it added there are
its result. Every table row whose first cell both sides
have, in a column both sides have, with a number on both sides, is one figure: the
output lists the figures and the ratio after / before (time, memory and counts alike: a
count of requests that moved is a change of behaviour, a time within noise is not).
Results are printed and appended to ``benchmarks/revisions.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.measure import cpu_model

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "revisions.md"
WORK = Path(__file__).resolve().parent / ".work"

# The benchmark modules and the arguments of a smoke-size run, each accepted by the
# scripts of both revisions (the benchmarks that existed before the layout refactor).
QUICK: dict[str, list[str]] = {
    "s3": ["--quick"],
    "extract": ["--quick", "--skip-search"],
    "github": ["--quick"],
    "lake": ["--rows", "5000", "--repeat", "2"],
    "scale": ["--sizes", "2000", "--nights", "2"],
    "dask": ["--objects", "600", "--workers", "1,2"],
    "server_db": ["--clients", "2", "--tasks", "100", "--backends", "sqlite"],
    "commands": ["--rounds", "3"],
}
WHEN = re.compile(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?(?: UTC)?")
NUMBER = re.compile(r"^[~<>]?\s*(-?\d[\d,]*(?:\.\d+)?)\s*(?:s|ms|x|%|MB|MiB|KB|GB)?\b")


@dataclass
class Figure:
    benchmark: str
    table: str  # the header's first cells, to tell tables apart
    row: str
    column: str
    before: float
    after: float

    @property
    def ratio(self) -> float | None:
        return self.after / self.before if self.before else None


@contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """A detached worktree of ``rev`` under benchmarks/.work, removed afterwards."""
    WORK.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"rev-{rev[:12]}-", dir=WORK))
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--force", str(path), rev],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)
        shutil.rmtree(path, ignore_errors=True)


def markdown_of(tree: Path) -> dict[str, list[str]]:
    return {p.name: p.read_text().splitlines() for p in (tree / "benchmarks").glob("*.md")}


def run_one(tree: Path, name: str, args: list[str], timeout: float) -> tuple[list[str], str]:
    """Run ``benchmarks.bench_<name>`` of ``tree``; what it printed and the Markdown lines
    it added to its files, and an error ('' when it exited 0)."""
    before = markdown_of(tree)
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", f"benchmarks.bench_{name}", *args]
    try:
        proc = subprocess.run(
            cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return [], f"no result within {timeout:.0f} s"
    added = proc.stdout.splitlines()  # a benchmark that prints its tables only (lake)
    for file, lines in markdown_of(tree).items():
        added += new_tables(before.get(file, []), lines)
    if proc.returncode != 0:
        return added, f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-400:].strip()}"
    return added, ""


def new_tables(old: list[str], lines: list[str]) -> list[str]:
    """The tables of ``lines`` (each under its last heading) that hold a line ``old`` does
    not: whole, header included, whether the benchmark appended its section or rewrote
    its table in place (the header, unchanged, is then no new line)."""
    seen = set(old)
    out: list[str] = []
    heading = ""
    table: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table and any(t not in seen for t in table):
            out += [heading, *table]
        table = []
        if line.startswith("#"):
            heading = line
    return out


def tables(lines: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """Markdown tables of ``lines``: {header: {row label: {column: number}}}; a label seen
    twice in one table keeps its first row (the newest section comes first in some files,
    last in others: each side's run adds one section, so there is one)."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    header: list[str] | None = None
    key = heading = ""
    for line in lines:
        if line.startswith("#"):
            # tables of one header under two headings; a heading's date and time (a run's
            # section) name the run, not the table: the two sides run minutes apart
            heading = WHEN.sub("", line.lstrip("#")).strip(" ,")
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip().strip("*`") for c in line.strip().strip("|").split("|")]
        if header is None:
            header, key = cells, " / ".join([heading[:40], *cells[:2]]).strip(" /")
            found.setdefault(key, {})
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue
        label = " / ".join(c for c in cells[: label_width(cells)] if c)
        row: dict[str, float] = {}
        for column, cell in zip(header, cells, strict=False):
            m = NUMBER.match(cell.replace("\u2009", ""))
            if m and column:
                row[column] = float(m.group(1).replace(",", ""))
        found[key].setdefault(label, row)
    return found


def label_width(cells: list[str]) -> int:
    """How many leading cells name a row: those before the first number."""
    for i, cell in enumerate(cells):
        if i and NUMBER.match(cell):
            return i
    return 1


def compare(name: str, before: list[str], after: list[str]) -> list[Figure]:
    old, new = tables(before), tables(after)
    figures = []
    for key in old.keys() & new.keys():
        for label in old[key].keys() & new[key].keys():
            for column in old[key][label].keys() & new[key][label].keys():
                b, a = old[key][label][column], new[key][label][column]
                figures.append(Figure(name, key, label, column, b, a))
    return sorted(figures, key=lambda f: (f.table, f.row, f.column))


def section(
    before_rev: str, after_rev: str, results: dict[str, tuple[list[Figure], str, str]]
) -> str:
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"## Run of {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`python -m benchmarks.bench_revisions --before {before_rev} --after {after_rev}`",
        "",
        f"Machine: {os.cpu_count()} CPUs ({cpu_model()}), Python {sys.version.split()[0]}, "
        f"load average at the end {load}; smoke sizes (`QUICK`), the sides alternating.",
        "",
        "| benchmark | figures | median after / before | lowest | highest | errors |",
        "|---|---|---|---|---|---|",
    ]
    for name, (figures, err_before, err_after) in results.items():
        ratios = [f.ratio for f in figures if f.ratio is not None]
        errors = "; ".join(
            f"{side}: {e[:160]}" for side, e in (("before", err_before), ("after", err_after)) if e
        )
        if ratios:
            lines.append(
                f"| {name} | {len(ratios)} | {statistics.median(ratios):.2f} | "
                f"{min(ratios):.2f} | {max(ratios):.2f} | {errors} |"
            )
        else:
            lines.append(f"| {name} | 0 |  |  |  | {errors} |")
    for name, (figures, _, _) in results.items():
        if not figures:
            continue
        lines += [
            "",
            f"### {name}",
            "",
            "| table | row | column | before | after | after / before |",
            "|---|---|---|---|---|---|",
        ]
        for f in figures:
            ratio = f"{f.ratio:.2f}" if f.ratio is not None else ""
            lines.append(
                f"| {f.table} | {f.row} | {f.column} | {f.before:g} | {f.after:g} | {ratio} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="the revision before (a refactor's start)")
    p.add_argument("--after", default="HEAD", help="the revision after (default HEAD)")
    p.add_argument("--only", help=f"comma list of benchmarks among {', '.join(QUICK)}")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per benchmark run")
    p.add_argument("--no-save", action="store_true", help="print only")
    args = p.parse_args()
    names = args.only.split(",") if args.only else list(QUICK)
    unknown = [n for n in names if n not in QUICK]
    if unknown:
        p.error(f"unknown benchmarks: {', '.join(unknown)}")
    results: dict[str, tuple[list[Figure], str, str]] = {}
    with checkout(args.before) as old, checkout(args.after) as new:
        for i, name in enumerate(names):
            started = time.monotonic()
            order = [("before", old), ("after", new)]
            if i % 2:
                order.reverse()
            out: dict[str, tuple[list[str], str]] = {}
            for side, tree in order:
                out[side] = run_one(tree, name, QUICK[name], args.timeout)
            figures = compare(name, out["before"][0], out["after"][0])
            results[name] = (figures, out["before"][1], out["after"][1])
            print(
                f"{name}: {len(figures)} figures in {time.monotonic() - started:.0f} s"
                + "".join(f"; {s} failed: {e[:200]}" for s, (_, e) in out.items() if e),
                flush=True,
            )
    text = section(args.before, args.after, results)
    print("\n" + text)
    if not args.no_save:
        if not OUT.exists():
            OUT.write_text(
                "# Revisions side by side\n\nWritten by `python -m benchmarks.bench_revisions` "
                "(see its docstring for what is measured).\n\n"
            )
        with OUT.open("a") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
