"""MkDocs hooks (``hooks:`` in mkdocs.yml): the benchmark pages join the site.

The measured figures live in ``benchmarks/*.md``, beside the scripts that write
them, and ``docs/`` links there (``../benchmarks/findings.md``) so the links work
when the repository is read as files. The site would not have those pages, so
these hooks add them under ``benchmarks/`` and rewrite every link between the two
folders to where the page sits in the site. Nothing is downloaded.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = "benchmarks"
LINK = re.compile(r"(\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")


def on_files(files: Files, config: Any) -> Files:
    """Add ``benchmarks/*.md`` to the site's files, as pages under ``benchmarks/``."""
    for path in sorted((ROOT / BENCHMARKS).glob("*.md")):
        files.append(
            File(
                f"{BENCHMARKS}/{path.name}",
                str(ROOT),
                config["site_dir"],
                config["use_directory_urls"],
            )
        )
    return files


def site_path(repository_path: str) -> str | None:
    """Where a file of the repository sits in the site, or None when it is not there."""
    if repository_path.startswith("docs/"):
        return repository_path.removeprefix("docs/")
    if repository_path.startswith(f"{BENCHMARKS}/"):
        return repository_path
    return None


def rewrite(markdown: str, src_uri: str) -> str:
    """The page's relative links, from where it sits in the repository to the site's."""
    in_repository = src_uri if src_uri.startswith(f"{BENCHMARKS}/") else f"docs/{src_uri}"
    here, site_here = posixpath.dirname(in_repository), posixpath.dirname(src_uri)

    def fix(match: re.Match[str]) -> str:
        target = match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:|#|/", target):
            return match.group(0)
        path, hash_, anchor = target.partition("#")
        found = site_path(posixpath.normpath(posixpath.join(here, path)))
        if found is None:
            return match.group(0)
        new = posixpath.relpath(found, site_here or ".") + hash_ + anchor
        return f"{match.group(1)}{new}{match.group(3)}"

    return LINK.sub(fix, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return rewrite(markdown, page.file.src_uri)
