"""What the GitHub source reads from the lake and stages for its commit.

Each repository's outcome is staged as it finishes; the run commits them at
its end in an order that keeps the incremental state safe
(``ingest.storage.commit``): ``pull_requests`` first, then ``api_requests``,
``github_pages`` (the ETags) and last ``github_syncs`` (the watermark). A
crash in between leaves items without their ETags or watermark, which costs a
re-fetch, never a page that answers 304 while its items were never stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

from ingest import duck, storage
from ingest.github.records import ApiRequest, PageRecord, RepoResult, RepoState
from ingest.storage.location import DataDir


def part_name(repo: str, state: str) -> str:
    """``octo/hello.world`` + ``all`` -> ``octo__hello.world-all`` (one part per run and repo)."""
    return f"{repo.replace('/', '__')}-{state}"


def load_states(data_dir: DataDir, repos: Sequence[str], state: str) -> dict[str, RepoState]:
    """Stored ETags, the watermark of the last complete sync, and how many pull
    requests each repository has, read straight from Parquet."""
    states = {r: RepoState() for r in repos}
    if not repos:
        return states
    repo_list = list(repos)
    # scanned before connecting: on object storage a scan registers the table's relation,
    # which only connections made afterwards see (a fresh process has none yet)
    pages_sql, syncs_sql, pulls_sql = (
        storage.scan(data_dir, t) for t in ("github_pages", "github_syncs", "pull_requests")
    )
    with duck.cursor() as con:
        pages = con.execute(
            f"""
            SELECT * FROM {pages_sql}
            WHERE list_contains(?, repo) AND state = ?
            """,
            [repo_list, state],
        )
        cols = [d[0] for d in pages.description or ()]
        for values in pages.fetchall():
            row = dict(zip(cols, values, strict=True))
            record = PageRecord(**{f.name: row[f.name] for f in fields(PageRecord)})
            states[record.repo].pages[record.url] = record
        syncs = con.execute(
            f"""
            SELECT repo, arg_max(per_page, ended_at), arg_max(complete, ended_at),
                   max(watermark) FILTER (WHERE complete)
            FROM {syncs_sql}
            WHERE list_contains(?, repo) AND state = ?
            GROUP BY repo
            """,
            [repo_list, state],
        ).fetchall()
        for repo, per_page, complete, watermark in syncs:
            st = states[repo]
            st.per_page, st.last_complete, st.watermark = per_page, bool(complete), watermark
        counts = con.execute(
            f"""
            SELECT repo, count(DISTINCT number) FROM {pulls_sql}
            WHERE list_contains(?, repo) GROUP BY repo
            """,
            [repo_list],
        ).fetchall()
        for repo, n in counts:
            states[repo].stored_items = int(n)
    return states


def write_result(data_dir: DataDir, run_id: str, result: RepoResult) -> None:
    """Store one repository's outcome (see the module doc for the order)."""
    part = part_name(result.repo, result.sync.state)
    rows = {
        "pull_requests": [p.as_row() for p in result.pulls],
        "api_requests": [r.as_row() for r in result.requests],
        "github_pages": [p.as_row() for p in result.pages],
    }
    for table, table_rows in rows.items():
        if table_rows:  # an unchanged repository (all 304) writes no empty parts
            storage.stage(data_dir, run_id, table, part, table_rows)
    storage.stage(data_dir, run_id, "github_syncs", part, [result.sync.as_row()])


def write_requests(
    data_dir: DataDir, run_id: str, part: str, requests: Sequence[ApiRequest]
) -> None:
    """Requests that belong to no repository (the ``/rate_limit`` probe)."""
    if requests:
        storage.stage(data_dir, run_id, "api_requests", part, [r.as_row() for r in requests])
