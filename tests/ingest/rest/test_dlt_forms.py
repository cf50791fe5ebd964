"""dlt's ``rest_api`` files as dlt means them (``dev.dlt_forms``), each against a stand-in
API on loopback (``dev.servers.shapes``, a real HTTP server) that counts its own records:
the stored rows are compared with the server's totals, never with a literal. A listing is
complete only where its paginator's own stop rule held; a form that is not taken is
refused, in one line naming its key, before any request.

dlt itself is no dependency of the project: ``benchmarks/dlt_forms.py`` runs the same
forms through dlt beside this engine and writes down what each stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from dev.dlt_forms import DEFAULTS, DEPARTURES, FORMS, NIGHTS, Form
from dev.servers.shapes import DevShapes
from ingest import storage
from ingest.rest.config import RestConfig
from ingest.rest.errors import SourceError
from ingest.rest.paging import detect_paginator, find_records_path
from ingest.rest.records import RestSummary
from ingest.rest.run import fetch_source
from ingest.rest.source import Source, load_source
from ingest.settings import Settings


@pytest.fixture(scope="module")
def api() -> Iterator[DevShapes]:
    with DevShapes() as server:
        yield server


@pytest.fixture
def shapes(api: DevShapes) -> Iterator[DevShapes]:
    """The module's server with its default behaviour and no request seen."""
    api.configure(**DEFAULTS)
    api.reset_stats()
    yield api


def write(tmp_path: Path, text: str, server: DevShapes, file: str = "source.yaml") -> Path:
    path = tmp_path / file
    path.write_text(text.replace("BASE", server.url + "/"), encoding="utf-8")
    return path


def run(data_dir: Path, source: Source, run_id: str = "r1") -> RestSummary:
    settings = Settings(data_dir=data_dir, rest={"retry_base": 0.01, "retry_cap": 0.05})
    summary = fetch_source(RestConfig.of(settings), source, run_id=run_id)
    storage.commit_run(data_dir, run_id)  # as the flow's commit-run task does
    return summary


def rows(data_dir: Path, table: str) -> int:
    _, found = storage.query(data_dir, f"SELECT count(*) FROM {table}")
    return int(found[0][0])


def queries(server: DevShapes, path: str) -> list[dict[str, list[str]]]:
    """The query of every request of ``path`` the server answered, in order."""
    seen = server.stats()["seen"]
    return [parse_qs(urlsplit(s).query) for s in seen if urlsplit(s).path == path]


# ------------------------------------------------------------------ dlt's detector, unit
# (each expectation is what dlt 1.31's own detector answers for the same response)

DETECTED = [
    ({"link": '<https://api.test/x?page=2>; rel="next"'}, [1, 2], "header_link", None),
    ({}, {"results": [1], "next": "https://api.test/x?offset=20"}, "json_link", "next"),
    ({}, {"data": [1], "links": {"next": {"href": "/x?page=2"}}}, "json_link", "links.next.href"),
    ({}, {"data": [1], "meta": {"totalPages": 4}}, "page_number", "meta.totalPages"),
    ({}, {"items": [1], "nextPageToken": "abc"}, "cursor", "nextPageToken"),
    ({}, {"items": [1], "next": None, "total": 9}, "single_page", None),
    ({}, {"id": 1, "name": "one"}, "single_page", None),
]


@pytest.mark.parametrize(("headers", "body", "kind", "path"), DETECTED)
def test_a_paginator_left_out_is_detected_as_dlts_detector_detects_it(
    headers: dict[str, str], body: Any, kind: str, path: str | None
) -> None:
    paginator, said = detect_paginator(headers, body, None)
    assert said.startswith(kind)
    found = {
        "json_link": getattr(paginator, "next_url_path", None),
        "page_number": getattr(paginator, "total_path", None),
        "cursor": getattr(paginator, "cursor_path", None),
    }.get(kind)
    assert found == path


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ([{"id": 1}], ""),  # a list: the page itself
        ({"id": 1, "name": "one"}, ""),  # no list: the object is the record
        ({"count": 2, "results": [{"id": 1}], "tags": ["a"]}, "results"),  # a records key
        ({"tags": ["a"], "page": {"rows": [1]}}, "page.rows"),  # a records key, deeper
        ({"things": [{"id": 1}], "other": [2]}, "things"),  # else the first list
        ({"a": {"b": {"c": {"data": [1]}}}, "x": [1]}, "x"),  # at most three keys deep
    ],
)
def test_a_data_selector_left_out_is_found_as_dlt_finds_it(body: Any, path: str) -> None:
    assert find_records_path(body) == path


