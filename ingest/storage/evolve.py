"""Schema evolution of the REST resource tables: their typed columns follow the API.

A resource table has the fixed columns of ``ingest.rest.tables.RESOURCE_SCHEMA`` (the
record as JSON in ``data``) and the typed columns its records brought
(``ingest.rest.typed``). Rows committed to it are reconciled with what it holds
(``reconcile``):

* a column the table lacks is added (the rows stored before it read null);
* a column the table has and the rows lack (a field gone from the API) stays, null in
  the new rows;
* a column whose values now have another type is never altered and never fails the
  run: the values go to the variant column ``<column>__v_<type>`` (when they cannot be
  cast to the stored type without loss), and the record keeps them whole in ``data``.

Each change (a column added, a variant column made) is returned, to be recorded in the
``schema_history`` table.

The GitHub dialect's ``pull_requests`` evolves the same way: its fixed columns
(``ingest.rest.tables``) first, then the typed columns of the rest of each pull request; its
child tables (``pull_requests__labels`` ...) are resource tables like any other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.storage.tables import RESOURCE_SEPARATOR


@dataclass(frozen=True, slots=True)
class Change:
    """One column's change: ``added`` (old type None) or ``variant`` (of ``base``)."""

    column: str
    kind: str
    old_type: str | None
    new_type: str
    base: str = ""


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    return t


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """The schema with the string views delta-rs may report as plain strings."""
    return pa.schema([pa.field(f.name, _plain(f.type)) for f in schema])


_SIMPLE_TYPES = {
    pa.bool_(): "BOOLEAN",
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.uint8(): "UTINYINT",
    pa.uint16(): "USMALLINT",
    pa.uint32(): "UINTEGER",
    pa.uint64(): "UBIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.string(): "VARCHAR",
    pa.large_string(): "VARCHAR",
    pa.string_view(): "VARCHAR",
    pa.binary(): "BLOB",
    pa.large_binary(): "BLOB",
    pa.date32(): "DATE",
}
_TIMESTAMPS = {"s": "TIMESTAMP_S", "ms": "TIMESTAMP_MS", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}


def duck_type(t: pa.DataType) -> str | None:
    """The name DuckDB gives the Arrow type ``t`` when it reads it, or None where only
    DuckDB can say (structs, maps and rarer types)."""
    simple = _SIMPLE_TYPES.get(t)
    if simple is not None:
        return simple
    if pa.types.is_timestamp(t):
        return "TIMESTAMP WITH TIME ZONE" if t.tz else _TIMESTAMPS.get(t.unit)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = duck_type(t.value_type)
        return f"{item}[]" if item else None
    if pa.types.is_decimal128(t):
        return f"DECIMAL({t.precision},{t.scale})"
    return None


def type_label(t: pa.DataType) -> str:
    """The type as DuckDB names it (what a person sees in ``DESCRIBE``); a type only
    DuckDB could name (a struct, a map) is labelled by what it holds at the top:
    ``VARCHAR``, or ``VARCHAR[]`` for a list of them."""
    named = duck_type(t)
    if named is not None:
        return named
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"{type_label(t.value_type)}[]"
    return "VARCHAR"


# A type's short name, as a variant column's suffix says it (dlt's: ``__v_text``): the
# first kind the type is of, else text.
_SHORT_NAMES = (
    (pa.types.is_boolean, "bool"),
    (pa.types.is_integer, "bigint"),
    (pa.types.is_floating, "double"),
    (pa.types.is_decimal, "decimal"),
    (pa.types.is_timestamp, "timestamp"),
    (pa.types.is_date, "date"),
)


def type_name(t: pa.DataType) -> str:
    """A type's short name (``_SHORT_NAMES``), as a variant column's suffix says it."""
    return next((name for is_kind, name in _SHORT_NAMES if is_kind(t)), "text")


def variant(column: str, t: pa.DataType) -> str:
    """The variant column of ``column`` for values of type ``t``."""
    return f"{column}{RESOURCE_SEPARATOR}v_{type_name(t)}"


