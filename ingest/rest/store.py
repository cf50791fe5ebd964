"""What the REST sources read from the lake before a run and stage for its commit.

Per run: every resource listing's rows go to the resource's table
(``<source>__<resource>``, one part per listing), its outcome to ``rest_syncs``
(the watermark, advanced only by a complete listing), the requests to
``api_requests`` and what each host allowed in flight to ``api_windows``. The
run commits them at its end in that order (``ingest.storage.commit``): rows
first, so a crash costs a re-fetch, never a watermark past rows not stored.

A ``dialect: github`` source keeps its own tables (``pull_requests``, the page
ETags in ``github_pages``, the watermarks in ``github_syncs``), one part per run
and repository, staged as each repository ends.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import pyarrow as pa

from ingest import duck, storage
from ingest.rest import typed
from ingest.rest.errors import SchemaContractError
from ingest.rest.records import ApiRequest, HostWindow, PageRecord, RepoResult, RepoState
from ingest.rest.source import Resource, SchemaContract
from ingest.rest.tables import PULL_REQUESTS, RESOURCE_SCHEMA
from ingest.storage import evolve, lake
from ingest.storage.location import DataDir, locate
from ingest.storage.tables import RESOURCE_SEPARATOR, SCHEMAS


@dataclass(slots=True)
class SourceState:
    """What earlier runs stored for one source."""

    watermarks: dict[tuple[str, str], str] = field(default_factory=dict)  # (resource, parent)
    listing_rows: dict[str, int] = field(default_factory=dict)  # rows per listing, by resource


def part_name(resource: str, parent_key: str) -> str:
    """One part per run and listing; a parent's key is hashed (it may be long or odd)."""
    if not parent_key:
        return resource
    return f"{resource}-{hashlib.sha1(parent_key.encode()).hexdigest()[:16]}"


def load_state(data_dir: DataDir, source: str, tables: dict[str, str]) -> SourceState:
    """Watermarks of the last complete listings, and stored rows per listing of the
    resources of ``tables`` (those whose page size follows it: each is a scan)."""
    state = SourceState()
    with duck.cursor(locate(data_dir).queries) as con:
        rows = con.execute(
            f"""
            SELECT resource, coalesce(parent_key, ''), arg_max(watermark, ended_at)
            FROM {storage.scan(data_dir, "rest_syncs")}
            WHERE source = ? AND complete AND watermark IS NOT NULL
            GROUP BY ALL
            """,
            [source],
        ).fetchall()
        for resource, parent, watermark in rows:
            state.watermarks[(resource, parent)] = watermark
        for resource, table in tables.items():
            if storage.open_table(data_dir, table) is None:
                continue
            n, parents = con.execute(
                f"SELECT count(*), count(DISTINCT parent_key) FROM {storage.scan(data_dir, table)}"
            ).fetchone() or (0, 0)
            state.listing_rows[resource] = int(n) // max(1, int(parents))
    return state


def stored_records(data_dir: DataDir, table: str) -> list[tuple[str, Any]]:
    """(key, record) of every stored row of a resource table (a child's parents)."""
    if storage.open_table(data_dir, table) is None:
        return []
    relation = storage.scan(data_dir, table)  # before connecting: see load_window
    with locate(data_dir).connect() as con:
        rows = con.execute(f"SELECT key, data FROM {relation}").fetchall()
    return [(key, json.loads(data)) for key, data in rows if data]


def unchanged_keys(data_dir: DataDir, table: str, fetched: dict[str, str]) -> set[str]:
    """The keys of ``fetched`` (key: the record as JSON) whose stored row holds the same
    record: an inclusive ``since`` hands back the listing's newest record again, and a
    listing without a watermark every record; those are not new rows."""
    if not fetched:
        return set()
    # a table not written yet scans as no rows; opened once, by the scan (each opening
    # of a table reads its log)
    relation = storage.scan(data_dir, table)  # before connecting: see load_window
    # a few keys (an incremental listing's) are a small query: the run's database
    small = len(fetched) <= 1_000
    loc = locate(data_dir)
    with duck.cursor(loc.queries) if small else loc.connect() as con:
        stored = con.execute(
            f"SELECT key, data FROM {relation} WHERE key IN (SELECT unnest(?))", [list(fetched)]
        ).fetchall()
    return {k for k, data in stored if data and json.loads(data) == json.loads(fetched[k])}


def load_window(data_dir: DataDir, host: str) -> tuple[int, int | None] | None:
    """(window, ceiling) a host allowed in the last run that talked to it."""
    # scan() first (a table not written yet scans as no rows): on object storage it
    # registers the table's relation, which only the connections made afterwards see (a
    # fresh process, a Dask worker, has none yet)
    relation = storage.scan(data_dir, "api_windows")
    with duck.cursor(locate(data_dir).queries) as con:
        row = con.execute(
            f"""SELECT window_size, ceiling FROM {relation}
                WHERE host = ? ORDER BY updated_at DESC LIMIT 1""",
            [host],
        ).fetchone()
    return (int(row[0]), int(row[1]) if row[1] is not None else None) if row else None


