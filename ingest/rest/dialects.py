"""The dialect object of a source: what its file's ``client.dialect`` names, handed to
the engine by its callers (``ingest.rest.run.fetch_source``'s ``dialect``), so that the
engine never imports a dialect's module."""

from __future__ import annotations

from ingest.rest.dialect import PLAIN, Dialect
from ingest.rest.source import Source


def dialect_of(source: Source) -> Dialect:
    """``client.dialect: github``: GitHub's (``ingest.rest.github.GITHUB``); none: the
    plain dialect."""
    if source.client.dialect == "github":
        from ingest.rest.github import GITHUB

        return GITHUB
    return PLAIN
