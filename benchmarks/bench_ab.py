"""Two git refs side by side on the shared benchmarks, in interleaved rounds: did a change
move a figure that users wait for?

    make bench-ab ARGS="--before 92ff441 --after HEAD"                  # every benchmark, 2 rounds
    make bench-ab ARGS="--before 92ff441 --after HEAD --only whole,github --rounds 3"
    .venv/bin/python -m benchmarks.bench_ab --before 92ff441 --list    # the benchmarks and modes

Each ref is checked out in a detached git worktree of its own in a temporary folder
outside this checkout (removed at the end), and its environment is installed from its own
``uv.lock`` by its own ``make setup`` (``uv sync --frozen``, bytecode compiled), with this
checkout's uv and uv's cache, so the packages are linked from the cache and an install
takes seconds. Each side then runs its own benchmark modules against its own code
(``<worktree>/.venv/bin/python -m benchmarks.bench_<name>`` in its worktree), so two refs
with different module layouts, or different benchmark code, each measure themselves.
Where the before ref's copy of a benchmark no longer reads what its code prints (bench_s3
before the summary line changed), ``--after-code s3`` runs the after ref's module of that
benchmark on both sides: one instrument, each side's own code under it.

Every benchmark runs in a quick mode (``MODES``: smaller sets, fewer inner rounds, still
the figures a user waits for); a mode's options the older benchmark does not know
(``argparse`` exits 2 on them) fall back to the next set of options listed for it. The
sides alternate round by round (before, after; then after, before; ...), so load from
elsewhere on the machine falls on both alike. What a run printed, and the Markdown tables
it added to its own ``benchmarks/*.md``, are its result: every table row whose label both
sides have, in a column both sides have, with a number on both, is one figure.

Written to ``benchmarks/refactor.md`` (``--out``): per benchmark its headline figures
(``HEADLINES``), each side's median over the rounds and its spread (lowest-highest), the
ratio after / before, and whether the two spreads overlap (the difference is then within
the run-to-run noise; with one round there is no spread to judge by); then, per benchmark,
how many of all the shared figures moved beyond their spread; the machine (cores, memory),
the load average and the date. A benchmark that needs a program that is not installed is
skipped, and the table says so.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.measure import cpu_model

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "refactor.md"


@dataclass(frozen=True)
class Mode:
    """How one benchmark runs quickly: its module, its options (the first set the side's
    benchmark accepts), the programs it needs and what it shows as headline figures."""

    module: str
    options: tuple[tuple[str, ...], ...]
    # (name, row pattern, column pattern): the median of the matching rows of one table
    headlines: tuple[tuple[str, str, str], ...]
    needs: tuple[str, ...] = ()
    about: str = ""


MODES: dict[str, Mode] = {
    "whole": Mode(
        "bench_whole",
        (("--rounds", "1", "--no-source-case", "--no-save"), ("--rounds", "1", "--no-save")),
        (
            ("import prefect, wall s", r"import prefect", r"median wall s"),
            ("no-op, wall s", r"no-op", r"median wall s"),
            ("no-change, wall s", r"no-change", r"median wall s"),
            ("first run, wall s", r"first run", r"median wall s"),
            ("no API, kept server, wall s", r"no-op, no API, kept server", r"median wall s"),
        ),
        needs=("s5cmd",),
        about="2,000 objects, one round of each command against a running Prefect server",
    ),
    "s3": Mode(
        "bench_s3",
        (("--quick", "--contenders", "s5cmd,ingest"), ("--quick",)),
        (
            ("download stage, wall s", r"ingest s3, download stage", r"wall s"),
            ("whole command, wall s", r"ingest s3, whole command", r"wall s"),
            ("whole command, client CPU s", r"ingest s3, whole command", r"client CPU s"),
            ("nothing changed, wall s", r"ingest s3, second run.*", r"wall s"),
            ("s5cmd (reference), wall s", r"s5cmd", r"wall s"),
        ),
        needs=("s5cmd",),
        about="300 objects, s5cmd and ingest s3 only",
    ),
    "github": Mode(
        "bench_github",
        (("--quick", "--only", "scenarios", "--repeats", "1"),),
        (
            ("one repo, ingest, wall s", r"one-repo / ingest", r"wall s"),
            ("one repo, ingest, requests", r"one-repo / ingest", r"requests"),
            ("one repo, rerun, wall s", r"one-repo / ingest-rerun", r"wall s"),
            ("many repos, ingest, wall s", r"many-repos / ingest", r"wall s"),
            ("many repos, rerun, wall s", r"many-repos / ingest-rerun", r"wall s"),
        ),
        about="the page-size scenarios at quick sizes, one run of each",
    ),
    "extract": Mode(
        "bench_extract",
        (("--quick", "--skip-search", "--no-write"), ("--quick", "--skip-search")),
        (
            ("overlapped download + extract, wall s", r"overlapped.*", r"wall s"),
            ("flow extract-batch stage, files/s", r"flow: extract-batch.*", r"files/s"),
            ("pool of 2 warm workers, files/s", r"pool: 2 warm workers", r"files/s"),
            ("in-process, files/s", r"in-process: extract_document.*", r"files/s"),
        ),
        about="2 copies of each document, one round, no search index",
    ),
    "tiny_extract": Mode(
        "bench_tiny_extract",
        (("--rounds", "3", "--no-write"), ("--rounds", "3")),
        (
            ("extract-batch, pool up, s", r"[1-9]\d* / up", r"extract-batch, its own figure s"),
            ("flow call, pool up, s", r"[1-9]\d* / up", r"s3-ingest flow call s"),
            ("flow call, pool starting, s", r"0 / started", r"s3-ingest flow call s"),
        ),
        about="3 flow runs on 3 tiny files (the first starts the pool)",
    ),
    "dask": Mode(
        "bench_dask",
        (("--objects", "600", "--workers", "1", "--no-save"),),
        (
            ("thread runner, command s", r"thread", r"command s"),
            ("1 Dask worker, command s", r"dask-1", r"command s"),
            ("1 Dask worker, batch stage s", r"dask-1", r"batch stage s"),
        ),
        about="600 objects, the thread runner and one Dask worker",
    ),
    "server_db": Mode(
        "bench_server_db",
        (("--clients", "2", "--tasks", "100", "--backends", "sqlite"),),
        (
            ("2 clients x 100 tasks, clients' wall s", r"sqlite", r"clients' wall"),
            ("all task runs recorded after, s", r"sqlite", r"all task runs recorded after"),
        ),
        about="2 clients of 100 tasks, SQLite only (PostgreSQL needs its own package)",
    ),
    "scale": Mode(
        "bench_scale",
        (("--sizes", "2000", "--nights", "2", "--no-save"), ("--sizes", "2000", "--nights", "2")),
        (
            ("first run, wall s", r".*first night / ingest s3, first run", r"wall s"),
            (
                "nothing changed, wall s",
                r".*first night / ingest s3, rerun, nothing changed",
                r"wall s",
            ),
            (
                "1 % changed, wall s",
                r".*first night / ingest s3, rerun after 1 % changed.*",
                r"wall s",
            ),
        ),
        needs=("s5cmd",),
        about="2,000 objects, 2 nights",
    ),
}

WHEN = re.compile(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?(?: UTC)?")
NUMBER = re.compile(r"^[~<>]?\s*(-?\d[\d,]*(?:\.\d+)?)\s*(?:s|ms|x|%|MB|MiB|KB|GB)?\b")
REFUSED = re.compile(r"unrecognized arguments|invalid choice|expected one argument")

# {table: {row label: {column: number}}}
Tables = dict[str, dict[str, dict[str, float]]]


@dataclass
class Side:
    name: str  # "before" or "after"
    ref: str
    tree: Path
    commit: str = ""
    install_s: float = 0.0
    chosen: dict[str, int] = field(default_factory=dict)  # benchmark -> options index

    @property
    def python(self) -> Path:
        return self.tree / ".venv" / "bin" / "python"


@dataclass
class Run:
    tables: Tables
    seconds: float
    error: str = ""


def clean_env() -> dict[str, str]:
    """This process's environment without what ties it to this checkout's interpreter."""
    env = dict(os.environ)
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_PROJECT_ENVIRONMENT"):
        env.pop(name, None)
    return env


@contextmanager
def worktrees(refs: Sequence[str]) -> Iterator[list[Path]]:
    """A detached git worktree of each ref in one temporary folder (outside the
    repository), removed with the folder afterwards."""
    base = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    paths: list[Path] = []
    try:
        for i, ref in enumerate(refs):
            path = base / f"{i}-{re.sub(r'[^A-Za-z0-9._-]', '_', ref)[:40]}"
            added = subprocess.run(
                ["git", "worktree", "add", "--detach", "--force", str(path), ref],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            if added.returncode != 0:
                why = added.stderr.strip().splitlines()[-1:] or ["no output"]
                raise SystemExit(f"bench_ab: no worktree of {ref!r}: {why[0]}")
            paths.append(path)
        yield paths
    finally:
        for path in paths:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(path)],
                cwd=ROOT,
                check=False,
                capture_output=True,
            )
        shutil.rmtree(base, ignore_errors=True)


def share_module(source: Side, side: Side, module: str) -> None:
    """``source``'s ``benchmarks/<module>.py`` over ``side``'s: one instrument on both
    sides, for a benchmark whose older copy no longer reads what the code prints."""
    sha = source.commit.split()[0]
    subprocess.run(
        ["git", "checkout", sha, "--", f"benchmarks/{module}.py"],
        cwd=side.tree,
        check=True,
        capture_output=True,
    )


def install(side: Side) -> None:
    """The side's environment from its own lock, by its own ``make setup``, with this
    checkout's uv (``UV=``) where there is one, else the one its Makefile installs."""
    cmd = ["make", "-C", str(side.tree), "setup"]
    uv = ROOT / ".tools" / "bin" / "uv"
    if uv.exists():
        cmd.append(f"UV={uv}")
    started = time.monotonic()
    proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True)
    side.install_s = time.monotonic() - started
    if proc.returncode != 0 or not side.python.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"bench_ab: make setup failed for {side.ref}: {tail[0]}")