def write_listing(
    data_dir: DataDir,
    run_id: str,
    table: str,
    part: str,
    rows: Sequence[dict[str, Any]],
    sync: dict[str, Any],
    resource: Resource | None = None,
) -> None:
    """Stage one listing's rows, typed (``ingest.rest.typed``): a column the table has keeps
    its stored type; the resource's schema contract decides what a new column or another
    type does, its write disposition how the commit writes the rows."""
    if rows:
        contract = resource.contract if resource is not None else SchemaContract()
        records = [json.loads(r["data"]) for r in rows]
        stored = _types(data_dir, table)
        keep, drop = typed.enforce(table, records, stored, contract)
        rows = [r for r, k in zip(rows, keep, strict=True) if k]
        drop = [d for d, k in zip(drop, keep, strict=True) if k]
        records = [r for r, k in zip(records, keep, strict=True) if k]
        hard_delete = resource.hard_delete if resource is not None else None
        directives = {
            "disposition": resource.disposition if resource is not None else "merge",
            "merge_key": [typed.normalize(f) for f in resource.merge_fields] if resource else [],
            "hard_delete": typed.normalize(hard_delete) if hard_delete else None,
            "complete": bool(sync.get("complete")),
        }
        batch = typed.typed_table(rows, stored, records=records, drop=drop, directives=directives)
        storage.stage(data_dir, run_id, table, part, batch)
        if hard_delete:  # a deleted record's lists are not stored again
            pairs = [(r, x) for r, x in zip(rows, records, strict=True) if not x.get(hard_delete)]
            rows, records = [r for r, _ in pairs], [x for _, x in pairs]
        stage_children(data_dir, run_id, table, part, rows, records, contract, bool(stored))
    storage.stage(data_dir, run_id, "rest_syncs", f"{table}-{part}", [sync])


def stage_children(
    data_dir: DataDir,
    run_id: str,
    table: str,
    part: str,
    rows: Sequence[dict[str, Any]],
    records: Sequence[Any],
    contract: SchemaContract,
    parent_stored: bool,
) -> None:
    """Stage each nested list of ``records`` as a child table (``typed.child_tables``),
    typed against its stored columns; a parent's stored children are replaced by its
    current list when the parent is committed (see ``commit.replace_children``).
    ``rows``: the parents' ``key``, ``source``, ``run_id`` and ``fetched_at``;
    ``parent_stored``: the parent's table has columns already (a list new after it is a
    new table, which the contract's ``tables`` mode decides)."""
    for child, ch in typed.child_tables(table, rows, records).items():
        if not ch.rows:
            continue
        child_stored = _types(data_dir, child)
        if not child_stored and parent_stored and contract.tables != "evolve":
            if contract.tables == "freeze":
                raise SchemaContractError(
                    f"{child}: schema_contract freezes tables: the list {child!r} is new"
                )
            continue  # discard_row, discard_value: the new table is not made
        keep, drop = typed.enforce(child, ch.records, child_stored, contract)
        pick = [i for i, k in enumerate(keep) if k]
        batch = typed.typed_table(
            [ch.rows[i] for i in pick],
            child_stored,
            records=[ch.records[i] for i in pick],
            index=[ch.index[i] for i in pick],
            roots=[ch.roots[i] for i in pick],
            drop=[drop[i] for i in pick],
        )
        storage.stage(data_dir, run_id, child, part, batch)


def _types(data_dir: DataDir, table: str) -> dict[str, Any]:
    stored = lake.stored_schema(data_dir, table)
    return {f.name: f.type for f in evolve.plain_schema(stored)} if stored else {}


def source_tables(source: str) -> Callable[[str], bool]:
    """Whether a table is one of the declared source's (``shop__orders``...)."""
    return lambda table: table.startswith(f"{source}{RESOURCE_SEPARATOR}")


def is_pull_table(table: str) -> bool:
    """``pull_requests`` or one of its child tables (``pull_requests__labels``...)."""
    return table == "pull_requests" or table.startswith(f"pull_requests{RESOURCE_SEPARATOR}")


def staged_schema_changes(
    data_dir: DataDir, run_id: str, owns: Callable[[str], bool]
) -> list[dict[str, Any]]:
    """The column changes the run's staged rows bring to the tables ``owns`` says are the
    source's (``source_tables``, ``is_pull_table``): what their commit records in
    ``schema_history``, read from the staged parts' footers, for the run's summary before
    the commit."""
    out: list[dict[str, Any]] = []
    for table in storage.staging.staged_tables(data_dir, run_id):
        if not owns(table):
            continue
        parts = []
        for key in storage.staging.parts(data_dir, run_id, table):
            schema = storage.staging.part_schema(data_dir, key)  # the footer: no rows read
            if schema is not None:
                parts.append(schema.empty_table())
        if not parts:
            continue
        stored = lake.stored_schema(data_dir, table)
        rows = evolve.unify(parts, RESOURCE_SCHEMA)
        base = SCHEMAS[table]  # a resource's bookkeeping columns, or pull_requests' fixed ones
        _, changes = evolve.reconcile(rows, stored if stored is not None else base, base)
        out += [
            {"table": table, "column": c.column, "change": c.kind}
            | {"old_type": c.old_type, "new_type": c.new_type}
            for c in changes
        ]
    return out


