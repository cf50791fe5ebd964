"""Typed columns from a resource's records: what the people querying its table expect.

Every record stays whole, as JSON, in the table's ``data`` column; beside it each field
becomes a column of its own, typed from its values:

* ``true``/``false`` -> ``BOOLEAN``; integers -> ``BIGINT`` (beyond 64 bits,
  ``DECIMAL(38,0)``); numbers with a fraction -> ``DOUBLE`` (a field holding integers and
  fractions in one listing is ``DOUBLE``);
* strings in ISO 8601 with a time and a time zone (``2024-05-01T12:00:00Z``,
  ``...+02:00``) -> ``TIMESTAMP WITH TIME ZONE`` (UTC); ``YYYY-MM-DD`` -> ``DATE``;
  any other string -> ``VARCHAR``;
* a nested object is flattened: ``customer.address.city`` -> ``customer__address__city``;
* a list is a child table (``child_tables``): ``shop__orders__lines``, one row per
  element, linked to its parent row by ``parent_key`` and ``_index``;
* a field that is null in every record so far has no column yet: it gets one, typed,
  when its first value arrives.

A column's type is decided once, by the first listing that gives it a value, and kept
(``ingest.storage.evolve``); a later value of another type goes to a variant column
``<column>__v_<type>`` instead of failing or being lost.

Names follow dlt's: lower snake case (``createdAt`` -> ``created_at``), anything but
letters, digits and ``_`` replaced by ``_``; a field whose name is one of the table's own
columns (``key``, ``data``, ``source``, ...) gets a trailing ``_`` (``source_``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa

from ingest.rest.source import SchemaContract
from ingest.rest.tables import RESOURCE_SCHEMA
from ingest.storage.evolve import type_label, variant
from ingest.storage.tables import RESOURCE_SEPARATOR

SEP = RESOURCE_SEPARATOR  # customer__name, as dlt names it
TIMESTAMP = pa.timestamp("us", tz="UTC")
DECIMAL = pa.decimal128(38, 0)
RESERVED = frozenset(RESOURCE_SCHEMA.names)
_INT64 = (-(2**63), 2**63 - 1)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# a date, a time, a zone: 2024-05-01T12:00:00Z, 2024-05-01 12:00:00.123+02:00
_TS = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|z|[+-]\d{2}(:?\d{2})?)$"
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_OTHER = re.compile(r"[^a-z0-9_]+")
# JSON's scalars and lists: never a Mapping, told apart without the slower ABC check
_NOT_MAPPINGS = frozenset({str, int, float, bool, type(None), list})


def _is_mapping(value: Any) -> bool:
    kind = type(value)
    return kind is dict or (kind not in _NOT_MAPPINGS and isinstance(value, Mapping))


@functools.lru_cache(maxsize=8192)  # a listing repeats its few field names on every record
def normalize(name: str) -> str:
    """A field's name as a column's: ``createdAt`` -> ``created_at``, ``a-b c`` -> ``a_b_c``."""
    out = _OTHER.sub("_", _CAMEL.sub("_", name).lower()).rstrip("_") or "_"
    return f"_{out}" if out[0].isdigit() else out


def flatten(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The record's scalar fields by column name, nested objects flattened with ``__``;
    lists are left out (they are child tables)."""
    out: dict[str, Any] = {}
    for name, value in record.items():
        column = f"{prefix}{normalize(str(name))}"
        if _is_mapping(value):
            out.update(flatten(value, f"{column}{SEP}"))
        elif isinstance(value, list):
            continue
        else:
            if not prefix and column in RESERVED:
                column = f"{column}_"
            out[column] = value
    return out


def parse_timestamp(value: str) -> datetime | None:
    """An ISO 8601 timestamp with a time zone, in UTC; None for anything else."""
    if not _TS.match(value):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo is not None else None


def parse_date(value: str) -> date | None:
    if not _DATE.match(value):
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None


