"""The fixed cost of an ``ingest`` command: what a run costs beyond its work.

One run starts an S3-compatible server (``dev.servers.memory_s3``, 2,000
objects of ~2 KB, no added latency), a GitHub-compatible server
(``dev.servers.github``, one repository of 100 pull requests) and one real
``prefect server start`` (SQLite under a temporary ``PREFECT_HOME``, as a
deployment has). Each command below runs ``--rounds`` times, the commands
interleaved round by round, each a fresh child process; every figure is the
median (and the minimum) of its rounds:

* ``import prefect``: ``python -c 'import prefect'``, the floor of any command
  that runs a Prefect flow; with the dependencies' bytecode compiled (as
  ``make setup`` installs them) and without (Python compiling every module,
  as happens when ``.pyc`` files are not written: ``PYTHONDONTWRITEBYTECODE``,
  a read-only environment);
* ``ingest s3`` over the 2,000 objects with nothing changed (the work: two
  LIST pages), and ``ingest github`` over the repository with nothing
  changed (the work: one conditional request answered 304), both against the
  running server; and ``ingest s3`` with no API configured (Prefect starts a
  temporary server for the command) and with no API configured while an
  ``ingest serve`` advertises its API (the command uses it);
* with ``--before REV``, the same ``ingest s3`` and ``ingest github`` from a
  checkout of REV, without compiled bytecode (how that revision installed).

For the ``ingest`` commands the output gives the split: start-up (process
start to the flow's "Beginning flow run" line), the flow body (the seconds
the run reports for itself) and the rest (finishing the run and exiting).
Fixed cost = wall - flow body; the target is fixed cost <= ``import prefect``
(compiled) + 1 s, with a running server.

Run ``python -m benchmarks.bench_commands [--rounds 5] [--before REV]``;
results are printed and appended to benchmarks/commands.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.bench_s3 import child_env
from benchmarks.measure import cpu_model, run_and_append

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "commands.md"
WORK = Path(__file__).resolve().parent / ".work"
OBJECTS = 2000
PULLS = 100
REPO = "octo/fixed-cost"
TOKEN = "bench-token-not-a-secret"
RUN_SECONDS = re.compile(r"^run \S+: .* in ([\d.]+) s$", re.M)
GITHUB_SECONDS = re.compile(r"^run \S+: \d+ pull requests .*\), ([\d.]+) s", re.M)
BEGIN = "Beginning flow run"
TARGET_OVER_IMPORT = 1.0


@dataclass
class Sample:
    wall: float
    startup: float | None = None
    body: float | None = None
    cpu: float | None = None  # user + system seconds of the command and the children it waited for


@dataclass
class Command:
    name: str
    args: list[str]
    env: dict[str, str]
    cwd: Path = ROOT
    flow: bool = True
    samples: list[Sample] = field(default_factory=list)

    def median(self, attr: str) -> float | None:
        values = [getattr(s, attr) for s in self.samples if getattr(s, attr) is not None]
        return statistics.median(values) if values else None

    def minimum(self, attr: str) -> float | None:
        values = [getattr(s, attr) for s in self.samples if getattr(s, attr) is not None]
        return min(values) if values else None


def timed(cmd: Command, timeout: float = 600) -> Sample:
    """Run once; wall time, and for a flow the time to its first line and its body."""
    begin: list[float] = []
    lines: list[str] = []
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd.args,
        cwd=cmd.cwd,
        env=cmd.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        if not begin and BEGIN in line:
            begin.append(time.perf_counter() - t0)
        lines.append(line)
    # wait4: the command's own CPU (user + system, with its waited-for children), which a
    # busy machine inflates far less than the wall time.
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    timer.cancel()
    text = "".join(lines)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd.name} exited {proc.returncode}:\n{text[-3000:]}")
    body = None
    if cmd.flow:
        m = RUN_SECONDS.search(text) or GITHUB_SECONDS.search(text)
        body = float(m.group(1)) if m else None
    return Sample(wall, begin[0] if begin else None, body, usage.ru_utime + usage.ru_stime)


@contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """A detached worktree of ``rev`` under benchmarks/.work, removed afterwards."""
    WORK.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="before-", dir=WORK))
    subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=ROOT, check=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)
        shutil.rmtree(path, ignore_errors=True)


def no_bytecode(env: dict[str, str], scratch: Path) -> dict[str, str]:
    """Python finds no compiled module and writes none: it compiles every import."""
    empty = Path(tempfile.mkdtemp(prefix="pycache-", dir=scratch))
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(empty)}


def machine() -> str:
    cpu = cpu_model()
    import prefect

    return (
        f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
        f"Prefect {prefect.__version__}, load average "
        + "/".join(f"{x:.1f}" for x in os.getloadavg())
    )


def run(a: argparse.Namespace, scratch: Path) -> str:
    from deployments import local_api
    from deployments.serve import PrefectServer
    from dev.servers.github import DevGitHub
    from dev.servers.memory_s3 import MemoryS3, free_port

    base = child_env(scratch)
    base["PREFECT_HOME"] = str(scratch / "client-home")
    base["GITHUB_TOKEN"] = TOKEN
    base.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a user's machine (see no_bytecode)
    py = sys.executable
    ingest = [py, "-m", "cli.main"]
    with ExitStack() as stack:
        s3 = stack.enter_context(MemoryS3())
        s3.seed("fixed-cost", OBJECTS)
        gh = stack.enter_context(DevGitHub(repos={REPO: PULLS}, token=TOKEN))
        log = stack.enter_context(open(scratch / "prefect-server.log", "w"))
        server = stack.enter_context(
            PrefectServer(port=free_port(), home=scratch / "server-home", env=base, log=log)
        )
        served = {**base, "PREFECT_API_URL": server.api_url}
        s3_args = ["s3", "--bucket", "fixed-cost", "--endpoint-url", s3.url, "--no-extract"]
        gh_args = ["github", "--repo", REPO, "--base-url", gh.url]

        def s3_cmd(name: str, env: dict[str, str], data: str, cwd: Path = ROOT) -> Command:
            return Command(name, [*ingest, *s3_args, "--data-dir", str(scratch / data)], env, cwd)

        def gh_cmd(name: str, env: dict[str, str], data: str, cwd: Path = ROOT) -> Command:
            return Command(name, [*ingest, *gh_args, "--data-dir", str(scratch / data)], env, cwd)

        imports = [
            Command("import prefect (bytecode compiled)", [py, "-c", "import prefect"], base),
            Command(
                "import prefect (no bytecode)",
                [py, "-c", "import prefect"],
                no_bytecode(base, scratch),
            ),
        ]
        for c in imports:
            c.flow = False
        commands = [
            *imports,
            s3_cmd("ingest s3, running server", served, "s3-served"),
            gh_cmd("ingest github, running server", served, "gh-served"),
            s3_cmd("ingest s3, no API: a running ingest serve", base, "s3-advertised"),
            s3_cmd("ingest s3, no API: temporary server", base, "s3-temporary"),
        ]
        advertised = commands[4]
        if a.before:
            before = stack.enter_context(checkout(a.before))
            old = no_bytecode(served, scratch)
            commands += [
                s3_cmd(f"ingest s3, running server, at {a.before}", old, "s3-before", before),
                gh_cmd(f"ingest github, running server, at {a.before}", old, "gh-before", before),
            ]
        for c in commands:  # the first run of each fills its data folder: not measured
            if c.flow:
                with advert(local_api, server.api_url, base, c is advertised):
                    timed(c)
        for r in range(a.rounds):
            print(f"round {r + 1}/{a.rounds}", flush=True)
            for c in commands:
                with advert(local_api, server.api_url, base, c is advertised):
                    c.samples.append(timed(c))
                s = c.samples[-1]
                print(f"  {c.name}: {s.wall:.2f} s", flush=True)
    return report(a, commands)


@contextmanager
def advert(local_api: object, api_url: str, env: dict[str, str], on: bool) -> Iterator[None]:
    """While ``on``: advertise ``api_url`` in the client's PREFECT_HOME, as serve does."""
    if not on:
        yield
        return
    saved = os.environ.get("PREFECT_HOME")
    os.environ["PREFECT_HOME"] = env["PREFECT_HOME"]
    try:
        with local_api.advertise(api_url):  # type: ignore[attr-defined]
            yield
    finally:
        if saved is None:
            os.environ.pop("PREFECT_HOME", None)
        else:
            os.environ["PREFECT_HOME"] = saved


