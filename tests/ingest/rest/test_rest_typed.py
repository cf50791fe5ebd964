"""Typed resource tables: columns inferred from the records of a nested-JSON API (a real
HTTP server on loopback, ``tests.shop_server``), flattened, evolving from run to run, and
shown with their types by the DuckDB views, also in a copied data folder."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from cli.main import app
from dev.servers.shop import IssuesServer, ShopServer, order
from ingest import storage
from ingest.rest import typed
from ingest.rest.config import RestConfig
from ingest.rest.errors import AuthError, SchemaContractError, SourceError
from ingest.rest.run import fetch_source
from ingest.rest.source import Source, parse_source
from ingest.rest.summary import markdown, schema_line
from ingest.settings import Settings


def shop_source(shop: ShopServer, **orders: Any) -> Source:
    """The shop's source; ``orders``: keys of the orders resource (dlt's)."""
    spec = {
        "name": "shop",
        "client": {
            "base_url": shop.url,
            "paginator": {
                "type": "cursor",
                "cursor_path": "next_cursor",
                "cursor_param": "cursor",
                "page_size": 10,
                "page_size_param": "limit",
            },
        },
        "resource_defaults": {"primary_key": "id", "endpoint": {"data_selector": "data"}},
        "resources": [{"name": "orders", "endpoint": {"path": "orders"}, **orders}],
    }
    return parse_source(json.dumps(spec), "shop.yaml")


def run(shop: ShopServer, data_dir: Path, run_id: str, **orders: Any) -> None:
    source = shop_source(shop, **orders)
    summary = fetch_source(RestConfig.of(Settings(data_dir=data_dir)), source, run_id=run_id)
    assert summary.complete
    storage.commit_run(data_dir, run_id)


def types(data_dir: Path, table: str = "shop__orders") -> dict[str, str]:
    _, rows = storage.query(data_dir, f"DESCRIBE {table}")
    return {name: kind for name, kind, *_ in rows}


def test_columns_are_typed_from_the_records_and_the_record_is_kept(data_dir: Path) -> None:
    with ShopServer([order(n) for n in range(1, 31)]) as shop:
        run(shop, data_dir, "run-1")
    got = types(data_dir)
    # the fixed columns stay as they were
    assert list(got)[:8] == storage.SCHEMAS["shop__orders"].names
    assert {c: got[c] for c in got if c not in storage.SCHEMAS["shop__orders"].names} == {
        "id": "BIGINT",
        "created_at": "TIMESTAMP WITH TIME ZONE",  # createdAt, in snake case as dlt names it
        "ship_date": "DATE",
        "total": "DOUBLE",  # integers and fractions in one field
        "paid": "BOOLEAN",
        "note": "VARCHAR",  # null on the first page, typed from the values after
        "status": "VARCHAR",
        "customer__id": "BIGINT",
        "customer__name": "VARCHAR",
        "customer__address__city": "VARCHAR",
    }
    _, rows = storage.query(
        data_dir,
        "SELECT id, created_at, ship_date, total, paid, note, customer__name, data "
        "FROM shop__orders WHERE id IN (2, 15) ORDER BY id",
    )
    (two, fifteen) = rows
    assert two[:7] == (
        2,
        datetime(2025, 3, 3, 8, 2, tzinfo=UTC),  # 10:02+02:00 in UTC
        datetime(2025, 4, 3).date(),
        20.5,
        False,
        None,
        "Customer 2",
    )
    assert fifteen[3] == 150.0 and fifteen[4] is True and fifteen[5] == "note 15"
    assert json.loads(two[7])["lines"] == order(2)["lines"]  # what typing leaves, kept whole
    # ingest query (its read-only views over the tables' Arrow datasets) shows the same
    columns, typed_rows = storage.query_read_only(
        data_dir, "SELECT id, created_at, ship_date, total FROM shop__orders WHERE id = 2"
    )
    assert columns == ["id", "created_at", "ship_date", "total"]
    assert typed_rows == [(*two[:3], 20.5)]


def test_the_warehouse_file_sees_the_column_changes_of_each_run(data_dir: Path) -> None:
    """A run that adds columns records them in schema_history, which its commit does not
    report: the view of warehouse.duckdb follows all the same (as the run's end refreshes
    it, with the tables the commit reported)."""
    with ShopServer([order(n, note=None) for n in range(1, 11)]) as shop:
        for run_id, coupon in (("run-1", None), ("run-2", "SPRING")):
            if coupon:
                shop.orders = [order(n) for n in range(11, 21)]
                shop.orders[0]["coupon"] = coupon
            summary = fetch_source(
                RestConfig.of(Settings(data_dir=data_dir)), shop_source(shop), run_id=run_id
            )
            assert summary.complete
            report = storage.commit_run(data_dir, run_id)
            assert "schema_history" not in report.rows
            assert storage.refresh_warehouse(data_dir, tables=report.rows)
            _, (lake_rows,) = storage.query(data_dir, "SELECT count(*) FROM schema_history")
            with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
                assert con.execute("SELECT count(*) FROM schema_history").fetchone() == lake_rows
    added = storage.query(
        data_dir, "SELECT column_name FROM schema_history WHERE run_id = 'run-2' ORDER BY 1"
    )[1]
    assert ("coupon",) in added and lake_rows[0] > 0


def test_a_second_run_adds_columns_types_late_nulls_and_keeps_a_changed_type(
    data_dir: Path,
) -> None:
    with ShopServer([order(n, note=None) for n in range(1, 11)]) as shop:
        run(shop, data_dir, "run-1")
        assert "note" not in types(data_dir)  # no value yet, no column yet
        shop.orders = [order(n) for n in range(11, 21)]
        shop.orders[0]["total"] = "unknown"  # was a number
        shop.orders[1]["coupon"] = "SPRING"  # a new field
        for o in shop.orders:
            del o["status"]  # a field gone
        run(shop, data_dir, "run-2")
    got = types(data_dir)
    assert got["note"] == "VARCHAR" and got["coupon"] == "VARCHAR"
    assert got["total"] == "DOUBLE" and got["total__v_text"] == "VARCHAR"
    assert got["status"] == "VARCHAR"  # a disappeared field stays a column
    _, rows = storage.query(
        data_dir,
        "SELECT id, total, total__v_text, coupon, status, note FROM shop__orders "
        "WHERE id IN (1, 11, 12) ORDER BY id",
    )
    assert rows == [
        (1, 10.0, None, None, "open", None),  # older rows read null in the new columns
        (11, None, "unknown", None, None, None),  # the value kept, never lost
        (12, 120.5, None, "SPRING", None, None),
    ]
    _, history = storage.query(
        data_dir,
        "SELECT run_id, column_name, change, old_type, new_type, base_column "
        "FROM schema_history WHERE run_id = 'run-2' ORDER BY column_name",
    )
    assert history == [
        ("run-2", "coupon", "added", None, "VARCHAR", None),
        ("run-2", "note", "added", None, "VARCHAR", None),
        ("run-2", "total__v_text", "variant", "DOUBLE", "VARCHAR", "total"),
    ]


def test_a_copied_data_folder_reads_its_own_files_with_the_types(
    data_dir: Path, tmp_path: Path
) -> None:
    with ShopServer([order(n) for n in range(1, 21)]) as shop:
        run(shop, data_dir, "run-1")
    assert storage.refresh_warehouse(data_dir)
    copy = tmp_path / "copied"
    shutil.copytree(data_dir, copy)
    with duckdb.connect(str(copy / "warehouse.duckdb"), read_only=True) as con:
        sql = " ".join(s for (s,) in con.execute("SELECT sql FROM duckdb_views()").fetchall())
        described = {n: t for n, t, *_ in con.execute("DESCRIBE shop__orders").fetchall()}
    assert str(data_dir) not in sql and str(copy) not in sql  # no absolute path in a view
    assert described["created_at"] == "TIMESTAMP WITH TIME ZONE" and described["id"] == "BIGINT"
    shutil.rmtree(data_dir)  # the original gone: the copy still reads its own files
    with duckdb.connect(str(copy / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*), sum(id) FROM shop__orders").fetchall() == [(20, 210)]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01 12:00:00.5-01:00", datetime(2024, 5, 1, 13, 0, 0, 500000, tzinfo=UTC)),
        ("2024-05-01T12:00:00", None),  # no time zone: text
        ("2024-13-01T12:00:00Z", None),  # no such month
        ("12:00", None),
    ],
)
def test_iso_timestamps_need_a_time_zone(value: str, expected: datetime | None) -> None:
    assert typed.parse_timestamp(value) == expected


def test_names_values_and_variants() -> None:
    assert typed.normalize("createdAt") == "created_at"
    assert typed.normalize("a-b c") == "a_b_c"
    assert typed.flatten({"key": 1, "a": {"b": {"cD": 2}}, "l": [1]}) == {"key_": 1, "a__b__c_d": 2}
    records: list[dict[str, Any]] = [{"n": 1}, {"n": 2**70}, {"n": "x"}, {"n": 2.5}]
    cols = typed.typed_columns(records, {"n": pa.int64()})
    assert cols["n"].to_pylist() == [1, None, None, None]
    assert cols["n__v_decimal"].to_pylist()[1] == 2**70
    assert cols["n__v_text"].to_pylist()[2] == "x"
    assert cols["n__v_double"].to_pylist()[3] == 2.5


def test_nested_lists_are_child_tables_replaced_with_their_parent(data_dir: Path) -> None:
    with ShopServer([order(n) for n in range(1, 13)]) as shop:
        run(shop, data_dir, "run-1")
        got = types(data_dir, "shop__orders__lines")
        assert {c: got[c] for c in ("_index", "_root_key", "sku", "qty", "price")} == {
            "_index": "BIGINT",
            "_root_key": "VARCHAR",
            "sku": "VARCHAR",
            "qty": "BIGINT",
            "price": "DOUBLE",
        }
        assert types(data_dir, "shop__orders__tags")["value"] == "VARCHAR"  # scalars
        _, rows = storage.query(
            data_dir,
            "SELECT o.id, l._index, l.sku, l.qty FROM shop__orders o "
            "JOIN shop__orders__lines l ON l.parent_key = o.key WHERE o.id = 2 ORDER BY 2",
        )
        assert rows == [(2, 0, "S2-0", 1), (2, 1, "S2-1", 2), (2, 2, "S2-2", 3)]
        # order 2 loses two lines and order 5 all of its tags; order 3 is not fetched again
        shop.orders = [order(2, lines=[{"sku": "NEW", "qty": 9, "price": 1}]), order(5, tags=[])]
        run(shop, data_dir, "run-2")
    _, rows = storage.query(
        data_dir,
        "SELECT parent_key, sku, qty FROM shop__orders__lines WHERE parent_key IN "
        "('2', '3') ORDER BY parent_key, _index",
    )
    assert rows == [("2", "NEW", 9), ("3", "S3-0", 1)]  # no stale line remains
    _, rows = storage.query(
        data_dir, "SELECT count(*) FROM shop__orders__tags WHERE parent_key = '5'"
    )
    assert rows == [(0,)]


def test_schema_changes_in_the_summary_and_by_ingest_schema(data_dir: Path) -> None:
    settings = Settings(data_dir=data_dir)
    with ShopServer([order(n) for n in range(1, 6)]) as shop:
        run(shop, data_dir, "run-1")
        shop.orders = [order(6, total="n/a", gift=True)]
        summary = fetch_source(RestConfig.of(settings), shop_source(shop), run_id="run-2")
    lines = {schema_line(c) for c in summary.schema_changes}
    assert lines == {
        "shop__orders.gift: added (BOOLEAN)",
        "shop__orders.total__v_text: variant (DOUBLE -> VARCHAR)",
    }
    assert "- `shop__orders.gift: added (BOOLEAN)`" in markdown(summary, "shop")
    storage.commit_run(data_dir, "run-2")
    result = CliRunner().invoke(
        app, ["schema", "shop", "orders", "--data-dir", str(data_dir), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    got = [
        (r["table_name"], r["column_name"], r["change"], r["run_id"])
        for r in json.loads(result.output)
    ]
    assert ("shop__orders__lines", "sku", "added", "run-1") in got  # its child tables too
    assert [g for g in got if g[3] == "run-2"] == [
        ("shop__orders", "gift", "added", "run-2"),
        ("shop__orders", "total__v_text", "variant", "run-2"),
    ]
    other = CliRunner().invoke(app, ["schema", "nosuch", "--data-dir", str(data_dir), "-f", "json"])
    assert other.exit_code == 0 and json.loads(other.output) == []


def count(data_dir: Path, sql: str) -> list[tuple[Any, ...]]:
    return storage.query(data_dir, sql)[1]


def test_dlt_keys_are_accepted_and_a_wrong_one_is_refused_with_its_line() -> None:
    text = """