def type_of(value: Any) -> pa.DataType | None:
    """The column type one value asks for (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64() if _INT64[0] <= value <= _INT64[1] else DECIMAL
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, str):
        if parse_timestamp(value) is not None:
            return TIMESTAMP
        if parse_date(value) is not None:
            return pa.date32()
    return pa.string()


def convert(value: Any, to: pa.DataType) -> tuple[bool, Any]:
    """(fits, the value as ``to`` holds it): a value that does not fit the column's type
    goes to a variant column."""
    if value is None:
        return True, None
    if pa.types.is_boolean(to):
        return isinstance(value, bool), value
    if isinstance(value, bool):
        return False, value
    if pa.types.is_int64(to):
        return isinstance(value, int) and _INT64[0] <= value <= _INT64[1], value
    if pa.types.is_floating(to):
        number = isinstance(value, int | float)
        return number, float(value) if number else value
    if pa.types.is_decimal(to):
        return isinstance(value, int) and abs(value) < 10**38, value
    if pa.types.is_timestamp(to) or pa.types.is_date32(to):
        parse = parse_timestamp if pa.types.is_timestamp(to) else parse_date
        parsed = parse(value) if isinstance(value, str) else None
        return parsed is not None, parsed
    text = pa.types.is_string(to) or pa.types.is_large_string(to) or pa.types.is_string_view(to)
    return text and isinstance(value, str), value


def _first_types(flat: Sequence[Mapping[str, Any]]) -> dict[str, pa.DataType]:
    """Each column's type from the values of one listing: the first value's, widened from
    integers to DOUBLE when fractions come too."""
    types: dict[str, pa.DataType] = {}
    for row in flat:
        for column, value in row.items():
            t = type_of(value)
            if t is None:
                continue
            have = types.get(column)
            if have is None or (pa.types.is_int64(have) and pa.types.is_float64(t)):
                types[column] = t
    return types


def typed_columns(
    records: Iterable[Mapping[str, Any]],
    stored: Mapping[str, pa.DataType] | None = None,
    drop: Sequence[set[str]] | None = None,
) -> dict[str, pa.Array]:
    """The typed columns of ``records`` (one value per record, in order): a column the
    table has keeps its stored type, a new one takes the type its values ask for, and a
    value that fits neither goes to the variant column of its own type. ``drop``: per
    record, the columns whose values are not stored (``discard_value``)."""
    stored = stored or {}
    flat = [flatten(r) for r in records]
    if drop is not None:
        flat = [{c: v for c, v in f.items() if c not in d} for f, d in zip(flat, drop, strict=True)]
    wanted = _first_types(flat)
    types = {c: stored.get(c, t) for c, t in wanted.items()}
    values: dict[str, list[Any]] = {c: [None] * len(flat) for c in types}
    for i, row in enumerate(flat):
        for column, value in row.items():
            to = types.get(column)
            if to is None or value is None:
                continue
            fits, converted = convert(value, to)
            if fits:
                values[column][i] = converted
                continue
            own = type_of(value) or pa.string()
            if pa.types.is_timestamp(own) or pa.types.is_date32(own):
                own = pa.string()  # a string that looks like a timestamp is still a string
            name = variant(column, own)
            types.setdefault(name, stored.get(name, own))
            slot = values.setdefault(name, [None] * len(flat))
            fits, converted = convert(value, types[name])
            slot[i] = converted if fits else json.dumps(value, default=str)
            if not fits:
                types[name] = pa.string()
    return {c: pa.array(values[c], types[c]) for c in values}


INDEX = "_index"  # a child row's position in its parent's list (no field is named so)
ROOT = "_root_key"  # a child row's top-level record's key: its rows are replaced together


def typed_table(
    rows: Sequence[Mapping[str, Any]],
    stored: Mapping[str, pa.DataType] | None = None,
    *,
    records: Sequence[Mapping[str, Any]] | None = None,
    index: Sequence[int] | None = None,
    roots: Sequence[str] | None = None,
    drop: Sequence[set[str]] | None = None,
    directives: Mapping[str, Any] | None = None,
) -> pa.Table:
    """Resource-table rows (``RESOURCE_SCHEMA``, the record as JSON in ``data``) with the
    record's typed columns beside them (``records``: the records, when not ``data``'s;
    ``index``: a child table's positions)."""
    base = pa.Table.from_pylist([dict(r) for r in rows], schema=RESOURCE_SCHEMA)
    if records is None:
        records = [json.loads(r["data"]) if r.get("data") else {} for r in rows]
    if index is not None:
        base = base.append_column(pa.field(INDEX, pa.int64()), pa.array(index, pa.int64()))
    if roots is not None:
        base = base.append_column(pa.field(ROOT, pa.string()), pa.array(roots, pa.string()))
    for column, array in typed_columns(records, stored, drop).items():
        base = base.append_column(pa.field(column, array.type), array)
    if directives:  # how the commit writes the rows (see ingest.storage.evolve.directives)
        base = base.replace_schema_metadata({"ingest": json.dumps(dict(directives))})
    return base


