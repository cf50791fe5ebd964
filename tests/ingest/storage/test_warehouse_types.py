"""The views' column types told by Arrow alone are the ones DuckDB gives, and the labels
a schema change shows a person are DuckDB's names too."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from ingest.catalog import TABLES
from ingest.storage.evolve import duck_type, type_label
from ingest.storage.tables import TableSpec
from ingest.storage.warehouse import _duck_types

MORE = [
    pa.int8(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.float32(),
    pa.large_string(),
    pa.string_view(),
    pa.binary(),
    pa.large_binary(),
    pa.date32(),
    pa.timestamp("s"),
    pa.timestamp("ms"),
    pa.timestamp("us"),
    pa.timestamp("ns"),
    pa.timestamp("ms", tz="Europe/Paris"),
    pa.list_(pa.list_(pa.int64())),
    pa.large_list(pa.bool_()),
    pa.decimal128(10, 2),
    pa.decimal128(38, 0),
]


def duckdb_names(schema: pa.Schema) -> list[str]:
    with duckdb.connect() as con:
        return [str(t) for t in con.from_arrow(schema.empty_table()).types]


@pytest.mark.parametrize("table", sorted(TABLES, key=lambda t: t.name), ids=lambda t: t.name)
def test_every_tables_types_are_named_as_duckdb_names_them(table: TableSpec) -> None:
    schema = table.columns
    assert [duck_type(f.type) for f in schema] == duckdb_names(schema)


def test_other_types_are_named_as_duckdb_names_them() -> None:
    schema = pa.schema([(f"c{i}", t) for i, t in enumerate(MORE)])
    assert [duck_type(f.type) for f in schema] == duckdb_names(schema)


def test_a_type_arrow_cannot_name_is_asked_of_duckdb() -> None:
    schema = pa.schema(
        [("id", pa.int64()), ("who", pa.struct([("first name", pa.string())])), ("m", pa.null())]
    )
    assert duck_type(schema.field("who").type) is None
    assert (
        _duck_types(schema)
        == duckdb_names(schema)
        == [
            "BIGINT",
            'STRUCT("first name" VARCHAR)',
            "INTEGER",
        ]
    )


def test_a_schema_changes_label_is_duckdbs_name_or_what_the_type_holds() -> None:
    named = pa.schema([(f"c{i}", t) for i, t in enumerate(MORE)])
    assert [type_label(f.type) for f in named] == duckdb_names(named)
    struct = pa.struct([("login", pa.string())])
    assert type_label(struct) == "VARCHAR"
    assert type_label(pa.list_(struct)) == "VARCHAR[]"
    assert type_label(pa.large_list(pa.list_(struct))) == "VARCHAR[][]"
