"""The whole command, as a user waits for it: process start to exit, start-up and commits
included, side by side with ``import prefect`` and with s5cmd on the same objects.

One run starts an S3-compatible server (``dev.servers.memory_s3``, in memory, 20 ms added
to every request: moto's own CPU would otherwise be most of what is timed, for every
contender) holding the object set of ``benchmarks.bench_s3`` (2,000 objects of random
bytes, a ~30 KB median and five of 5-15 MB: 123 MB), and one real ``prefect server start``
(SQLite under a temporary ``PREFECT_HOME``, as a deployment has). Then, ``--rounds`` times,
the commands interleaved round by round, each a fresh child process with
``PYTHONDONTWRITEBYTECODE=1`` (as on these machines and in CI), and each measured tree's
packages compiled to bytecode first, as an install compiles them (the image's ``uv sync
--no-editable`` with ``UV_COMPILE_BYTECODE=1``) and as Prefect's are for ``import prefect``:

* ``import prefect``: the floor of any command that runs a Prefect flow;
* ``no-op``: ``ingest s3`` over an empty prefix, against the running server;
* ``no-change``: ``ingest s3`` over the 2,000 objects, nothing changed (a data folder
  the first round filled), against the running server;
* ``first run``: ``ingest s3`` over the 2,000 objects into a new data folder each round,
  with text extraction (the default), against the running server;
* ``no-op, this tree uncompiled``: the no-op from a checkout of this commit without
  bytecode (every command compiles the project's modules again; ``--no-source-case``
  leaves it out);
* ``s5cmd cp``: the same 2,000 objects into a new folder each round;
* ``no-op, no API``: no Prefect API configured. ``kept server``: a later command, which
  finds the local server an earlier command started and kept (the default since the
  kept server; started by the warm-up); ``a server per command``: with
  ``INGEST_SERVE_LOCAL_SERVER_IDLE=0`` each command starts and stops a server of its own
  on a Prefect home that exists (what every command did before); ``new Prefect home``: a
  new, empty home each round (a new machine's first command: the server creates and
  migrates its database first; the server it keeps is stopped after the timing).

Targets (the first-contact work): no-op <= import prefect + 1 s; no-change <= import
prefect + 1.5 s; first run <= s5cmd + 3 s; a command with no API configured (the kept
server) <= import prefect + 3 s. ``--only no-api`` runs ``import prefect``, the no-op
against a running server and the no-API cases alone (no objects seeded, no s5cmd);
``--only first-run`` runs ``import prefect``, the first run and s5cmd alone, each tree's
first run once unmeasured first, the commands' order rotated round by round, and ends
with the per-round ratios of the trees. With ``--before REV`` (repeatable) the ``ingest``
commands of that revision run in the same rounds (from a worktree of it under
benchmarks/.work).

Run ``python -m benchmarks.bench_whole [--rounds 3] [--before REV]``; results are
printed and appended to benchmarks/whole.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.bench_commands import Command, checkout, machine, timed
from benchmarks.bench_s3 import BUCKET, child_env, plan, s5cmd_binary
from benchmarks.bench_s3 import seed as seed_objects
from benchmarks.measure import run_and_append

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "whole.md"
WORK = Path(__file__).resolve().parent / ".work"
OBJECTS = 2000
LARGE = 5
LATENCY_MS = 20
PACKAGES = ("ingest", "flows", "tasks", "deployments", "cli", "sources", "dev")


@dataclass
class Case:
    """A command measured every round; ``fresh`` gives each round its own new folders."""

    name: str
    make: Callable[[int], Command]
    after: Callable[[int], None] | None = None  # after each round's timing, not timed
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)  # user + system s of the command
    failures: list[str] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.walls) if self.walls else None


def run(a: argparse.Namespace, scratch: Path) -> str:
    import boto3

    from deployments.serve import PrefectServer
    from dev.servers.memory_s3 import MemoryS3, free_port

    base = child_env(scratch)
    os.environ.update({k: v for k, v in base.items() if k.startswith("AWS_")})  # seeding
    base["PYTHONDONTWRITEBYTECODE"] = "1"
    base["PREFECT_HOME"] = str(scratch / "client-home")
    base.pop("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", None)  # Prefect's default
    py = sys.executable
    with ExitStack() as stack:
        s3 = stack.enter_context(MemoryS3(latency_ms=LATENCY_MS))
        boto3.client("s3", endpoint_url=s3.url, region_name="us-east-1").create_bucket(
            Bucket=BUCKET
        )
        only_no_api = a.only == "no-api"
        only_first = a.only == "first-run"
        specs = [] if only_no_api else plan("docs/", OBJECTS, LARGE)
        if specs:
            seed_objects(s3.url, specs)
        total_mb = sum(sp.size for sp in specs) / 1e6
        log = stack.enter_context(open(scratch / "prefect-server.log", "w"))
        server = stack.enter_context(
            PrefectServer(port=free_port(), home=scratch / "server-home", env=base, log=log)
        )
        served = {**base, "PREFECT_API_URL": server.api_url}
        trees = {"": ROOT}
        for rev in a.before or []:
            trees[f", at {rev}"] = stack.enter_context(checkout(rev))
        # Each tree's packages compiled, as an install compiles them (the image's `uv sync
        # --no-editable` with UV_COMPILE_BYTECODE=1) and as Prefect's are for `import
        # prefect`: a checkout under PYTHONDONTWRITEBYTECODE=1 otherwise compiles its
        # ~15,000 lines again in every command (~0.07 s of CPU). One case keeps it in view.
        for tree in trees.values():
            compile_packages(tree)
        wanted = a.source_case and not only_first
        source_only = stack.enter_context(checkout("HEAD")) if wanted else None

        def ingest(env: dict[str, str], prefix: str, folder: str, cwd: Path) -> Command:
            # Folder names without spaces: an old revision could not open a lake in such a path.
            data = scratch / folder.replace(", at ", "-at-")
            args = [py, "-m", "cli.main", "s3", "--bucket", BUCKET, "--prefix", prefix]
            args += ["--endpoint-url", s3.url, "--data-dir", str(data)]
            # Each tree's own code in the command and in any process it starts (an inherited
            # PYTHONPATH, or the installed checkout, would otherwise win in a child).
            return Command("", args, {**env, "PYTHONPATH": str(cwd)}, cwd)

        def new_home(r: int) -> dict[str, str]:
            return {**base, "PREFECT_HOME": str(scratch / f"new-home-{r}")}

        # The kept servers this run starts, stopped at its end whatever happens.
        stack.callback(stop_kept_servers, scratch)
        kept = {**base, "INGEST_SERVE_LOCAL_SERVER_IDLE": "3600"}
        per_command = {**base, "INGEST_SERVE_LOCAL_SERVER_IDLE": "0"}

        cases = [
            Case("import prefect", lambda r: Command("", [py, "-c", "import prefect"], base)),
        ]
        for label, tree in trees.items():
            cases += [
                Case(
                    f"no-op{label}",
                    lambda r, t=tree, lb=label: ingest(served, "empty/", f"noop{lb}", t),
                ),
                Case(
                    f"no-change{label}",
                    lambda r, t=tree, lb=label: ingest(served, "docs/", f"same{lb}", t),
                ),
                Case(
                    f"first run{label}",
                    lambda r, t=tree, lb=label: ingest(served, "docs/", f"first{lb}-{r}", t),
                ),
            ]
        if only_no_api:
            cases = cases[:2]  # import prefect, and the no-op against the running server
        if only_first:
            cases = [c for c in cases if c.name.startswith(("import prefect", "first run"))]
        if source_only is not None and not only_no_api and not only_first:
            cases.append(
                Case(
                    "no-op, this tree uncompiled",
                    lambda r: ingest(served, "empty/", "noop-source", source_only),
                )
            )
        if not only_no_api:
            cases.append(s5cmd_case(s3.url, scratch, base))
        for label, tree in trees.items() if not only_first else ():
            cases += [
                Case(
                    f"no-op, no API, kept server{label}",
                    lambda r, t=tree, lb=label: ingest(kept, "empty/", f"kept{lb}", t),
                ),
                Case(
                    f"no-op, no API, a server per command{label}",
                    lambda r, t=tree, lb=label: ingest(per_command, "empty/", f"noapi{lb}", t),
                ),
                Case(
                    f"no-op, no API, new Prefect home{label}",
                    lambda r, t=tree, lb=label: ingest(
                        new_home(r if not lb else 1000 + r), "empty/", f"new{lb}", t
                    ),
                    after=lambda r, lb=label: stop_kept_in(
                        scratch / f"new-home-{r if not lb else 1000 + r}"
                    ),
                ),
            ]
        # Warm-up, not measured: fills the no-change folders and the existing Prefect home.
        # With --only first-run: each tree's first run once, into a folder of its own.
        for case in cases:
            warm = case.name.startswith(("no-op", "no-change")) or (
                only_first and case.name.startswith("first run")
            )
            if warm and "new Prefect home" not in case.name:
                cmd = case.make(-1)
                cmd.flow = False
                try:
                    timed(cmd)
                except RuntimeError as exc:
                    print(f"warm-up of {case.name} failed: {str(exc)[:300]}", flush=True)
        for r in range(a.rounds):
            print(f"round {r + 1}/{a.rounds}", flush=True)
            shift = r % len(cases) if only_first else 0  # no command always first or last
            for case in cases[shift:] + cases[:shift]:
                cmd = case.make(r)
                cmd.name, cmd.flow = case.name, False
                try:
                    sample = timed(cmd)
                    case.walls.append(sample.wall)
                    case.cpus.append(sample.cpu or 0.0)
                    said = f"{case.walls[-1]:.2f} s, CPU {case.cpus[-1]:.2f} s"
                    print(f"  {case.name}: {said}", flush=True)
                except RuntimeError as exc:
                    first = str(exc).splitlines()
                    case.failures.append(next((ln for ln in first if "Error" in ln), first[0]))
                    print(f"  {case.name}: FAILED {case.failures[-1][:200]}", flush=True)
                    print("    " + "\n    ".join(first[-12:]), flush=True)
                if case.after is not None:
                    case.after(r)
    return report(a, cases, total_mb)


def s5cmd_case(endpoint: str, scratch: Path, env: dict[str, str]) -> Case:
    return Case(
        "s5cmd cp",
        lambda r: Command(
            "",
            [
                str(s5cmd_binary()),
                "--endpoint-url",
                endpoint,
                "cp",
                f"s3://{BUCKET}/docs/*",
                str(scratch / f"s5cmd-{r}") + "/",
            ],
            env,
        ),
    )


def stop_kept_in(home: Path) -> None:
    """Stop the local server a command kept with ``home`` as its Prefect home, if any."""
    from deployments import local_api

    try:
        pid = json.loads((home / local_api.KEPT_FILE).read_text()).get("pid")
    except (OSError, ValueError):
        return
    if not isinstance(pid, int):
        return
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (home / local_api.KEPT_FILE).exists():
        time.sleep(0.1)  # waiting for the keeper to stop its server


def stop_kept_servers(scratch: Path) -> None:
    for home in [scratch / "client-home", *scratch.glob("new-home-*")]:
        stop_kept_in(home)


def compile_packages(tree: Path) -> None:
    """Write the bytecode of ``tree``'s packages (``compileall`` writes it whatever
    PYTHONDONTWRITEBYTECODE says; a module changed later is compiled again as usual)."""
    folders = [str(tree / p) for p in PACKAGES if (tree / p).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], check=True)


def report(a: argparse.Namespace, cases: Sequence[Case], total_mb: float) -> str:
    by = {c.name: c for c in cases}
    floor = by["import prefect"].median or 0.0
    s5 = (by["s5cmd cp"].median or 0.0) if "s5cmd cp" in by else 0.0
    rows = []
    for c in cases:
        med = c.median
        ratio = ""
        if med is not None and c.name.startswith("first run"):
            ratio = f"{med / s5:.2f}x s5cmd" if s5 else ""
        elif med is not None and c.name != "import prefect" and c.name != "s5cmd cp":
            ratio = f"import prefect {med - floor:+.2f} s"
        walls = ", ".join(f"{w:.2f}" for w in c.walls)
        failed = f"{len(c.failures)} failed: {c.failures[0][:120]}" if c.failures else ""
        cpu = f"{statistics.median(c.cpus):.2f}" if c.cpus else ""
        rows.append(
            f"| {c.name} | {'' if med is None else f'{med:.2f}'} | {walls} | {cpu} | {ratio} "
            f"| {failed} |"
        )
    targets = []
    for name, budget, what in (
        ("no-op", floor + 1.0, "import prefect + 1 s"),
        ("no-change", floor + 1.5, "import prefect + 1.5 s"),
        ("first run", s5 + 3.0, "s5cmd + 3 s"),
        ("no-op, no API, kept server", floor + 3.0, "import prefect + 3 s"),
    ):
        med = by[name].median if name in by else None
        if med is None:
            continue
        verdict = "PASS" if med <= budget else "FAIL"
        targets.append(f"| {name} | {med:.2f} s | {what} = {budget:.2f} s | {verdict} |")
    ratios = []
    for c in cases:
        base_name, _, rev = c.name.partition(", at ")
        base = by.get(base_name)
        if not rev or base is None or len(base.walls) != len(c.walls) or not c.walls:
            continue
        for what, mine_all, theirs_all in (
            ("wall", base.walls, c.walls),
            ("CPU", base.cpus, c.cpus),
        ):
            if len(mine_all) != len(theirs_all) or not all(theirs_all):
                continue
            per = [mine / theirs for mine, theirs in zip(mine_all, theirs_all, strict=True)]
            ratios.append(
                f"| {base_name} | {what} | {rev} | {', '.join(f'{x:.2f}' for x in per)} "
                f"| {statistics.median(per):.2f} |"
            )
    if ratios:
        ratios = [
            "| command | measure | this tree over | per-round ratios | median |",
            "|---|---|---|---|---|",
            *ratios,
            "",
        ]
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    args = " ".join(sys.argv[1:])
    return "\n".join(
        [
            f"## Run of {now}",
            "",
            f"`python -m benchmarks.bench_whole{(' ' + args) if args else ''}`",
            "",
            f"Machine: {machine()}; {a.rounds} rounds, commands interleaved; "
            f"{OBJECTS if total_mb else 0} objects, {total_mb:.0f} MB, {LATENCY_MS} ms a request; "
            "PYTHONDONTWRITEBYTECODE=1, each tree's packages compiled first.",
            "",
            "| command | median wall s | rounds s | median CPU s | against | failures |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            "| target | median | budget | result |",
            "|---|---|---|---|",
            *targets,
            "",
            *ratios,
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_whole",
        description="Whole ingest commands, start-up included, beside import prefect and s5cmd.",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds per command (default 3)")
    p.add_argument(
        "--before",
        action="append",
        help="also measure the ingest commands of this git revision (repeatable)",
    )
    p.add_argument(
        "--no-source-case",
        dest="source_case",
        action="store_false",
        help="skip the no-op of this commit's checkout without compiled bytecode",
    )
    p.add_argument(
        "--only",
        choices=["no-api", "first-run"],
        help="no-api: import prefect, the no-op against a server and the no-API commands alone;"
        " first-run: import prefect, the first run and s5cmd alone",
    )
    p.add_argument("--no-save", action="store_true", help="print only")
    a = p.parse_args(argv)
    return run_and_append(
        lambda scratch: run(a, scratch),
        work=WORK,
        prefix="whole-",
        out=None if a.no_save else OUT,
        module="benchmarks.bench_whole",
        title="The whole command",
    )


if __name__ == "__main__":
    raise SystemExit(main())