def write_run(
    data_dir: DataDir,
    run_id: str,
    part: str,
    requests: Sequence[ApiRequest],
    window: HostWindow | None,
) -> None:
    if requests:
        storage.stage(data_dir, run_id, "api_requests", part, [r.as_row() for r in requests])
    if window is not None:
        storage.stage(data_dir, run_id, "api_windows", part, [window.as_row()])


# --------------------------------------------------------------------------- GitHub dialect


def repo_part(repo: str, state: str) -> str:
    """``octo/hello.world`` + ``all`` -> ``octo__hello.world-all`` (one part per run and repo)."""
    return f"{repo.replace('/', '__')}-{state}"


def load_repo_states(data_dir: DataDir, repos: Sequence[str], state: str) -> dict[str, RepoState]:
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
    with duck.cursor(locate(data_dir).queries) as con:
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


def write_pull_rows(data_dir: DataDir, run_id: str, result: RepoResult) -> None:
    """Stage one repository's ``pull_requests`` and their child tables (the first part of
    ``write_repo_result``; a sync stages them while it looks at page 1 again, the rest of
    its result after)."""
    if not result.pulls:
        return
    part = repo_part(result.repo, result.sync.state)
    storage.stage(data_dir, run_id, "pull_requests", part, pull_rows(data_dir, result))
    if len(result.records) == len(result.pulls):
        stored = bool(_types(data_dir, "pull_requests"))
        parents = [pull_parent(p) for p in result.pulls]
        stage_children(
            data_dir, run_id, "pull_requests", part, parents, result.records,
            SchemaContract(), stored,
        )  # fmt: skip


def write_repo_result(data_dir: DataDir, run_id: str, result: RepoResult) -> None:
    """Store one repository's outcome: ``pull_requests`` and its child tables first, then
    ``api_requests``, ``github_pages`` (the ETags) and last ``github_syncs`` (the
    watermark), so that a crash in between costs a re-fetch, never a page that answers 304
    while its items were never stored. The pull requests are staged already when
    ``result.rows_staged`` (``write_pull_rows``)."""
    part = repo_part(result.repo, result.sync.state)
    if not result.rows_staged:
        write_pull_rows(data_dir, run_id, result)
    rows = {
        "api_requests": [r.as_row() for r in result.requests],
        "github_pages": [p.as_row() for p in result.pages],
    }
    for table, table_rows in rows.items():
        if table_rows:  # an unchanged repository (all 304) writes no empty parts
            storage.stage(data_dir, run_id, table, part, table_rows)
    storage.stage(data_dir, run_id, "github_syncs", part, [result.sync.as_row()])


# The fields of a pull request its fixed columns hold already (user_login is user.login ...)
PULL_FIELDS = frozenset({*PULL_REQUESTS.names, "user__login", "head__ref", "base__ref"})
PULL_SOURCE = "github"  # the source its child rows and schema changes name


def pull_key(repo: str, number: int) -> str:
    """A pull request's ``key`` (``octo/demo#5``): its child rows' ``parent_key`` and
    ``_root_key``, as a REST record's key is its children's."""
    return f"{repo}#{number}"


def pull_parent(pr: Any) -> dict[str, Any]:
    """What a pull request's child rows take from it (``typed.child_tables``)."""
    return {
        "key": pull_key(pr.repo, pr.number),
        "source": PULL_SOURCE,
        "run_id": pr.run_id,
        "fetched_at": pr.fetched_at,
    }


def pull_rows(data_dir: DataDir, result: RepoResult) -> pa.Table:
    """``pull_requests``' fixed columns, its ``key`` (``pull_key``, what its child tables
    link to), then the typed columns of the rest of each pull request (flattened; a column
    the table has keeps its stored type, another type goes to a variant column), as a REST
    resource table's records are typed. Nested lists (``labels``, ``assignees``,
    ``requested_reviewers``) are child tables (``stage_children``); the fixed ``labels``
    column keeps the label names."""
    fixed = pa.Table.from_pylist([p.as_row() for p in result.pulls], schema=PULL_REQUESTS)
    keys = [pull_key(p.repo, p.number) for p in result.pulls]
    fixed = fixed.append_column(pa.field("key", pa.string()), pa.array(keys, pa.string()))
    if len(result.records) != len(result.pulls):
        return fixed  # rows built without their records: the fixed columns only
    drop = [set(PULL_FIELDS) for _ in result.records]
    for column, array in typed.typed_columns(
        result.records, _types(data_dir, "pull_requests"), drop
    ).items():
        if column not in PULL_FIELDS:
            fixed = fixed.append_column(pa.field(column, array.type), array)
    return fixed