name: shop
client: {base_url: "http://127.0.0.1:9/"}
schema_contract: {columns: evolve}
resource_defaults:
  primary_key: id
  write_disposition: {disposition: merge, strategy: upsert}
  schema_contract: evolve
resources:
  - name: orders
    write_disposition: merge
    merge_key: day
    columns: {deleted: {hard_delete: true}}
    endpoint: {path: orders}
  - name: events
    write_disposition: append
    schema_contract: {tables: freeze, columns: discard_value, data_type: discard_row}
    endpoint: {path: events}
"""
    source = parse_source(text, "dlt.yaml")
    orders, events = (source.resolved(r) for r in source.resources)
    assert (orders.disposition, orders.merge_fields, orders.hard_delete) == (
        "merge",
        ["day"],
        "deleted",
    )
    assert events.disposition == "append" and events.contract.data_type == "discard_row"
    bad = text.replace("data_type: discard_row", "data_type: discard_it")
    with pytest.raises(SourceError, match=r"dlt.yaml:17: resources.1.schema_contract"):
        parse_source(bad, "dlt.yaml")


def test_append_replace_merge_key_and_hard_delete(data_dir: Path, tmp_path: Path) -> None:
    with ShopServer([order(n) for n in range(1, 6)]) as shop:
        run(shop, data_dir, "a-1", write_disposition="append")
        run(shop, data_dir, "a-2", write_disposition="append")
        assert count(data_dir, "SELECT count(*), count(DISTINCT id) FROM shop__orders") == [(10, 5)]
        # replace: a complete listing's rows are the table, child rows too
        replaced = tmp_path / "replaced"
        run(shop, replaced, "r-1", write_disposition="replace")
        shop.orders = [order(n) for n in (2, 3)]
        run(shop, replaced, "r-2", write_disposition="replace")
        assert count(replaced, "SELECT id FROM shop__orders ORDER BY id") == [(2,), (3,)]
        assert count(replaced, "SELECT DISTINCT _root_key FROM shop__orders__lines ORDER BY 1") == [
            ("2",),
            ("3",),
        ]
        # hard_delete: the flagged order and its lines go
        deleted = tmp_path / "deleted"
        shop.orders = [order(n) for n in range(1, 6)]
        hint = {"columns": {"deleted": {"hard_delete": True}}}
        run(shop, deleted, "d-1", **hint)
        shop.orders = [order(3, deleted=True)]
        run(shop, deleted, "d-2", **hint)
        assert count(deleted, "SELECT id FROM shop__orders ORDER BY id") == [(1,), (2,), (4,), (5,)]
        assert count(deleted, "SELECT count(*) FROM shop__orders__lines WHERE _root_key = '3'") == [
            (0,)
        ]
        # merge_key: a day's orders replace the stored orders of that day
        keyed = tmp_path / "keyed"
        shop.orders = [order(n, day="mon" if n < 4 else "tue") for n in range(1, 7)]
        run(shop, keyed, "k-1", merge_key="day")
        shop.orders = [order(2, day="mon")]
        run(shop, keyed, "k-2", merge_key="day")
        assert count(keyed, "SELECT id, day FROM shop__orders ORDER BY id") == [
            (2, "mon"),
            (4, "tue"),
            (5, "tue"),
            (6, "tue"),
        ]


@pytest.mark.parametrize(
    ("contract", "stored"),
    [
        # a new field: the order bringing it is not stored, or stored without the value
        ({"columns": "discard_row"}, [(1, 10.0), (2, 20.5), (4, 40.5)]),
        ({"columns": "discard_value"}, [(1, 10.0), (2, 20.5), (3, 30.0), (4, 40.5)]),
        # a value of another type
        ({"data_type": "discard_row"}, [(1, 10.0), (2, 20.5), (4, 40.5)]),
        ({"data_type": "discard_value"}, [(1, 10.0), (2, 20.5), (3, None), (4, 40.5)]),
    ],
)
def test_schema_contract_discards(
    data_dir: Path, contract: dict[str, str], stored: list[tuple[Any, ...]]
) -> None:
    change = {"coupon": "X"} if "columns" in contract else {"total": "n/a"}
    with ShopServer([order(1), order(2)]) as shop:
        run(shop, data_dir, "run-1", schema_contract=contract)
        shop.orders = [order(3, **change), order(4)]
        run(shop, data_dir, "run-2", schema_contract=contract)
    got = types(data_dir)
    assert "coupon" not in got and "total__v_text" not in got
    assert count(data_dir, "SELECT id, total FROM shop__orders ORDER BY id") == stored
    if "discard_value" in contract.values():  # the value stays in the record
        name, value = next(iter(change.items()))
        got_value = count(data_dir, f"SELECT data->>'{name}' FROM shop__orders WHERE id = 3")
        assert got_value == [(value,)]


@pytest.mark.parametrize(
    ("contract", "change", "field"),
    [
        ({"columns": "freeze"}, {"coupon": "X"}, "coupon"),
        ({"data_type": "freeze"}, {"total": "n/a"}, "total"),
        ({"tables": "freeze"}, {"gifts": [{"sku": "G"}]}, "shop__orders__gifts"),
    ],
)
def test_a_frozen_contract_fails_the_run_naming_the_field(
    data_dir: Path, contract: dict[str, str], change: dict[str, Any], field: str
) -> None:
    with ShopServer([order(1)]) as shop:
        run(shop, data_dir, "run-1", schema_contract=contract)
        shop.orders = [order(2, **change)]
        with pytest.raises(SchemaContractError, match=field):
            fetch_source(
                RestConfig.of(Settings(data_dir=data_dir)),
                shop_source(shop, schema_contract=contract),
                run_id="run-2",
            )


DLT_STYLE = """
name: shop
client:
  base_url: {url}
  paginator:
    type: cursor
    cursor_path: "$.next_cursor"
    cursor_param: cursor
