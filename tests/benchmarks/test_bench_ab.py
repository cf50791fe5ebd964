"""The A/B harness's own logic: reading a benchmark's tables, its headline figures, the
spread verdict, and a side's benchmark run as a child process with the fallback to the
options an older benchmark knows. No timing is asserted: the timings are the
benchmarks' own business."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks import bench_ab
from benchmarks.bench_ab import Compared, Mode, Side, headline, new_tables, run_one, tables

WHOLE = """\
## Run of 2026-12-03 23:57 UTC

| command | median wall s | rounds s | median CPU s | against | failures |
|---|---|---|---|---|---|
| import prefect | 1.60 | 1.70, 1.60, 1.30 | 1.59 |  |  |
| no-op | 3.04 | 3.12, 3.04, 2.91 | 2.92 | import prefect +1.44 s |  |
| no-op, no API, kept server | 3.33 | 3.33, 2.91, 3.61 | 3.25 | import prefect +1.73 s |  |

| target | median | budget | result |
|---|---|---|---|
| no-op | 3.04 s | import prefect + 1 s = 2.60 s | FAIL |
"""

TINY = """\
| round | pool | extract-batch, its own figure s | s3-ingest flow call s |
|---:|---|---:|---:|
| 0 | started | 1.192 | 4.72 |
| 1 | up | 0.016 | 2.24 |
| 2 | up | 0.034 | 2.18 |
| 3 | up | 0.026 | 2.15 |
"""


def test_tables_label_rows_by_their_leading_text_cells() -> None:
    found = tables(WHOLE.splitlines())
    commands = next(rows for key, rows in found.items() if "median wall s" in key)
    assert commands["import prefect"]["median wall s"] == 1.60
    assert commands["no-op"]["median CPU s"] == 2.92
    # "rounds s" holds a list: its first number is read; "against" has none past a label
    assert commands["no-op, no API, kept server"]["rounds s"] == 3.33
    assert "against" not in commands["no-op"]
    # the headline is read from the first table with a match, not the targets' table
    assert headline(found, r"no-op", r"median wall s") == 3.04
    # the targets' table: "median" reads "3.04 s"; "budget" starts with words, no figure
    assert headline(found, r"no-op", r"median") == 3.04
    assert headline(found, r"no-op", r"budget") is None
    assert headline(found, r"first run", r"median wall s") is None


def test_headline_is_the_median_of_the_matching_rows() -> None:
    found = tables(TINY.splitlines())
    # rounds 1-3 (pool up): 0.016, 0.034, 0.026 -> 0.026; round 0 started the pool
    assert headline(found, r"[1-9]\d* / up", r"extract-batch, its own figure s") == 0.026
    assert headline(found, r"0 / started", r"s3-ingest flow call s") == 4.72


def test_new_tables_keeps_only_tables_with_new_lines() -> None:
    old = WHOLE.splitlines()
    added = [*old, "", "## Run of 2026-12-04 01:00 UTC", "", *TINY.splitlines()]
    got = new_tables(old, added)
    assert got[0] == "## Run of 2026-12-04 01:00 UTC"
    assert got[1:] == TINY.splitlines()
    assert new_tables(old, old) == []


def test_within_spread_is_whether_the_two_spreads_overlap() -> None:
    assert Compared([1.0, 1.2], [1.1, 1.3]).within is True
    assert Compared([1.0, 1.2], [1.3, 1.4]).within is False
    assert Compared([1.0], [1.1, 1.3]).within is None  # one round: no spread to judge by
    assert Compared([2.0, 4.0], [3.0, 3.0]).ratio == 1.0


FAKE = '''\
"""A benchmark of an older ref: it knows --rounds but not --no-save."""
import argparse
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("--rounds", type=int, default=1)
a = p.parse_args()
out = Path(__file__).parent / "fake.md"
out.write_text(out.read_text() + "\\n| step | wall s |\\n|---|---|\\n| load | %d.5 |\\n" % a.rounds)
'''


def test_a_side_runs_its_own_benchmark_with_the_options_it_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    (tree / "benchmarks").mkdir(parents=True)
    (tree / "benchmarks" / "__init__.py").write_text("")
    (tree / "benchmarks" / "bench_fake.py").write_text(textwrap.dedent(FAKE))
    (tree / "benchmarks" / "fake.md").write_text("# Fake\n\n| step | wall s |\n|---|---|\n")
    (tree / ".venv" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, tree / ".venv" / "bin" / "python")
    mode = Mode(
        "bench_fake",
        (("--rounds", "3", "--no-save"), ("--rounds", "2")),
        (("load, wall s", r"load", r"wall s"),),
    )
    monkeypatch.setitem(bench_ab.MODES, "fake", mode)
    side = Side("before", "v1", tree)

    run = run_one(side, "fake", timeout=60)

    assert run.error == ""
    assert side.chosen["fake"] == 1  # --no-save was refused, the second set was taken
    assert headline(run.tables, r"load", r"wall s") == 2.5
    # a later round starts from the options that worked, and reads only its own table
    again = run_one(side, "fake", timeout=60)
    assert headline(again.tables, r"load", r"wall s") == 2.5
    assert (tree / "benchmarks" / "fake.md").read_text().count("| load |") == 2


def test_a_failing_benchmark_is_an_error_of_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    (tree / "benchmarks").mkdir(parents=True)
    (tree / "benchmarks" / "__init__.py").write_text("")
    (tree / "benchmarks" / "bench_broken.py").write_text("raise SystemExit('no server')\n")
    (tree / ".venv" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, tree / ".venv" / "bin" / "python")
    monkeypatch.setitem(bench_ab.MODES, "broken", Mode("bench_broken", ((),), ()))

    run = run_one(Side("after", "v2", tree), "broken", timeout=60)

    assert run.error == "exit 1: no server"
    assert run.tables == {}


HANGS = """\
import subprocess, sys, time
from pathlib import Path

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
(Path(__file__).parent / "child.pid").write_text(str(child.pid))
time.sleep(600)
"""


def stopped(pid: int) -> bool:
    """Gone, or a zombie waiting for its new parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def test_a_run_past_its_time_is_stopped_with_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    (tree / "benchmarks").mkdir(parents=True)
    (tree / "benchmarks" / "__init__.py").write_text("")
    (tree / "benchmarks" / "bench_hangs.py").write_text(HANGS)
    (tree / ".venv" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, tree / ".venv" / "bin" / "python")
    monkeypatch.setitem(bench_ab.MODES, "hangs", Mode("bench_hangs", ((),), ()))
    log = tmp_path / "logs" / "hangs.log"

    run = run_one(Side("after", "v2", tree), "hangs", timeout=3, log=log)

    assert run.error == "no result within 3 s"
    child = int((tree / "benchmarks" / "child.pid").read_text())
    assert stopped(child), "the benchmark's own child outlived the time limit"
    assert log.read_text().startswith(
        f"$ {tree / '.venv' / 'bin' / 'python'} -m benchmarks.bench_hangs"
    )


