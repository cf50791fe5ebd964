"""dlt ``rest_api`` files as dlt's documentation and templates write them, for the stand-in
API ``dev.servers.shapes``: what the tests (``tests/ingest/rest/test_dlt_forms.py``) run,
and what ``benchmarks/dlt_forms.py`` runs through dlt itself beside this engine.

``BASE`` in a text is the server's URL. Each form names the server behaviour it needs
and the server listings it stores (one table each, the listing's name); the server
counts their records itself (``/_dev/totals``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Form:
    name: str
    text: str
    listings: tuple[str, ...]
    file: str = "source.yaml"
    behaviour: dict[str, Any] = field(default_factory=dict)
    issue: bool = False  # one of the six forms the issue found short of rows


def pokemon(name: str, text: str, file: str) -> Form:
    """One of dlt's Pokemon files: three listings, served as pokeapi serves them (pages of
    up to 1,000), each one of the six forms the issue found short of rows."""
    listings = ("pokemon", "berry", "location")
    return Form(name, text, listings, file=file, behaviour={"max_page_size": 1000}, issue=True)


def one_listing(name: str, paginator: str) -> str:
    """The file of one listing at the path of its name, with its paginator."""
    return (
        "client: {base_url: BASE}\nresources:\n"
        f"  - name: {name}\n    endpoint: {{path: {name}, paginator: {paginator}}}\n"
    )


# The parent listing of the child forms, read for its ids and not stored itself.
PARENT = """\
client: {base_url: BASE}
resources:
  - name: numbered
    selected: false
    endpoint: {path: numbered, paginator: {type: page_number, total_path: total}}
"""

FORMS = (
    Form(
        "cursor without cursor_path",
        one_listing("cursored", "{type: cursor}"),
        ("cursored",),
        issue=True,
    ),
    Form(
        "page_number with total_path, no base_page",
        one_listing("numbered", "{type: page_number, total_path: total}"),
        ("numbered",),
        issue=True,
    ),
    Form(
        "page_number without a total, pages capped at 25",
        """\
client: {base_url: BASE}
resources:
  - name: numbered
    endpoint:
      path: numbered
      params: {per_page: 100}
      paginator: {type: page_number, total_path: null}
""",
        ("numbered",),
        behaviour={"totals": False},
        issue=True,
    ),
    pokemon(
        "the Pokemon template, no paginator",
        """\
client:
  base_url: BASE
  # If you leave out the paginator, it will be inferred from the API:
  # paginator: json_link
resource_defaults:
  endpoint:
    params:
      limit: 1000
resources:
  - pokemon
  - berry
  - location
""",
        "pokemon.yaml",
    ),
    pokemon(
        "dlt.yml's Pokemon",
        """\
sources:
  pokemon:
    type: rest_api
    client:
      base_url: BASE
    resources:
      - pokemon
      - berry
      - location
""",
        "dlt.yml",
    ),
    Form(
        "header_cursor with its default header",
        one_listing("header_cursored", "{type: header_cursor}"),
        ("header_cursored",),
        issue=True,
    ),
    Form(
        "header_link",
        """\
client: {base_url: BASE, paginator: header_link}
resources:
  - name: linked
    endpoint: {path: linked, params: {per_page: 10}}
""",
        ("linked",),
    ),
    Form(
        "offset with a limit",
        """\
client: {base_url: BASE}
resources:
  - name: offsets
    endpoint: {path: offsets, data_selector: data, paginator: {type: offset, limit: 10}}
""",
        ("offsets",),
    ),
    Form(
        "json_link named as a string",
        """\
client: {base_url: BASE, paginator: json_link}
resources:
  - name: pokemon
    endpoint:
      path: pokemon
      data_selector: results
      paginator: {type: json_link, next_url_path: $.next}
""",
        ("pokemon",),
    ),
    Form(
        "paginator auto and a path string",
        """\
client: {base_url: BASE, paginator: auto}
resources:
  - name: cursored
    endpoint: cursored
  - name: linked
    endpoint: linked
""",
        ("cursored", "linked"),
    ),
    Form(
        "page_number detected from total_pages",
        """\
client: {base_url: BASE}
resources: [numbered]
""",
        ("numbered",),
        behaviour={"total_key": "total_pages"},
    ),
    Form(
        "single object, one row",
        """\
name: shapes
client: {base_url: BASE}
resources:
  - record
""",
        ("record",),
    ),
    Form(
        "a child per parent record, one object each (resolve, include_from_parent)",
        PARENT
        + """\
  - name: things
    primary_key: id
    include_from_parent: [name]
    endpoint:
      path: "things/{id}"
      params:
        id: {type: resolve, resource: numbered, field: id}
""",
        ("things",),
    ),
    Form(
        "a child whose 404s are ignored (response_actions)",
        PARENT
        + """\
  - name: things
    primary_key: id
    endpoint:
      path: "things/{resources.numbered.id}"
      response_actions:
        - {status_code: 404, action: ignore}
""",
        ("things",),
        behaviour={"missing_every": 10},
    ),
    Form(
        "single_page declared",
        one_listing("record", "single_page"),
        ("record",),
    ),
)

# Where this engine departs from dlt on purpose (the tests say why, the comparison shows
# what dlt stores): an offset listing whose server caps pages below the limit (dlt adds the
# limit to the offset and skips rows); a single page detected where the body announces more
# records (dlt stores the page as the listing; here the listing is incomplete).
DEPARTURES = (
    Form(
        "offset without a total, pages capped below the limit",
        """\
client: {base_url: BASE}
resources:
  - name: offsets
    endpoint:
      path: offsets
      data_selector: $.data
      paginator: {type: offset, limit: 100, total_path: null}
""",
        ("offsets",),
    ),
    Form(
        "no paginator detected on a page that announces more",
        """\
client: {base_url: BASE}
resources: [offsets]
""",
        ("offsets",),
    ),
)

# Two nights of one file: a resource without a primary_key is appended (dlt's rule), one
# with a key and no write_disposition merged (a nightly rerun never duplicates rows).
NIGHTS = Form(
    "two nights: no primary_key (cursored), a key and no write_disposition (linked)",
    """\
client: {base_url: BASE}
resources:
  - name: cursored
    endpoint: {path: cursored, paginator: {type: cursor}}
  - name: linked
    primary_key: id
    endpoint: {path: linked, paginator: header_link}
""",
    ("cursored", "linked"),
)

# The server's behaviour before each form (what ``behaviour`` changes).
DEFAULTS: dict[str, Any] = {
    "max_page_size": 25,
    "default_page_size": 20,
    "base_page": 0,
    "totals": True,
    "total_key": "total",
    "linked_pages": None,
    "missing_every": None,
}