def markdown_of(tree: Path) -> dict[str, list[str]]:
    return {p.name: p.read_text().splitlines() for p in (tree / "benchmarks").glob("*.md")}


def run_one(side: Side, name: str, timeout: float, log: Path | None = None) -> Run:
    """One run of benchmark ``name`` on ``side``: the tables it printed or added to its
    Markdown files, its wall time and an error ('' when it exited 0); what it printed goes
    to ``log``. The first set of options the side's benchmark accepts is remembered for
    the later rounds. It runs in a session of its own: past ``timeout``, and at its end,
    every process of that session still running (a server it started) is stopped."""
    mode = MODES[name]
    first = side.chosen.get(name, 0)
    for index in range(first, len(mode.options)):
        before = markdown_of(side.tree)
        cmd = [str(side.python), "-m", f"benchmarks.{mode.module}", *mode.options[index]]
        started = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            cwd=side.tree,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        except BaseException:  # Ctrl-C: the run's own session would outlive the harness
            stop_session(proc.pid)
            raise
        seconds = time.monotonic() - started
        stop_session(proc.pid)  # what it left running would load the next run
        stop_strays(side.tree)
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"$ {shlex.join(cmd)}\nexit {proc.returncode}\n\n{stdout}\n{stderr}")
        if proc.returncode == 2 and REFUSED.search(stderr) and index + 1 < len(mode.options):
            continue  # an older benchmark without these options: the next set
        side.chosen[name] = index
        lines = stdout.splitlines()  # a benchmark that only prints its tables
        for file, now in markdown_of(side.tree).items():
            lines += new_tables(before.get(file, []), now)
        error = ""
        if seconds >= timeout:
            error = f"no result within {timeout:.0f} s"
        elif proc.returncode != 0:
            last = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
            error = f"exit {proc.returncode}: {last[0][:200]}"
        return Run(tables(lines), seconds, error)
    raise AssertionError("unreachable: the last set of options always returns")