# ------------------------------------------------------------------ the forms that run

ISSUE = [f for f in FORMS if f.issue]
DOCUMENTED = [f for f in FORMS if not f.issue]


def run_form(form: Form, server: DevShapes, data_dir: Path, tmp_path: Path) -> RestSummary:
    server.configure(**form.behaviour)
    source = load_source(write(tmp_path, form.text, server, form.file))
    summary = run(data_dir, source)
    totals = server.totals()
    assert summary.complete and not summary.stopped, summary.resources
    for listing in form.listings:
        assert rows(data_dir, f"{source.name}__{listing}") == totals[listing], listing
    return summary


@pytest.mark.parametrize("form", ISSUE, ids=[f.name for f in ISSUE])
def test_the_issues_six_forms_store_every_row(
    shapes: DevShapes, data_dir: Path, tmp_path: Path, form: Form
) -> None:
    run_form(form, shapes, data_dir, tmp_path)
    if form.name == "page_number without a total, pages capped at 25":
        # the declared size goes out as written on every page, though 25 come back
        asked = queries(shapes, "/numbered")
        assert asked and all(q["per_page"] == ["100"] for q in asked)
        assert [q["page"] for q in asked] == [[str(n)] for n in range(len(asked))]
    if form.file == "pokemon.yaml":  # the table prefix is the file's name
        assert storage.open_table(data_dir, "pokemon__pokemon") is not None
        assert queries(shapes, "/pokemon")[0] == {"limit": ["1000"]}


@pytest.mark.parametrize("form", DOCUMENTED, ids=[f.name for f in DOCUMENTED])
def test_each_documented_form_stores_every_row(
    shapes: DevShapes, data_dir: Path, tmp_path: Path, form: Form
) -> None:
    run_form(form, shapes, data_dir, tmp_path)
    if form.name == "a child per parent record, one object each (resolve, include_from_parent)":
        _, found = storage.query(data_dir, "SELECT data FROM source__things")
        records = [json.loads(d) for (d,) in found]
        assert all(r["_numbered_name"] == f"item-{r['id']}" for r in records)
        assert storage.open_table(data_dir, "source__numbered") is None  # selected: false
    if form.name == "page_number detected from total_pages":
        # dlt's detected page_number counts from 0: the first page is asked for without a
        # number, then pages 1, 2 ...
        pages = [q.get("page") for q in queries(shapes, "/numbered")]
        assert pages == [None, *([str(n)] for n in range(1, len(pages)))]


def test_an_offset_listing_whose_pages_are_capped_still_gives_every_row(
    shapes: DevShapes, data_dir: Path, tmp_path: Path
) -> None:
    """Where this engine departs from dlt on purpose: dlt adds ``limit`` to the offset, so
    a server that answers 25 of the 100 asked for has rows 25..99 skipped; here the next
    offset is the records received, and the listing ends at dlt's own stop rule, the
    empty page."""
    form = DEPARTURES[0]
    run_form(form, shapes, data_dir, tmp_path)
    asked = queries(shapes, "/offsets")
    assert {q["limit"][0] for q in asked} == {"100"}  # as declared, though 25 come back
    assert asked[-1]["offset"] == [str(shapes.totals()["offsets"])]  # the empty page


# ------------------------------------------------------------------ declared values