resource_defaults:
  primary_key: id
  write_disposition: merge
  endpoint:
    data_selector: "$.data"
resources:
  - name: orders
    endpoint:
      path: orders
      params:
        limit: 10
        since: "{{incremental.start_value}}"
      incremental:
        cursor_path: "$.updated_at"
        initial_value: "2025-05-01T00:00:00Z"
  - name: notes
    include_from_parent: [status]
    endpoint:
      path: orders/{{resources.orders.id}}/notes
"""


def stamp(n: int) -> str:
    return f"2025-05-01T{n // 60:02d}:{n % 60:02d}:00Z"


def test_a_source_written_as_dlt_documents_it_runs_and_pages_to_the_end(data_dir: Path) -> None:
    with ShopServer([order(n, updated_at=stamp(n)) for n in range(1, 31)]) as shop:
        source = parse_source(DLT_STYLE.format(url=shop.url), "dlt.yaml")
        settings = Settings(data_dir=data_dir)
        first = fetch_source(RestConfig.of(settings), source, run_id="run-1")
        storage.commit_run(data_dir, "run-1")
        assert first.complete
        # the JSONPath cursor followed past the first page, the placeholder filled in
        assert count(data_dir, "SELECT count(*) FROM shop__orders") == [(30,)]
        firsts = [r for r in shop.requests if r.startswith("/orders?")]
        assert "since=2025-05-01T00%3A00%3A00Z" in firsts[0] and len(firsts) == 3
        assert not any("incremental" in r for r in shop.requests)
        notes = types(data_dir, "shop__notes")
        assert notes["_orders_status"] == "VARCHAR" and notes["text"] == "VARCHAR"
        shop.orders[4]["updated_at"] = stamp(100)
        shop.requests.clear()
        fetch_source(RestConfig.of(settings), source, run_id="run-2")
        storage.commit_run(data_dir, "run-2")
    since = [r for r in shop.requests if r.startswith("/orders?")]
    assert since == ["/orders?limit=10&since=2025-05-01T00%3A30%3A00Z"]  # the watermark


def test_unselected_parent_feeds_its_children_only(data_dir: Path) -> None:
    text = DLT_STYLE.replace("  - name: orders\n", "  - name: orders\n    selected: false\n")
    with ShopServer([order(n, updated_at=stamp(n)) for n in range(1, 4)]) as shop:
        source = parse_source(text.format(url=shop.url), "dlt.yaml")
        fetch_source(RestConfig.of(Settings(data_dir=data_dir)), source, run_id="run-1")
        storage.commit_run(data_dir, "run-1")
    assert storage.open_table(data_dir, "shop__orders") is None
    assert count(data_dir, "SELECT count(*) FROM shop__notes") == [(6,)]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('since: "{{incremental.start_value}}"', 'since: "{{incremental.last}}"', "placeholder"),
        ('data_selector: "$.data"', 'data_selector: "$.data[*].x"', "more than one field"),
        ("include_from_parent: [status]", "processing_steps: [keep]", "processing_steps"),
    ],
)
def test_what_is_not_understood_is_refused_when_the_file_loads(
    old: str, new: str, message: str
) -> None:
    text = DLT_STYLE.replace(old, new).format(url="http://127.0.0.1:9/")
    with pytest.raises(SourceError, match=rf"dlt.yaml:\d+: .*{re.escape(message)}"):
        parse_source(text, "dlt.yaml")


def test_oauth2_client_credentials(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "shop-client-secret-0123456789"  # fake
    monkeypatch.setenv("SHOP_CLIENT_SECRET", secret)
    auth = (
        "  auth:\n    type: oauth2_client_credentials\n    access_token_url: {url}oauth/token\n"
        "    client_id: shop-app\n    env: SHOP_CLIENT_SECRET\n"
        "    access_token_request_data: {{scope: orders}}\n"
    )
    text = DLT_STYLE.replace("  paginator:\n", auth + "  paginator:\n", 1)
    with ShopServer([order(n, updated_at=stamp(n)) for n in range(1, 4)]) as shop:
        shop.token = "access-token-0123456789abcdef"  # fake
        shop.client = {"client_id": "shop-app", "client_secret": secret, "scope": "orders"}
        summary = fetch_source(
            RestConfig.of(Settings(data_dir=data_dir)),
            parse_source(text.format(url=shop.url)),
            run_id="run-1",
        )
        assert summary.complete and summary.records == 3 + 6
        assert shop.requests[0] == "POST /oauth/token"
        shop.client["client_secret"] = "another"  # rejected: a clear error, no secret in it
        with pytest.raises(AuthError, match="token request answered 401") as caught:
            fetch_source(
                RestConfig.of(Settings(data_dir=data_dir)),
                parse_source(text.format(url=shop.url)),
                run_id="r2",
            )
        assert secret not in str(caught.value)


def test_response_actions_ignore_reads_a_status_as_an_empty_page(data_dir: Path) -> None:
    ignoring = DLT_STYLE.replace(
        "      path: orders/{{resources.orders.id}}/notes\n",
        "      path: orders/{{resources.orders.id}}/notes\n"
        "      response_actions:\n        - {{status_code: 404, action: ignore}}\n",
    )
    with ShopServer([order(n, updated_at=stamp(n)) for n in range(1, 4)]) as shop:
        shop.gone = {"2"}
        plain = fetch_source(
            RestConfig.of(Settings(data_dir=data_dir / "plain")),
            parse_source(DLT_STYLE.format(url=shop.url)),
            run_id="run-0",
        )
        assert not plain.complete  # without the action, the 404 is an error of the listing
        summary = fetch_source(
            RestConfig.of(Settings(data_dir=data_dir)),
            parse_source(ignoring.format(url=shop.url)),
            run_id="r1",
        )
        storage.commit_run(data_dir, "r1")
    assert summary.complete
    assert count(data_dir, "SELECT DISTINCT parent_key FROM shop__notes ORDER BY 1") == [
        ("1",),
        ("3",),
    ]


def test_compaction_keeps_the_evolved_columns(data_dir: Path) -> None:
    with ShopServer([order(n) for n in range(1, 6)]) as shop:
        run(shop, data_dir, "run-1")
        shop.orders = [order(6, coupon="X"), order(7, total="n/a")]
        run(shop, data_dir, "run-2")
    before = count(
        data_dir, "SELECT id, total, total__v_text, coupon FROM shop__orders ORDER BY id"
    )
    report = storage.maintain(
        data_dir, retention_days=0, compact_min_files=0, vacuum_retention_hours=0
    )
    assert "shop__orders" in report.compacted
    assert types(data_dir)["coupon"] == "VARCHAR"
    after = count(data_dir, "SELECT id, total, total__v_text, coupon FROM shop__orders ORDER BY id")
    assert after == before and after[-2:] == [(6, 60.5, None, "X"), (7, None, "n/a", None)]


# dlt's documented GitHub example (its rest_api documentation), as YAML, unchanged but for
# the credential (named here, never written) and the base_url (the local server)
DLT_GITHUB_EXAMPLE = """
name: github
client:
  base_url: {url}repos/dlt-hub/dlt/
  auth:
    type: bearer
    env: GITHUB_TOKEN
