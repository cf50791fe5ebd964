"""The layout of the project's packages, read from the source with ``ast``, and the wheel.

The product is ``ingest`` (the library), ``tasks``, ``flows``, ``deployments`` and ``cli``
(the ``ingest`` command); imports flow one way: cli -> flows -> tasks -> ingest, and cli ->
deployments. Nothing shipped imports the development tools (``dev/``, moto, werkzeug),
not even lazily inside a function: they run from a checkout and the wheel leaves them out.
Nothing imports ``cli`` but the console script (``ingest = cli.main:main``); the tests,
which drive the command, and the reference generator, which documents it, aside. No
module of the product imports itself again through others (no import cycle).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UV = ROOT / ".tools" / "bin" / "uv"  # make setup installs it

SHIPPED = ("ingest", "tasks", "flows", "deployments", "cli")
DEV_TOOLS = {"dev", "moto", "werkzeug"}
RULES = {
    "ingest": {"flows", "tasks", "deployments", "cli", *DEV_TOOLS},
    "tasks": {"flows", "cli", "deployments", *DEV_TOOLS},
    "flows": {"cli", "deployments", *DEV_TOOLS},
    "deployments": {"flows", "tasks", "cli", *DEV_TOOLS},  # flows by entrypoint, not import
    "cli": DEV_TOOLS,
    "dev": {"cli"},  # the demo prints through ingest.report.console, as the command does
    "benchmarks": {"cli"},  # they run the command as a user does: python -m cli.main
}
DYNAMIC = {"import_module", "__import__"}  # importlib.import_module("flows.x"), __import__(...)


def imports_in(root: Path, path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, dotted module name, names imported from it)`` of every import in ``path``,
    wherever it sits (``import a.b``: no names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = list(path.relative_to(root).parts[:-1])  # the package a relative import starts from
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield node.lineno, module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if name in DYNAMIC and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield node.lineno, arg.value, []


def imported_modules(root: Path, path: Path) -> Iterator[tuple[int, str]]:
    """``(line, dotted module name)`` of every import in ``path``, wherever it sits."""
    for line, module, _ in imports_in(root, path):
        yield line, module


def violations(root: Path, package: str, forbidden: set[str]) -> list[str]:
    found = []
    for path in sorted((root / package).rglob("*.py")):
        for line, module in sorted(imported_modules(root, path)):
            if module.split(".")[0] in forbidden:
                found.append(f"{path.relative_to(root).as_posix()}:{line} imports {module}")
    return found


@pytest.mark.parametrize("package", sorted(RULES))
def test_import_direction(package: str) -> None:
    assert (ROOT / package / "__init__.py").is_file()
    assert violations(ROOT, package, RULES[package]) == []


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Top-level, lazy (inside a function), ``from`` and dynamic imports are all found."""
    pkg = tmp_path / "ingest"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "bad.py").write_text(
        "import flows.s3_ingest\n"
        "from tasks import s3\n"
        "def f():\n"
        "    from cli.main import app\n"
        "    import importlib\n"
        "    importlib.import_module('dev.servers.s3')\n"
        "from . import keys\n"
    )
    (pkg / "sub").mkdir()
    (pkg / "sub" / "__init__.py").write_text("from .. import keys\nfrom ..tasks import x\n")
    assert violations(tmp_path, "ingest", RULES["ingest"]) == [
        "ingest/bad.py:1 imports flows.s3_ingest",
        "ingest/bad.py:2 imports tasks",
        "ingest/bad.py:4 imports cli.main",
        "ingest/bad.py:6 imports dev.servers.s3",
    ]


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted name -> file of every module of ``packages`` (a package is its __init__)."""
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports, lazily or not. ``from p import m``
    of a submodule ``m`` is an edge to ``p.m`` alone: the package's ``__init__`` that
    Python runs first is a parent, not an import of the module."""
    known = modules(root, packages)

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets: set[str | None] = set()
        for _, module, names in imports_in(root, path):
            submodules = {f"{module}.{n}" for n in names} & known.keys()
            targets |= submodules
            if not names or len(submodules) < len(names):  # names of the module itself
                targets.add(resolve(module))
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_cycle_among_shipped_modules() -> None:
    assert cycles(import_graph(ROOT, SHIPPED)) == []