def _s(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def report(a: argparse.Namespace, commands: Sequence[Command]) -> str:
    floor = commands[0].median("wall") or 0.0
    rows = []
    for c in commands:
        wall, body = c.median("wall"), c.median("body")
        fixed = None if wall is None or body is None else wall - body
        rest = None
        if wall is not None and c.median("startup") is not None and body is not None:
            rest = wall - (c.median("startup") or 0) - body
        rows.append(
            f"| {c.name} | {_s(wall)} | {_s(c.minimum('wall'))} | {_s(c.median('startup'))} "
            f"| {_s(body)} | {_s(rest)} | {_s(fixed)} | "
            + (f"{(fixed or 0) - floor:+.2f} |" if fixed is not None else " |")
        )
    targets = []
    for c in commands:
        if c.flow and "running server" in c.name and " at " not in c.name:
            wall, body = c.median("wall"), c.median("body")
            if wall is None or body is None:
                continue
            over = wall - body - floor
            verdict = "PASS" if over <= TARGET_OVER_IMPORT else "FAIL"
            targets.append(
                f"| {c.name} | {wall - body:.2f} s | {floor:.2f} s + {TARGET_OVER_IMPORT:.0f} s "
                f"| {over:+.2f} s | {verdict} |"
            )
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    args = " ".join(sys.argv[1:])
    return "\n".join(
        [
            f"## Run of {now}",
            "",
            f"`python -m benchmarks.bench_commands{(' ' + args) if args else ''}`",
            "",
            f"Machine: {machine()}; {a.rounds} rounds, medians (and the fastest round).",
            "",
            "| command | wall s | fastest s | start-up s | flow body s | rest s | fixed cost s "
            "| fixed cost - import prefect |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "Target: fixed cost (wall - flow body) <= `import prefect` (compiled) + 1 s.",
            "",
            "| command | fixed cost | budget | over import prefect | result |",
            "|---|---|---|---|---|",
            *targets,
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_commands",
        description="The fixed cost of ingest commands, with and without a running server.",
    )
    p.add_argument("--rounds", type=int, default=5, help="rounds per command (default 5)")
    p.add_argument("--before", help="also measure the commands of this git revision")
    p.add_argument("--no-save", action="store_true", help="print only")
    a = p.parse_args(argv)
    return run_and_append(
        lambda scratch: run(a, scratch),
        work=WORK,
        prefix="commands-",
        out=None if a.no_save else OUT,
        module="benchmarks.bench_commands",
        title="Fixed cost per command",
    )


if __name__ == "__main__":
    raise SystemExit(main())