resource_defaults:
  primary_key: id
  write_disposition: merge
  endpoint:
    params:
      per_page: 100
resources:
  - name: issues
    endpoint:
      path: issues
      params:
        sort: updated
        direction: desc
        state: open
        since:
          type: incremental
          cursor_path: updated_at
          initial_value: "2024-01-25T11:21:28Z"
  - name: issue_comments
    endpoint:
      path: issues/{{issue_number}}/comments
      params:
        issue_number:
          type: resolve
          resource: issues
          field: number
    include_from_parent: [id]
"""


def test_dlt_documented_github_example_loads_unchanged(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "ExampleToken0123456789abcdefABCDEFGHij")  # fake
    with IssuesServer(issues=150) as api:
        source = parse_source(DLT_GITHUB_EXAMPLE.format(url=api.url), "github.yaml")
        summary = fetch_source(RestConfig.of(Settings(data_dir=data_dir)), source, run_id="run-1")
        storage.commit_run(data_dir, "run-1")
    assert summary.complete
    assert count(data_dir, "SELECT count(*), min(created_at) FROM github__issues") == [
        (150, datetime(2024, 2, 1, tzinfo=UTC))
    ]
    assert count(data_dir, "SELECT count(*) FROM github__issue_comments") == [(300,)]
    assert types(data_dir, "github__issue_comments")["_issues_id"] == "BIGINT"
    assert count(data_dir, "SELECT count(*) FROM github__issues__labels WHERE name = 'bug'") == [
        (75,)
    ]
    assert any("since=2024-01-25T11%3A21%3A28Z" in r for r in api.requests)


@pytest.fixture(autouse=True)
def _registered_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker registers the test's functions (ingest.rest.steps): a source file names
    only those and the project's own."""
    monkeypatch.setenv("INGEST_SOURCE_FUNCTIONS", '["tests.rest_steps:*"]')