def stop_session(pgid: int, wait: float = 10.0) -> None:
    """Kill every process left in the process group ``pgid`` and wait (up to ``wait``
    seconds) until none is left."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def stop_strays(tree: Path, wait: float = 10.0) -> None:
    """Stop the processes still running a program of ``tree`` (its environment's
    interpreter) once its run is over: a server a benchmark's command detached into a
    session of its own (the local Prefect server ``ingest`` keeps for the next commands)
    outlives the run's session. SIGTERM first, SIGKILL after ``wait`` seconds."""
    prefix = f"{tree}/"

    def strays() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode()
            except (OSError, UnicodeDecodeError):
                continue
            if argv0.startswith(prefix):
                found.append(int(entry.name))
        return found

    deadline = time.monotonic() + wait
    sig = signal.SIGTERM
    while (pids := strays()) and time.monotonic() < deadline + wait:
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(0.1)


def new_tables(old: list[str], lines: list[str]) -> list[str]:
    """The tables of ``lines`` (each under its last heading) that hold a line added to
    ``old`` (by a line diff: a section appended twice with the same figures counts
    twice): whole, header included, whether the benchmark appended its section or
    rewrote its table in place."""
    added: set[int] = set()
    diff = difflib.SequenceMatcher(a=old, b=lines, autojunk=False)
    for tag, _, _, j1, j2 in diff.get_opcodes():
        if tag in ("insert", "replace"):
            added.update(range(j1, j2))
    out: list[str] = []
    heading = ""
    table: list[int] = []
    for i, line in enumerate([*lines, ""]):
        if line.startswith("|"):
            table.append(i)
            continue
        if added.intersection(table):
            out += [heading, *(lines[t] for t in table)]
        table = []
        if line.startswith("#"):
            heading = line
    return out


