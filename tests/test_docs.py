"""The documentation stays true to the repository.

* ``docs/reference/`` is what ``tools/gen_reference.py`` renders from the code now
  (``make docs-reference`` rewrites it);
* every relative link in the README, ``docs/`` and ``benchmarks/`` names a file that
  exists, and an anchor that one of its headings gives (GitHub's rule for slugs);
* the README stays a front page (at most 15,000 bytes);
* the fault table's page has the markers ``make chaos`` writes between.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import table
from tools import gen_reference

ROOT = Path(__file__).resolve().parent.parent
README_LIMIT = 15_000
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "benchmarks").glob("*.md")]
)

FENCE = re.compile(r"^ {0,3}(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$")


def prose_lines(text: str, code_spans: bool = False) -> list[str]:
    """The page's lines, those of fenced code blocks blanked, and inline code spans too
    unless ``code_spans`` (so the line numbers stay the page's)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            lines.append("")
        elif fenced:
            lines.append("")
        else:
            lines.append(line if code_spans else re.sub(r"(`+)(?:(?!\1).)+\1", "``", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed,
    each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"[`*]", "", text).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in ("L", "N", "M"))
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a page's headings give, duplicates numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path.read_text(encoding="utf-8"), code_spans=True):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(page: Path) -> list[str]:
    """``page:line: target (why)`` for each relative link that points nowhere."""
    broken = []
    text = page.read_text(encoding="utf-8")
    for number, line in enumerate(prose_lines(text), 1):
        for match in LINK.finditer(line):
            target = match.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("/"):
                continue  # a URL (checked by nobody here) or a site-absolute path
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            name = f"{page.relative_to(ROOT)}:{number}: {target}"
            if not where.exists():
                broken.append(f"{name} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                broken.append(f"{name} (no such heading in {where.relative_to(ROOT)})")
    return broken


def test_reference_pages_are_current() -> None:
    stale = [
        path.relative_to(ROOT).as_posix()
        for path, text in gen_reference.render_all().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert stale == [], f"out of date, run `make docs-reference`: {stale}"


def test_reference_covers_every_command_and_setting() -> None:
    import typer.main
    from pydantic import BaseModel

    from cli.main import app
    from ingest.settings import Settings

    cli = (ROOT / "docs/reference/cli.md").read_text(encoding="utf-8")
    group: Any = typer.main.get_command(app)
    ctx = group.context_class(group)
    for name in group.list_commands(ctx):
        # a hidden command only says where something went (ingest demo)
        assert (f"## `ingest {name}`" in cli) != group.get_command(ctx, name).hidden
    settings = (ROOT / "docs/reference/settings.md").read_text(encoding="utf-8")
    for name, field in Settings.model_fields.items():
        group = field.annotation
        names = (
            [f"{name}_{sub}" for sub in group.model_fields]  # a concern's group of settings
            if isinstance(group, type) and issubclass(group, BaseModel)
            else [name]
        )
        for variable in names:
            assert f"`INGEST_{variable.upper()}`" in settings


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_sees_what_is_broken(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B page\n\n## Two words\n\n## Two words\n")
    page = tmp_path / "docs" / "a.md"
    page.write_text(
        "# A\n\n[ok](b.md) [ok](b.md#two-words) [ok](b.md#two-words-1) [ok](#a)\n"
        "[gone](c.md) [no anchor](b.md#three) [web](https://example.com/x.md)\n"
        "`[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        "docs/a.md:4: c.md (no such file)",
        "docs/a.md:4: b.md#three (no such heading in docs/b.md)",
    ]


def test_slugs_follow_github() -> None:
    assert slug("Retries: one layer per failure kind") == "retries-one-layer-per-failure-kind"
    assert slug("`ingest serve`: one command on one machine") == (
        "ingest-serve-one-command-on-one-machine"
    )
    assert slug("The Prefect server's database") == "the-prefect-servers-database"
    assert slug("A / B") == "a--b"


def test_readme_stays_a_front_page() -> None:
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_LIMIT, f"README.md is {size} bytes; move detail into docs/"


def test_fault_table_page_has_its_markers(tmp_path: Path) -> None:
    """``make chaos`` writes between the markers of docs/reliability.md, nowhere else."""
    page = ROOT / table.PAGE
    text = page.read_text(encoding="utf-8")
    assert text.count(table.START) == 1 and text.count(table.END) == 1
    copy = tmp_path / "reliability.md"
    copy.write_text(text, encoding="utf-8")
    results = tmp_path / "results.json"
    trial = {"ended_as_expected": True, "lost": 0, "duplicates": 0, "partial": 0}
    results.write_text(
        json.dumps(
            {
                "seed": 1,
                "trials": [
                    {**trial, "fault": "kill -9", "recover_seconds": 2.0, "stage": "listing"},
                    {**trial, "fault": "kill -9", "recover_seconds": 4.0, "stage": "downloads"},
                ],
            }
        )
    )
    table.main([str(results), str(copy)])
    written = copy.read_text(encoding="utf-8")
    head, rest = written.split(table.START, 1)
    inside, tail = rest.split(table.END, 1)
    assert head == text.split(table.START, 1)[0] and tail == text.split(table.END, 1)[1]
    assert "| kill -9 | 2 | 2 | 0 | 0 | 0 | 4.0 s, 4.0 s |" in inside
    assert "- kill -9: listing 1, downloads 1" in inside
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    with pytest.raises(SystemExit):
        table.main([str(results), str(bare)])
    assert bare.read_text() == "no markers\n"


def test_site_links_between_docs_and_benchmarks() -> None:
    pytest.importorskip("mkdocs")
    from tools.mkdocs_hooks import rewrite

    assert rewrite("[a](../benchmarks/x.md#y)", "s3-ingestion.md") == "[a](benchmarks/x.md#y)"
    assert rewrite("[a](../../benchmarks/x.md)", "reference/cli.md") == "[a](../benchmarks/x.md)"
    assert rewrite("[a](../docs/scale-out.md)", "benchmarks/dask.md") == "[a](../scale-out.md)"
    assert rewrite("[a](lake.md) [b](#c) [d](https://e)", "benchmarks/README.md") == (
        "[a](lake.md) [b](#c) [d](https://e)"
    )
    assert rewrite("[a](concepts.md)", "index.md") == "[a](concepts.md)"


def test_every_page_is_in_the_site_nav() -> None:
    """``mkdocs build --strict`` refuses a page left out of the nav: every docs page and
    every benchmark page is named in mkdocs.yml."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    named = set(re.findall(r":\s*(\S+\.md)\s*$", nav, re.M))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    pages |= {f"benchmarks/{p.name}" for p in (ROOT / "benchmarks").glob("*.md")}
    assert pages - named == set()