STEPS = """    processing_steps:
      - filter: tests.rest_steps:paid_only
      - map: tests.rest_steps:with_band
"""


def test_processing_steps_filter_and_map_by_import_path(data_dir: Path) -> None:
    """dlt's ``processing_steps`` named ``module:function``: the filter keeps the paid
    orders, the map's record is what is stored (and what the children see); a record the
    filter drops still moves the watermark, as dlt's incremental comes before its steps."""
    text = DLT_STYLE.replace("  - name: orders\n", "  - name: orders\n" + STEPS)
    with ShopServer([order(n, updated_at=stamp(n)) for n in range(1, 14)]) as shop:
        source = parse_source(text.format(url=shop.url), "dlt.yaml")
        settings = Settings(data_dir=data_dir)
        assert fetch_source(RestConfig.of(settings), source, run_id="run-1").complete
        storage.commit_run(data_dir, "run-1")
        shop.requests.clear()
        fetch_source(RestConfig.of(settings), source, run_id="run-2")
    paid = [n for n in range(1, 14) if n % 3 == 0]
    rows = count(data_dir, "SELECT id, band FROM shop__orders ORDER BY id")
    assert rows == [(n, "big" if n * 10 >= 100 else "small") for n in paid]
    assert types(data_dir)["band"] == "VARCHAR"
    assert storage.open_table(data_dir, "shop__orders__lines") is None  # the map left them out
    parents = count(data_dir, "SELECT DISTINCT parent_key FROM shop__notes ORDER BY 1")
    assert sorted(int(p) for (p,) in parents) == paid
    since = [r for r in shop.requests if r.startswith("/orders?")]
    assert since == [f"/orders?limit=10&since={quote(stamp(13))}"]  # order 13 is not paid


