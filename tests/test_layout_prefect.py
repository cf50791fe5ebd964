"""Prefect as given, flows that compose, a thin command: rules read from the source.

- The shipped packages subclass neither Prefect's ``Flow`` nor its ``Task``, and every
  flow the project deploys is a plain ``prefect.Flow``.
- ``flows/`` defines no task, and imports from the library only the modules of the
  types its flows take, return and raise (``FLOWS_MAY_IMPORT``); the work is the
  tasks' (``tasks/``).
- A public function name is defined once in the wheel: a task is not a second
  ``fetch_source`` or ``publish_summary`` that forces an import alias. The repeats that
  were already there (``KNOWN_REPEATS``) may only go.
- The command (``cli/``) keeps its commands apart from the machinery that runs a flow
  and from the output formatting, and no module of it is over 600 lines.
- Importing the library, the tasks or the deployments changes nothing in the process:
  ``ingest.setup_process`` is the one set-up call.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from pathlib import Path

import pytest

from tests.helpers import ROOT

WHEEL = ("ingest", "flows", "tasks", "deployments", "cli")

# The library modules flows/ may import: the package itself (``ingest.setup_process``),
# and the modules of the types the flows take, return and raise.
FLOWS_MAY_IMPORT = {
    "ingest",
    "ingest.errors",
    "ingest.records",
    "ingest.report.nightly",
    "ingest.report.summary",
    "ingest.rest.errors",
    "ingest.rest.records",
    "ingest.rest.source",
    "ingest.rest.summary",
}

# Public function names defined in more than one module of the wheel when this rule was
# written (a task named as the library step it wraps, short names such as ``markdown``
# or ``load`` in modules of different concerns, ``main`` of each program). The set may
# only shrink; a new repeat fails.
KNOWN_REPEATS = {
    "check_bucket",
    "chunk_pages",
    "commit_run",
    "connect",
    "credentials",
    "deleted_rows",
    "describe",
    "download_batch",
    "extract_batch",
    "extract_stored",
    "fetch_batch",
    "find_changes",
    "headline",
    "list_objects",
    "load",
    "locate",
    "main",
    "markdown",
    "plan",
    "record",
    "release",
    "resolve",
    "summarize",
    "table",
}


def modules(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py"))


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def name_of(path: Path) -> str:
    return str(path.relative_to(ROOT))


def runtime_imports(tree: ast.Module) -> list[str]:
    """The modules a module imports when it runs (not under ``if TYPE_CHECKING:``)."""
    found: list[str] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.append(node.module)
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit([n for n in inner if isinstance(n, ast.stmt | ast.ExceptHandler)])

    visit(tree.body)
    return found


def test_no_subclass_of_prefects_flow_or_task() -> None:
    found = []
    for path in modules(*WHEEL):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b).split("[")[0].rsplit(".", 1)[-1] for b in node.bases}
                if bases & {"Flow", "Task"}:
                    found.append(f"{name_of(path)}: class {node.name}")
    assert found == []


def test_every_deployed_flow_is_a_plain_prefect_flow() -> None:
    from prefect import Flow
    from prefect.flows import load_flow_from_entrypoint

    from deployments import project

    entries = project.deployments(project.load())
    flows = [load_flow_from_entrypoint(str(ROOT / e["entrypoint"])) for e in entries]
    assert flows and [type(f) for f in flows] == [Flow] * len(flows)


def test_flows_define_no_task() -> None:
    found = []
    for path in modules("flows"):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for d in node.decorator_list:
                    called = d.func if isinstance(d, ast.Call) else d
                    if ast.unparse(called) in {"task", "prefect.task"}:
                        found.append(f"{name_of(path)}: {node.name}")
    assert found == []


def test_flows_import_the_library_only_for_their_types() -> None:
    found = [
        f"{name_of(path)}: {module}"
        for path in modules("flows")
        for module in runtime_imports(parsed(path))
        if (module == "ingest" or module.startswith("ingest.")) and module not in FLOWS_MAY_IMPORT
    ]
    assert found == []


def public_functions() -> dict[str, list[str]]:
    defined: dict[str, list[str]] = defaultdict(list)
    for path in modules(*WHEEL):
        for node in parsed(path).body:
            public = not getattr(node, "name", "_").startswith("_")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and public:
                defined[node.name].append(name_of(path))
    return defined


def test_a_public_function_name_is_defined_once() -> None:
    defined = public_functions()
    repeated = {name for name, where in defined.items() if len(where) > 1}
    new = {name: defined[name] for name in sorted(repeated - KNOWN_REPEATS)}
    assert new == {}
    assert len(defined["publish_summary"]) == len(defined["fetch_source"]) == 1


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_no_module_imports_a_wheel_function_under_another_name() -> None:
    """An alias such as ``fetch_source as fetch_source_plain`` means a name is taken
    twice."""
    defined = public_functions()
    found = [
        f"{name_of(path)}: {a.name} as {a.asname}"
        for path in modules(*WHEEL)
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in WHEEL
        for a in node.names
        if a.asname
        and a.asname != a.name
        and a.name in defined
        and not is_module(f"{node.module}.{a.name}")
    ]
    assert found == []


@pytest.mark.parametrize("path", modules("cli"), ids=name_of)
def test_no_cli_module_is_over_600_lines(path: Path) -> None:
    """Non-blank, non-comment lines, docstrings included."""
    lines = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert len(lines) <= 600


def test_the_command_module_holds_the_commands_only() -> None:
    """cli/main.py: each function a command (or the app's callback) and ``main``; the
    helpers are the run machinery's, the output's or the shared options'."""
    tree = parsed(ROOT / "cli" / "main.py")
    helpers = [
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and not n.decorator_list
        and n.name != "main"
    ]
    assert helpers == []


@pytest.mark.parametrize("path", modules("cli"), ids=name_of)
def test_output_and_run_machinery_each_have_one_home(path: Path) -> None:
    """JSON and CSV are written by cli/output.py only (one ``--format`` switch), and
    signals and the Prefect API of a run are handled by cli/running.py only."""
    text = path.read_text(encoding="utf-8")
    if path.name != "output.py":
        assert "json.dumps" not in text and "csv.writer" not in text
    if path.name != "running.py":
        assert "signal.signal" not in text and "command_api" not in text


IMPORT_ALL = """
import importlib, json, os, pkgutil, sys
before = dict(os.environ)
names = []
for package in ("ingest", "tasks", "deployments"):
    root = importlib.import_module(package)
    names += [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")]
for name in names:
    importlib.import_module(name)
changed = sorted(k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k))
if sys.argv[1:] == ["setup"]:
    import ingest
    ingest.setup_process(tables=False)
    changed = sorted(k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k))
print(json.dumps({"modules": len(names), "changed": changed}))
"""


@pytest.mark.parametrize("then", ["", "setup"])
def test_importing_the_library_changes_nothing_until_the_set_up_call(then: str) -> None:
    """Every module of the library, the tasks and the deployments imported in a fresh
    process leaves its environment as it was; the one set-up call
    (``ingest.setup_process``, which the command and a flow's worker make) is what sets
    the process's variables."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in SET_UP}
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, *([then] if then else [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["modules"] > 100
    assert seen["changed"] == (sorted(SET_UP) if then else [])


SET_UP = {"OPENBLAS_NUM_THREADS", "ARROW_DEFAULT_MEMORY_POOL"}