def test_declared_values_reach_the_server_as_written(
    shapes: DevShapes, data_dir: Path, tmp_path: Path
) -> None:
    shapes.configure(max_page_size=100)
    text = """\
client: {base_url: BASE}
resources:
  - name: linked
    endpoint: {path: linked, params: {per_page: 50, state: all}, paginator: header_link}
  - name: offsets
    endpoint: {path: offsets, data_selector: data, paginator: {type: offset, limit: 30}}
  - name: cursored
    endpoint:
      path: cursored
      params: {limit: 40}
      paginator: {type: cursor, cursor_path: cursors.next}
  - name: numbered
    endpoint:
      path: numbered
      params: {per_page: 35}
      paginator: {type: page_number, total_path: total, page_size_param: per_page}
"""
    summary = run(data_dir, load_source(write(tmp_path, text, shapes)))
    totals = shapes.totals()
    assert summary.complete, summary.resources
    assert {r["resource"]: r["records"] for r in summary.resources} == {
        name: totals[name] for name in ("linked", "offsets", "cursored", "numbered")
    }
    first = queries(shapes, "/linked")[0]
    assert first == {"per_page": ["50"], "state": ["all"]}
    assert {q["limit"][0] for q in queries(shapes, "/offsets")} == {"30"}
    assert {q["limit"][0] for q in queries(shapes, "/cursored")} == {"40"}
    assert {q["per_page"][0] for q in queries(shapes, "/numbered")} == {"35"}