def test_the_cycle_check_sees_lazy_cycles_not_parent_packages(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import x\n")
    (pkg / "a.py").write_text("from pkg import b\nx = 1\n")  # b, not pkg/__init__
    (pkg / "b.py").write_text("def f():\n    from pkg.c import y\n")
    (pkg / "c.py").write_text("import pkg.b\ny = 2\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.b"}
    assert cycles(graph) == [["pkg.b", "pkg.c"]]


def test_the_wheel_packages_are_the_product() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert sorted(wheel["packages"]) == sorted(SHIPPED)
    assert pyproject["project"]["scripts"] == {"ingest": "cli.main:main"}


@pytest.mark.skipif(not UV.exists(), reason="uv is installed into .tools by make setup")
def test_the_built_wheel_holds_the_product_only(tmp_path: Path) -> None:
    """The wheel as built (about a second): the shipped packages and its metadata, none of
    dev/, tests/, benchmarks/ or tools/, and no module of it imports the dev tools."""
    subprocess.run(
        [str(UV), "build", "--wheel", "--quiet", "--out-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "UV_PYTHON": sys.executable},
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(tmp_path / "wheel")
    top = {n.split("/")[0] for n in names}
    [dist_info] = [t for t in top if t.endswith(".dist-info")]
    assert top - {dist_info} == set(SHIPPED)
    entry_points = (tmp_path / "wheel" / dist_info / "entry_points.txt").read_text()
    assert "ingest = cli.main:main" in entry_points
    sources = [n for n in names if n.endswith(".py")]
    assert sources and all(n.split("/")[0] in SHIPPED for n in sources)
    found = [v for package in SHIPPED for v in violations(tmp_path / "wheel", package, DEV_TOOLS)]
    assert found == []


def test_the_tests_mirror_the_packages() -> None:
    """Each folder of ``tests/`` is a package of the project (``tests/ingest/s3`` holds the
    tests of ``ingest/s3``), but ``chaos/``, the fault suite across them all, and
    ``fixtures/``, test data with its sources; only the tests of the project as a whole
    (its layout, in ``test_layout*.py``, and its docs) sit at the top."""
    tests = ROOT / "tests"
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        rel = folder.relative_to(tests)
        if rel.parts[0] in ("chaos", "fixtures", ".pytest_cache"):
            continue
        assert (ROOT / rel / "__init__.py").is_file(), f"tests/{rel.as_posix()} mirrors no package"
        assert list(folder.glob("test_*.py")) or any(folder.iterdir()), rel
    top = sorted(p.name for p in tests.glob("test_*.py"))
    assert all(name == "test_docs.py" or name.startswith("test_layout") for name in top), top


# The REST engine is handed a dialect object (ingest.rest.dialect); GitHub's modules (the
# dialect, its run hooks) are reached only through the callers that know the source
# (ingest.rest.dialects, tasks).
GITHUB_MODULES = {"ingest.rest.github", "ingest.rest.pulls"}
DIALECT_MODULES = {*GITHUB_MODULES, "ingest.rest.dialects"}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def engine_modules(graph: dict[str, set[str]]) -> list[str]:
    return sorted(m for m in graph if m.startswith("ingest.rest.") and m not in DIALECT_MODULES)


def test_the_rest_engine_never_imports_the_github_dialect() -> None:
    graph = import_graph(ROOT, SHIPPED)
    engine = engine_modules(graph)
    assert {"ingest.rest.run", "ingest.rest.engine", "ingest.rest.client"} <= set(engine)
    found = {m: bool(GITHUB_MODULES & reachable(graph, m)) for m in engine}
    assert [m for m, bad in found.items() if bad] == []


def test_the_engine_check_sees_an_import_through_another_module(tmp_path: Path) -> None:
    rest = tmp_path / "ingest" / "rest"
    rest.mkdir(parents=True)
    for name, text in {
        "__init__": "",
        "github": "",
        "run": "from ingest.rest import helper\n",
        "helper": "def f():\n    from ingest.rest.github import GITHUB\n",
        "client": "",
    }.items():
        (rest / f"{name}.py").write_text(text)
    (tmp_path / "ingest" / "__init__.py").write_text("")
    graph = import_graph(tmp_path, ("ingest",))
    bad = [m for m in engine_modules(graph) if "ingest.rest.github" in reachable(graph, m)]
    assert bad == ["ingest.rest.helper", "ingest.rest.run"]


# --- Homes per concern -------------------------------------------------------------------
# The S3 source's run modules live in ingest/s3, the reporting modules in ingest/report,
# and the library's top folder keeps only what every source shares: at most MAX_FLAT
# modules besides its __init__ (about a dozen: the shared modules and the catalog).
MAX_FLAT = 13
HOMES = {
    "s3": {"changes", "fetch", "keys", "renames", "scan", "schedule", "sync"},
    "report": {
        "chart",
        "console",
        "freshness",
        "history",
        "nightly",
        "nights",
        "status",
        "summary",
        "timing",
    },
}


def flat_modules(root: Path) -> list[str]:
    """The modules directly in ingest/, its ``__init__`` aside."""
    return sorted(p.stem for p in (root / "ingest").glob("*.py") if p.stem != "__init__")


def test_the_library_top_holds_at_most_a_dozen_modules() -> None:
    flat = flat_modules(ROOT)
    assert len(flat) <= MAX_FLAT, f"{len(flat)} modules directly in ingest/: {flat}"


@pytest.mark.parametrize("package", sorted(HOMES))
def test_each_concern_lives_in_its_package(package: str) -> None:
    home = ROOT / "ingest" / package
    assert (home / "__init__.py").is_file()
    missing = sorted(m for m in HOMES[package] if not (home / f"{m}.py").is_file())
    assert missing == [], f"not in ingest/{package}: {missing}"
    flat = set(flat_modules(ROOT))
    assert sorted(flat & HOMES[package]) == [], "a module of this concern sits in ingest/"


def test_the_homes_check_counts_the_top_folder(tmp_path: Path) -> None:
    (tmp_path / "ingest" / "s3").mkdir(parents=True)
    for name in ("__init__", *(f"m{i}" for i in range(MAX_FLAT + 1))):
        (tmp_path / "ingest" / f"{name}.py").write_text("")
    (tmp_path / "ingest" / "s3" / "sync.py").write_text("")
    assert len(flat_modules(tmp_path)) == MAX_FLAT + 1


# --- Each source owns its tables ---------------------------------------------------------
# Storage keeps the machinery (the spec, the catalog it is handed, lake, recovery, views)
# and only its own table; each source's tables are in its package; ingest.catalog, above
# both, gathers them. Storage imports no source, nor what gathers them.
SOURCES = ("s3", "extract", "rest", "report")
ABOVE_STORAGE = tuple(f"ingest.{p}" for p in (*SOURCES, "catalog", "context"))
STORAGES_OWN = {"schema_history"}  # written by storage's commit of a REST resource table


def test_storage_imports_no_source() -> None:
    found = [
        f"{path.relative_to(ROOT).as_posix()}:{line} imports {module}"
        for path in sorted((ROOT / "ingest" / "storage").rglob("*.py"))
        for line, module in imported_modules(ROOT, path)
        if module.startswith(ABOVE_STORAGE)
    ]
    assert found == []


def test_storage_holds_no_sources_table() -> None:
    """A table is named by the first argument of a ``TableSpec``: storage names only its
    own; every other table of the catalog comes from one source's ``tables`` module."""
    import importlib

    from ingest import catalog

    named = {
        node.args[0].value
        for path in (ROOT / "ingest" / "storage").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", "") == "TableSpec"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert named == STORAGES_OWN
    owned = [t.name for p in SOURCES for t in importlib.import_module(f"ingest.{p}.tables").TABLES]
    assert len(owned) == len(set(owned)), "a table defined by two sources"
    assert sorted([*owned, *STORAGES_OWN]) == sorted(t.name for t in catalog.TABLES)