def _cast(values: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray | None:
    """``values`` as ``to`` without loss, or None."""
    if values.type.equals(to):
        return values
    frm = values.type
    lossless = (
        (pa.types.is_integer(frm) and (pa.types.is_floating(to) or pa.types.is_decimal(to)))
        or (pa.types.is_null(frm))
        or (pa.types.is_string(_plain(frm)) and pa.types.is_string(_plain(to)))
        or (pa.types.is_timestamp(frm) and pa.types.is_timestamp(to))
    )
    if not lossless:
        return None
    try:
        return pc.cast(values, to, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def reconcile(rows: pa.Table, schema: pa.Schema, base: pa.Schema) -> tuple[pa.Table, list[Change]]:
    """``rows`` with the table's ``schema``: its columns first (padded with nulls when the
    rows lack one), then the rows' new columns; values of another type than the stored one
    moved to variant columns. ``base``: the table's fixed columns (a resource table's, or
    ``pull_requests``')."""
    stored = {f.name: _plain(f.type) for f in plain_schema(schema)}
    for f in base:
        stored.setdefault(f.name, f.type)
    columns: dict[str, pa.ChunkedArray] = {}
    changes: list[Change] = []
    n = rows.num_rows
    for name in rows.column_names:
        values = rows.column(name)
        if pa.types.is_null(values.type) and name not in stored:
            continue  # no value yet: no column yet
        want = stored.get(name)
        if want is None:
            columns[name] = values
            continue
        cast = _cast(values, want)
        if cast is not None:
            columns[name] = cast
            continue
        target = variant(name, _plain(values.type))
        have = stored.get(target)
        moved = _cast(values, have) if have is not None else values
        if moved is None:
            target = variant(name, pa.string())
            moved = pc.cast(values, pa.string())
        columns[target] = moved
        if target not in stored:
            changes.append(
                Change(target, "variant", type_label(want), type_label(moved.type), base=name)
            )
    out: list[tuple[str, pa.ChunkedArray | pa.Array]] = []
    for name, t in stored.items():
        out.append((name, columns.pop(name) if name in columns else pa.nulls(n, t)))
    for name, values in columns.items():
        out.append((name, values))
        if any(c.column == name for c in changes):
            continue
        base = name.rpartition(f"{RESOURCE_SEPARATOR}v_")[0]
        if base in stored:  # made when the rows were typed against the stored columns
            changes.append(
                Change(name, "variant", type_label(stored[base]), type_label(values.type), base)
            )
        else:
            changes.append(Change(name, "added", None, type_label(values.type)))
    table = pa.Table.from_arrays([v for _, v in out], names=[k for k, _ in out])
    return table, changes


def directives(rows: pa.Table) -> dict[str, Any]:
    """How a resource table's rows are written, as the REST run staged them (schema
    metadata ``ingest``): ``disposition`` (append, replace, merge), ``merge_key``,
    ``hard_delete`` (a column), ``complete`` (every listing of the rows completed)."""
    meta = rows.schema.metadata or {}
    raw = meta.get(b"ingest")
    return dict(json.loads(raw)) if raw else {}


def unify(parts: list[pa.Table], base: pa.Schema) -> pa.Table:
    """Parts of one commit as one table: the first part's type of a column wins, later
    parts' other types go to variant columns (``reconcile``); the parts' directives kept
    (complete only when every part's listing was)."""
    schema = base
    done = []
    said = [directives(p) for p in parts]
    for part in parts:
        part, _ = reconcile(part, schema, base)
        schema = part.schema
        done.append(part)
    out = pa.concat_tables([reconcile(p, schema, base)[0] for p in done])
    merged = next((d for d in said if d), None)
    if merged is not None:
        merged["complete"] = all(d.get("complete", False) for d in said if d)
        out = out.replace_schema_metadata({"ingest": json.dumps(merged)})
    return out