def test_an_auth_with_a_token_and_no_type_is_bearer(
    shapes: DevShapes, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dlt's ``auth: {token: ...}``, with the token named instead of written."""
    monkeypatch.setenv("SHAPES_TOKEN", "shapes-token-0123456789")  # fake
    text = "client:\n  base_url: BASE\n  auth: {env: SHAPES_TOKEN}\nresources: [record]\n"
    summary = run(data_dir, load_source(write(tmp_path, text, shapes)))
    assert summary.complete and rows(data_dir, "source__record") == 1
    assert shapes.stats()["schemes"] == ["Bearer"]


# ------------------------------------------------------------------ dispositions


def test_without_a_primary_key_rows_are_appended_with_one_they_are_merged(
    shapes: DevShapes, data_dir: Path, tmp_path: Path
) -> None:
    source = load_source(write(tmp_path, NIGHTS.text, shapes))
    run(data_dir, source, "night1")
    run(data_dir, source, "night2")
    totals = shapes.totals()
    assert rows(data_dir, "source__cursored") == 2 * totals["cursored"]  # dlt's append
    assert rows(data_dir, "source__linked") == totals["linked"]  # upserted by key


# ------------------------------------------------------------------ completeness


def sync_rows(data_dir: Path) -> list[tuple[Any, ...]]:
    _, found = storage.query(
        data_dir, "SELECT resource, complete, stop_reason FROM rest_syncs ORDER BY resource"
    )
    return found


# A listing stopped by max_pages before its paginator's end.
MAX_PAGES_2 = """\
client: {base_url: BASE}
resources:
  - name: linked
    max_pages: 2
    endpoint: {path: linked, paginator: header_link}
"""


def test_a_listing_stopped_short_is_incomplete_and_says_why(
    shapes: DevShapes, data_dir: Path, tmp_path: Path
) -> None:
    text = MAX_PAGES_2 + (
        "  - name: numbered\n"
        "    endpoint: {path: numbered, paginator: {type: page_number, total_path: total}}\n"
    )
    shapes.configure(totals=False)
    summary = run(data_dir, load_source(write(tmp_path, text, shapes)))
    totals = shapes.totals()
    assert not summary.complete
    got = {r["resource"]: r for r in summary.resources}
    assert got["linked"]["records"] < totals["linked"] and not got["linked"]["complete"]
    stored = {name: (complete, why) for name, complete, why in sync_rows(data_dir)}
    assert stored["linked"][0] is False and "max_pages=2" in stored["linked"][1]
    # a declared total the pages do not carry: where the listing ends cannot be told
    assert stored["numbered"][0] is False
    assert "total of pages at total is missing" in stored["numbered"][1]
    assert summary.stopped and "max_pages=2" in summary.stopped


def test_a_server_that_stops_answering_pages_leaves_the_listing_incomplete(
    shapes: DevShapes, data_dir: Path, tmp_path: Path
) -> None:
    shapes.configure(linked_pages=2)  # 503 for page 3 on, through every retry
    text = "client: {base_url: BASE}\nresources: [linked]\n"
    summary = run(data_dir, load_source(write(tmp_path, text, shapes)))
    (r,) = summary.resources
    held = 2 * DEFAULTS["default_page_size"]  # the two pages answered
    assert not r["complete"] and r["records"] == held < shapes.totals()["linked"]
    assert r["failed_pages"] == 1 and "page failed" in (summary.stopped or "")
    ((_, complete, why),) = sync_rows(data_dir)
    assert complete is False and "503" in why


def test_a_detected_single_page_that_announces_more_is_incomplete(
    shapes: DevShapes, data_dir: Path, tmp_path: Path
) -> None:
    """The body holds 20 records and ``"total": 100``: dlt's detector finds no paginator
    and reads one page (dlt stores the 20 as the listing); here the listing is stored and
    reported incomplete."""
    summary = run(data_dir, load_source(write(tmp_path, DEPARTURES[1].text, shapes)))
    totals = shapes.totals()
    (r,) = summary.resources
    assert not r["complete"] and r["records"] < totals["offsets"]
    assert f"holds {r['records']} of the {totals['offsets']} records it announces" in r["note"]
    ((_, complete, why),) = sync_rows(data_dir)
    assert complete is False and "declare endpoint.paginator" in why


@pytest.mark.flow
def test_the_rest_command_exits_3_when_a_listing_is_incomplete(
    prefect_harness: None, shapes: DevShapes, data_dir: Path, tmp_path: Path
) -> None:
    path = write(tmp_path, MAX_PAGES_2, shapes)
    result = CliRunner().invoke(app(), ["rest", str(path), "--data-dir", str(data_dir)])
    assert result.exit_code == 3, result.output
    assert "stopped at max_pages=2" in result.output
    assert "incomplete: linked (exit 3)" in result.output
    assert rows(data_dir, "source__linked") < shapes.totals()["linked"]


# ------------------------------------------------------------------ refusals

REFUSED = {
    "literal bearer token": ("  auth: {token: abc123def}\n", "client.auth: 'token'"),
    "literal oauth2 client_secret": (
        "  auth: {type: oauth2_client_credentials, access_token_url: BASEtoken, "
        "client_id: me, client_secret: s3cr3t-value}\n",
        "client.auth: 'client_secret'",
    ),
    "literal basic password": (
        "  auth: {type: http_basic, username: me, password: pw-value}\n",
        "client.auth: 'password'",
    ),
    "auth named by its type alone": ("  auth: bearer\n", "client.auth: 'bearer'"),
    "a request body": ("ENDPOINT json: {q: 1}\n", "json: a request body"),
    "POST": ("ENDPOINT method: POST\n", "method: POST"),
    "a page number in the body": (
        "  paginator: {type: page_number, page_body_path: page}\n",
        "page_body_path: ",
    ),
    "a paginator without an end": (
        "  paginator: {type: page_number, total_path: null, stop_after_empty_page: false}\n",
        "stop_after_empty_page: false leaves the listing no end",
    ),
    "max_table_nesting": (
        "RESOURCE_KEY max_table_nesting: 1\n",
        "max_table_nesting: Extra inputs are not permitted: nested lists",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_form_not_taken_is_refused_in_one_line_before_any_request(
    shapes: DevShapes, data_dir: Path, tmp_path: Path, case: str
) -> None:
    add, named = REFUSED[case]
    client = "client:\n  base_url: BASE\n"
    resource = "resources:\n  - name: linked\n    endpoint:\n      path: linked\n"
    if add.startswith("RESOURCE_KEY "):  # a key of the resource
        resource += "    " + add.removeprefix("RESOURCE_KEY ")
    elif add.startswith("ENDPOINT "):  # a key of its endpoint
        resource += "      " + add.removeprefix("ENDPOINT ")
    else:
        client += add
    path = write(tmp_path, client + resource, shapes)
    with pytest.raises(SourceError) as info:
        load_source(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}:"), message
    assert named in message, message
    assert "s3cr3t-value" not in message and "pw-value" not in message
    # the command says the same and stops: exit 2, one line, nothing sent
    result = CliRunner().invoke(app(), ["rest", str(path), "--data-dir", str(data_dir)])
    assert result.exit_code == 2, result.output
    assert [ln for ln in result.output.splitlines() if ln.strip()] == [f"error: {message}"]
    assert shapes.stats()["requests"] == 0


def app() -> Any:
    from cli.main import app as command

    return command
