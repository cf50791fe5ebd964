"""The import direction of the project's packages, read from the source with ``ast``.

``ingest/`` is the library: it never imports the layers built on it (``flows``,
``tasks``, ``deployments``, ``cli``) nor the development tools (``dev``),
not even lazily inside a function. ``tasks/`` never imports ``flows``, ``cli`` or
``deployments``. Imports flow one way: cli -> flows -> tasks -> ingest.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

RULES = {
    "ingest": {"flows", "tasks", "deployments", "cli", "dev"},
    "tasks": {"flows", "cli", "deployments"},
}
DYNAMIC = {"import_module", "__import__"}  # importlib.import_module("flows.x"), __import__(...)


def imported_modules(root: Path, path: Path) -> Iterator[tuple[int, str]]:
    """``(line, dotted module name)`` of every import in ``path``, wherever it sits."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = list(path.relative_to(root).parts[:-1])  # the package a relative import starts from
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield node.lineno, module
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if name in DYNAMIC and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield node.lineno, arg.value


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