def test_incremental_convert_by_import_path(data_dir: Path) -> None:
    text = DLT_STYLE.replace(
        '        since: "{{incremental.start_value}}"',
        '        since_epoch: "{{incremental.start_value}}"',
    ).replace(
        '        initial_value: "2025-05-01T00:00:00Z"',
        '        initial_value: "2025-05-01T00:00:00Z"\n        convert: tests.rest_steps:epoch',
    )
    with ShopServer([order(n, updated_at=stamp(n)) for n in range(1, 6)]) as shop:
        source = parse_source(text.format(url=shop.url), "dlt.yaml")
        settings = Settings(data_dir=data_dir)
        fetch_source(RestConfig.of(settings), source, run_id="run-1")
        storage.commit_run(data_dir, "run-1")
        fetch_source(RestConfig.of(settings), source, run_id="run-2")
    sent = [r for r in shop.requests if r.startswith("/orders?")]
    start = int(datetime(2025, 5, 1, tzinfo=UTC).timestamp())
    assert sent == [
        f"/orders?limit=10&since_epoch={start}",  # the initial value, converted
        f"/orders?limit=10&since_epoch={start + 5 * 60}",  # the watermark, converted
    ]


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("map: tests.rest_steps:nope", "module 'tests.rest_steps' has no 'nope'"),
        ("filter: no_such_pkg.steps:keep", "'no_such_pkg.steps:keep' is not a registered"),
        ("map: tests.rest_steps:NOT_A_FUNCTION", "'NOT_A_FUNCTION' is not a function"),
        ("map: keep open", "is neither a function the project ships"),
        ("{filter: tests.rest_steps:paid_only, map: tests.rest_steps:with_band}", "or {map"),
    ],
)
def test_a_step_that_cannot_be_imported_is_refused_with_its_line(step: str, message: str) -> None:
    text = DLT_STYLE.format(url="http://127.0.0.1:9/").replace(
        "  - name: orders\n", f"  - name: orders\n    processing_steps:\n      - {step}\n"
    )
    line = text.splitlines().index(f"      - {step}") + 1  # where the step is written
    with pytest.raises(SourceError, match=rf"dlt.yaml:{line}: .*processing_steps.0"):
        parse_source(text, "dlt.yaml")
    with pytest.raises(SourceError, match=re.escape(message)):
        parse_source(text, "dlt.yaml")
    convert = DLT_STYLE.replace(
        '        initial_value: "2025-05-01T00:00:00Z"',
        '        initial_value: "2025-05-01T00:00:00Z"\n        convert: tests.rest_steps:nope',
    )
    with pytest.raises(SourceError, match=r"dlt.yaml:\d+: .*incremental.convert: .*has no"):
        parse_source(convert.format(url="http://127.0.0.1:9/"), "dlt.yaml")


def test_a_step_that_raises_stops_its_listing_naming_the_step(data_dir: Path) -> None:
    text = DLT_STYLE.replace(
        "  - name: orders\n",
        "  - name: orders\n    processing_steps:\n      - map: tests.rest_steps:broken\n",
    )
    with ShopServer([order(n, updated_at=stamp(n)) for n in range(1, 4)]) as shop:
        source = parse_source(text.format(url=shop.url), "dlt.yaml")
        summary = fetch_source(RestConfig.of(Settings(data_dir=data_dir)), source, run_id="run-1")
        storage.commit_run(data_dir, "run-1")
    assert not summary.complete
    [error] = [e for name, e in summary.errors if name == "orders"]
    assert "processing_steps.0 (map tests.rest_steps:broken) raised KeyError" in error
    assert storage.open_table(data_dir, "shop__orders") is None
    _, syncs = storage.query(data_dir, "SELECT complete, watermark FROM rest_syncs")
    assert syncs == [(False, None)]  # nothing stored, no watermark