LEAVES = """\
import subprocess, sys
from pathlib import Path

cmd = [sys.executable, "-c", "import time; time.sleep(600)"]
child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
(Path(__file__).parent / "child.pid").write_text(str(child.pid))
# a server that detaches into a session of its own, as ingest's kept Prefect server does
kept = subprocess.Popen(
    cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
)
(Path(__file__).parent / "kept.pid").write_text(str(kept.pid))
print("| step | wall s |")
print("|---|---|")
print("| left | 1.5 |")
"""


def test_what_a_finished_run_left_running_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    (tree / "benchmarks").mkdir(parents=True)
    (tree / "benchmarks" / "__init__.py").write_text("")
    (tree / "benchmarks" / "bench_leaves.py").write_text(LEAVES)
    (tree / ".venv" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, tree / ".venv" / "bin" / "python")
    monkeypatch.setitem(bench_ab.MODES, "leaves", Mode("bench_leaves", ((),), ()))

    run = run_one(Side("before", "v1", tree), "leaves", timeout=60)

    assert run.error == ""
    assert headline(run.tables, r"left", r"wall s") == 1.5
    child = int((tree / "benchmarks" / "child.pid").read_text())
    assert stopped(child), "a process the benchmark left running outlived its run"
    kept = int((tree / "benchmarks" / "kept.pid").read_text())
    assert stopped(kept), "a server the benchmark detached outlived its run"