def tables(lines: list[str]) -> Tables:
    """Markdown tables of ``lines``: {header: {row label: {column: number}}}; a label seen
    twice in one table keeps its first row."""
    found: Tables = {}
    header: list[str] | None = None
    key = heading = ""
    for line in lines:
        if line.startswith("#"):
            # a heading's date and time (a run's section) name the run, not the table
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


def headline(found: Tables, row: str, column: str) -> float | None:
    """The median of the figures of the first table with rows matching ``row`` and a
    column matching ``column`` (patterns matched whole), None when no table has one."""
    for rows in found.values():
        values = [
            value
            for label, cells in rows.items()
            if re.fullmatch(row, label)
            for col, value in cells.items()
            if re.fullmatch(column, col)
        ]
        if values:
            return statistics.median(values)
    return None


def flat(found: Tables) -> dict[tuple[str, str, str], float]:
    return {
        (key, label, column): value
        for key, rows in found.items()
        for label, cells in rows.items()
        for column, value in cells.items()
    }


@dataclass
class Compared:
    """One figure over the rounds of both sides."""

    before: list[float]
    after: list[float]

    @property
    def ratio(self) -> float | None:
        b = statistics.median(self.before)
        return statistics.median(self.after) / b if b else None

    @property
    def within(self) -> bool | None:
        """Whether the two sides' lowest-highest spreads overlap; None with one round."""
        if len(self.before) < 2 or len(self.after) < 2:
            return None
        return min(self.after) <= max(self.before) and min(self.before) <= max(self.after)


def compare(runs: dict[str, list[Run]]) -> dict[tuple[str, str, str], Compared]:
    """Every figure both sides report, over the rounds in which each reported it."""
    values: dict[str, dict[tuple[str, str, str], list[float]]] = {}
    for side, side_runs in runs.items():
        values[side] = {}
        for run in side_runs:
            for figure, value in flat(run.tables).items():
                values[side].setdefault(figure, []).append(value)
    both = values["before"].keys() & values["after"].keys()
    return {f: Compared(values["before"][f], values["after"][f]) for f in sorted(both)}


def spread(values: list[float]) -> str:
    return f"{min(values):g}-{max(values):g}" if len(values) > 1 else ""


def verdict(c: Compared) -> str:
    return {None: "one round", True: "yes", False: "**no**"}[c.within]


def missing(side: Side, mode: Mode) -> list[str]:
    """The programs ``mode`` needs that neither the side's environment nor PATH has."""
    bin_dir = str(side.python.parent)
    return [p for p in mode.needs if not shutil.which(p, path=f"{bin_dir}:{os.environ['PATH']}")]


def memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def report(
    args: argparse.Namespace,
    sides: list[Side],
    runs: dict[str, dict[str, list[Run]]],
    skipped: dict[str, str],
    started: datetime,
    load_start: tuple[float, ...],
) -> str:
    load_end = os.getloadavg()
    before, after = sides
    lines = [
        f"## {args.label}: {started:%Y-%m-%d %H:%M} UTC",
        "",
        "`python -m benchmarks.bench_ab " + shlex.join(args.argv) + "`",
        "",
        f"* before: `{before.ref}` = {before.commit[:9]}{before.commit[40:]}",
        f"* after: `{after.ref}` = {after.commit[:9]}{after.commit[40:]}",
        "* benchmark code: each ref's own"
        + (
            f", but the after ref's module of {', '.join(args.after_code)} on both sides"
            if args.after_code
            else ""
        ),
        f"* machine: {os.cpu_count()} cores (nproc {len(os.sched_getaffinity(0))}), "
        f"{memory_gib():.0f} GiB RAM, {cpu_model()}, Python of each side's own environment",
        "* load average (1/5/15 min): "
        + " / ".join(f"{x:.1f}" for x in load_start)
        + " at the start, "
        + " / ".join(f"{x:.1f}" for x in load_end)
        + f" at the end; {(datetime.now(UTC) - started).total_seconds() / 60:.0f} min in all",
        f"* {args.rounds} round{'s' if args.rounds != 1 else ''} of each benchmark, the sides "
        "alternating (before, after; "
        "then after, before); environments installed from each ref's lock in "
        f"{before.install_s:.0f} s and {after.install_s:.0f} s",
        "",
        "Figures are the median of the rounds, with the lowest-highest spread. *Within "
        "spread*: the two sides' spreads overlap, so the difference is no larger than the "
        "run-to-run noise.",
        "",
        "| benchmark | figure | before | before spread | after | after spread "
        "| after / before | within spread |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, reason in skipped.items():
        lines.append(f"| {name} | skipped: {reason} |  |  |  |  |  |  |")
    notes: list[str] = []
    for name, by_side in runs.items():
        mode = MODES[name]
        for title, row, column in mode.headlines:
            got = {
                side: [
                    v for run in side_runs if (v := headline(run.tables, row, column)) is not None
                ]
                for side, side_runs in by_side.items()
            }
            if not got["before"] or not got["after"]:
                absent = " and ".join(s for s in ("before", "after") if not got[s])
                lines.append(f"| {name} | {title} | not reported by {absent} |  |  |  |  |  |")
                continue
            c = Compared(got["before"], got["after"])
            ratio = f"{c.ratio:.2f}" if c.ratio is not None else ""
            lines.append(
                f"| {name} | {title} | {statistics.median(c.before):g} | {spread(c.before)} "
                f"| {statistics.median(c.after):g} | {spread(c.after)} | {ratio} | {verdict(c)} |"
            )
        for side in sides:
            errors = [r.error for r in by_side[side.name] if r.error]
            if errors:
                notes.append(f"* {name}, {side.name}: {len(errors)} run(s) failed: {errors[0]}")
        failed = {s.name for s in sides if any(r.error for r in by_side[s.name])}
        if failed == {"before"} and name not in args.after_code:
            notes.append(
                f"  (if only the before ref's copy of the benchmark fails: --after-code {name})"
            )
    lines += [
        "",
        "Every figure both sides report (all rows and columns of every table), per "
        "benchmark; *beyond spread* lists those whose spreads do not overlap:",
        "",
        "| benchmark | mode | run s (before / after) | figures | median after / before "
        "| beyond spread |",
        "|---|---|---|---|---|---|",
    ]
    for name, by_side in runs.items():
        figures = compare(by_side)
        ratios = [c.ratio for c in figures.values() if c.ratio is not None]
        beyond = [f"{row} / {col}" for (_, row, col), c in figures.items() if c.within is False]
        took = " / ".join(
            f"{statistics.median(r.seconds for r in by_side[s.name]):.0f}" for s in sides
        )
        median = f"{statistics.median(ratios):.2f}" if ratios else ""
        shown = "; ".join(beyond[:8]) + (f"; and {len(beyond) - 8} more" if len(beyond) > 8 else "")
        lines.append(
            f"| {name} | {MODES[name].about} | {took} | {len(figures)} | {median} | {shown} |"
        )
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_ab", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--before", help="the ref before (e.g. a refactor's start); required")
    p.add_argument("--after", default="HEAD", help="the ref after (default HEAD, as committed)")
    p.add_argument("--only", help=f"comma list among {', '.join(MODES)} (default all)")
    p.add_argument("--rounds", type=int, default=2, help="rounds per benchmark (default 2)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run (default 900)")
    p.add_argument("--out", type=Path, default=OUT, help="Markdown file to write")
    p.add_argument("--label", default="Run", help="the section's title (e.g. 'Harness trial')")
    p.add_argument("--append", action="store_true", help="append to --out instead of replacing it")
    p.add_argument("--no-save", action="store_true", help="print only")
    p.add_argument(
        "--after-code",
        default="",
        help="comma list of benchmarks whose module of the after ref runs on both sides "
        "(one instrument, where the before ref's copy no longer reads what its code prints)",
    )
    p.add_argument("--list", action="store_true", help="print the benchmarks and their modes")
    p.add_argument(
        "--logs",
        type=Path,
        default=ROOT / "benchmarks" / ".work" / f"ab-{datetime.now(UTC):%Y%m%d-%H%M%S}",
        help="folder for what each run printed (default benchmarks/.work/ab-<time>)",
    )
    args = p.parse_args(argv)
    args.argv = list(argv)
    args.names = args.only.split(",") if args.only else list(MODES)
    args.after_code = [n for n in args.after_code.split(",") if n]
    unknown = [n for n in [*args.names, *args.after_code] if n not in MODES]
    if unknown:
        p.error(f"unknown benchmarks: {', '.join(unknown)} (known: {', '.join(MODES)})")
    if not args.before and not args.list:
        p.error("--before REF is required")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.list:
        for name, mode in MODES.items():
            print(f"{name}: python -m benchmarks.{mode.module} {shlex.join(mode.options[0])}")
            print(f"    {mode.about}")
        return 0
    started, load_start = datetime.now(UTC), os.getloadavg()
    with ExitStack() as stack:
        trees = stack.enter_context(worktrees([args.before, args.after]))
        sides = [Side("before", args.before, trees[0]), Side("after", args.after, trees[1])]
        for side in sides:
            side.commit = subprocess.run(
                ["git", "log", "-1", "--format=%H %s"],
                cwd=side.tree,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()[:100]
        for name in args.after_code:
            share_module(sides[1], sides[0], MODES[name].module)
        for side in sides:
            install(side)
            said = f"{side.commit[:9]}{side.commit[40:60]}"
            print(f"{side.name}: {said} installed in {side.install_s:.0f} s", flush=True)
        runs: dict[str, dict[str, list[Run]]] = {}
        skipped: dict[str, str] = {}
        for name in args.names:
            lacking = sorted({p for side in sides for p in missing(side, MODES[name])})
            if lacking:
                skipped[name] = f"needs {', '.join(lacking)}, not installed"
                print(f"{name}: skipped, {skipped[name]}", flush=True)
                continue
            runs[name] = {side.name: [] for side in sides}
            for r in range(args.rounds):
                for side in sides if r % 2 == 0 else sides[::-1]:
                    log = args.logs / f"{name}-{r + 1}-{side.name}.log"
                    run = run_one(side, name, args.timeout, log)
                    runs[name][side.name].append(run)
                    print(
                        f"{name} round {r + 1} {side.name}: {run.seconds:.0f} s"
                        + (f", {run.error}" if run.error else ""),
                        flush=True,
                    )
        text = report(args, sides, runs, skipped, started, load_start)
    print("\n" + text)
    if not args.no_save:
        head = (
            "# Before and after: the shared benchmarks on two refs\n\n"
            "Written by `python -m benchmarks.bench_ab` (`make bench-ab`; see its docstring "
            "for what is measured and how).\n\n"
        )
        if args.append and args.out.exists():
            with args.out.open("a") as f:
                f.write("\n" + text)
        else:
            args.out.write_text(head + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