def enforce(
    table: str,
    records: Sequence[Mapping[str, Any]],
    stored: Mapping[str, pa.DataType],
    contract: SchemaContract,
) -> tuple[list[bool], list[set[str]]]:
    """(keep, drop) per record under ``contract``: whether the record is stored
    (``discard_row``) and which of its columns' values are not (``discard_value``).
    ``freeze`` raises ``SchemaContractError`` naming the table, the field and the record.
    A table that has no stored columns yet takes every column (its first run)."""
    from ingest.rest.errors import SchemaContractError

    keep = [True] * len(records)
    drop: list[set[str]] = [set() for _ in records]
    if not stored or contract == SchemaContract():
        return keep, drop
    for i, record in enumerate(records):
        for column, value in flatten(record).items():
            if value is None:
                continue
            if column not in stored:
                mode, what = contract.columns, "is a new column"
            elif not convert(value, stored[column])[0]:
                have = stored[column]
                mode, what = contract.data_type, f"has a value that is not {type_label(have)}"
            else:
                continue
            if mode == "freeze":
                raise SchemaContractError(
                    f"{table}: schema_contract freezes "
                    f"{'columns' if what.startswith('is') else 'data_type'}: field {column!r} "
                    f"{what} (record {i}: {json.dumps(value, default=str)[:80]})"
                )
            if mode == "discard_row":
                keep[i] = False
            elif mode == "discard_value":
                drop[i].add(column)
    return keep, drop


@dataclass(slots=True)
class Child:
    """The rows of one child table: a nested list's elements, each linked to its parent
    row's key (``parent_key``) with its position in the list (``_index``)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    records: list[Mapping[str, Any]] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    roots: list[str] = field(default_factory=list)


def child_tables(
    table: str, rows: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]]
) -> dict[str, Child]:
    """Child table name -> rows, for every nested list of the records (in nested objects
    too, and lists in the elements of lists: ``shop__orders__lines__discounts``).

    An element that is an object is typed like a record; a scalar element goes to the
    column ``value``. Lists of scalars are child tables too, not list columns: their
    elements are then typed, evolve and get variant columns like any field, and a
    person queries one shape of table."""
    out: dict[str, Child] = {}

    def walk(
        name: str, parent: Mapping[str, Any], row: Mapping[str, Any], prefix: str, root: str
    ) -> None:
        for fname, value in parent.items():
            column = f"{prefix}{normalize(str(fname))}"
            if _is_mapping(value):
                walk(name, value, row, f"{column}{SEP}", root)
            elif isinstance(value, list):
                child = f"{name}{SEP}{column}"
                into = out.setdefault(child, Child())
                for i, element in enumerate(value):
                    key = f"{row['key']}/{column}/{i}"
                    element_row = {
                        "key": key,
                        "parent_key": row["key"],
                        "source": row["source"],
                        "resource": child.partition(SEP)[2],
                        "cursor": None,
                        "data": json.dumps(element, separators=(",", ":"), default=str),
                        "run_id": row["run_id"],
                        "fetched_at": row["fetched_at"],
                    }
                    record = element if isinstance(element, Mapping) else {"value": element}
                    into.rows.append(element_row)
                    into.records.append(record)
                    into.index.append(i)
                    into.roots.append(root)
                    if isinstance(element, Mapping):
                        walk(child, element, element_row, "", root)

    for row, record in zip(rows, records, strict=True):
        walk(table, record, row, "", row["key"])
    return out
