"""The declarative source file: a REST API described, not coded.

The shape follows dlt's REST API source (``client``, ``resource_defaults``,
``resources`` with an ``endpoint`` each), so its users feel at home::

    name: tickets
    client:
      base_url: https://api.example.com/v1/
      auth: {type: api_key, name: X-API-Key, location: header, env: TICKETS_API_KEY}
      paginator: {type: cursor, cursor_path: next_cursor, cursor_param: cursor}
    resource_defaults:
      primary_key: id
      endpoint: {data_selector: data, params: {limit: 50}}
    resources:
      - name: projects
        endpoint: {path: projects}
      - name: tickets                       # a child: one listing per project
        endpoint:
          path: projects/{resources.projects.id}/tickets
          incremental: {cursor_path: updated_at, start_param: since}

Differences, on purpose:

* credentials are never written in the file: ``auth`` names a Prefect
  ``Secret`` block (``secret:``) or an environment variable (``env:``);
  a literal ``token``/``password``/``api_key`` is refused;
* ``client.concurrency`` is the most requests in flight, not a fixed number:
  the client finds what the host allows (``ingest.rest.window``);
* ``page_size: auto`` lets the page size follow the budget the API announces;
* dlt's Python callables (``processing_steps`` filter and map, ``incremental.convert``)
  name a function the project ships or one the worker's settings register
  (``ingest.rest.steps``), checked when the file loads;
* errors name the file and line (``load_source``), one line a problem, with what to
  write instead for a dlt form this engine does not take;
* a resource with a ``primary_key`` and no ``write_disposition`` is merged (dlt appends):
  a nightly rerun never adds a second row for a record.

Where a file says nothing, dlt's defaults apply (``PaginatorSpec``, ``Resource``): a
paginator or ``data_selector`` left out is detected from the first response, ``name``
defaults to the file's name, ``auth: {env: ...}`` without a type is bearer, an
``endpoint`` may be its path.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote

import yaml
from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from ingest.rest import steps
from ingest.rest.errors import SourceError
from ingest.rest.paging import dig
from ingest.rest.spec import (
    AUTH_TYPES,
    BearerAuth,
    Client,
    DeclaredPaginator,
    PaginatorSpec,
    Strict,
    json_path,
    refuse,
)

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
PLACEHOLDER = re.compile(r"\{resources\.([A-Za-z0-9_]+)\.([A-Za-z0-9_.]+)\}")


def fill_placeholders(text: str, parent: dict[str, Any] | None, *, quote_it: bool) -> str:
    """``text`` with each ``{resources.NAME.FIELD}`` replaced by the parent record's field
    (URL-quoted for a path); a field the parent lacks is a ``KeyError`` naming it."""

    def value(match: Any) -> str:
        found = dig(parent, match.group(2)) if parent is not None else None
        if found is None:
            raise KeyError(match.group(2))
        return quote(str(found), safe="") if quote_it else str(found)

    return PLACEHOLDER.sub(value, text)


INCREMENTAL = re.compile(r"^\{incremental\.(start_value|end_value)\}$")
_ANY_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _importable(path: str) -> str:
    """The function a source file names (``processing_steps``, ``incremental.convert``):
    one the project ships, by name, or an import path ``module:function`` the worker's
    settings register (``ingest.rest.steps``), checked at load: a wrong path is told with
    its line, before any request. A source file is data: it never chooses code to import."""
    steps.resolve(path)
    return path


FunctionPath = Annotated[str, AfterValidator(_importable)]


class Incremental(Strict):
    """The incremental cursor: a field of each record whose largest value is kept
    (the watermark) once a listing completes."""

    cursor_path: str = Field(description="Field of the record, e.g. updated_at ($.updated_at).")
    start_param: str | None = Field(
        None, description="Query parameter the watermark is sent as (e.g. since)."
    )
    initial_value: str | int | None = None
    end_value: str | int | None = Field(
        None,
        description="The cursor's end: records at or past it are not stored, and the "
        "listing advances no watermark (dlt's backfill of a range).",
    )
    end_param: str | None = Field(
        None, description="Query parameter the end value is sent as ({incremental.end_value})."
    )
    row_order: Literal["asc", "desc"] | None = Field(
        None,
        description="desc: the listing is sorted newest first, so paging stops at the "
        "first page older than the watermark (for APIs without a since parameter).",
    )
    convert: FunctionPath | None = Field(
        None,
        description="module:function turning the start and end values into what their "
        "parameters send (dlt's convert): called with the value, its result is sent.",
    )

    def sent(self, value: Any) -> Any:
        """A start or end value as its parameter sends it (``convert`` applied)."""
        return steps.resolve(self.convert)(value) if self.convert else value

    @field_validator("cursor_path")
    @classmethod
    def _cursor(cls, v: str) -> str:
        return json_path(v) or v


Disposition = Literal["append", "replace", "merge"]
ContractMode = Literal["evolve", "freeze", "discard_row", "discard_value"]


class WriteDisposition(Strict):
    """dlt's long form, ``{disposition: merge, strategy: upsert}``: both merge strategies
    dlt names for a primary key upsert the same way here."""

    disposition: Disposition
    strategy: Literal["delete-insert", "upsert"] | None = None


class SchemaContract(Strict):
    """dlt's schema contract, per entity: what a new table (a nested list's, once its
    parent's table exists), a new column, or a value of another type than its column's
    does: ``evolve`` (added; a variant column), ``freeze`` (the run fails, naming the
    field), ``discard_row`` (the record is not stored), ``discard_value`` (the value is
    not stored in its column; the record keeps it in ``data``)."""

    tables: ContractMode = "evolve"
    columns: ContractMode = "evolve"
    data_type: ContractMode = "evolve"


class ColumnHint(Strict):
    """dlt's column hints that apply here: ``hard_delete`` (a true value deletes the
    stored row, and its child rows, instead of storing it)."""

    hard_delete: bool = False


class ResponseAction(Strict):
    """dlt's ``response_actions`` entry this engine takes: ``{status_code: 404, action:
    ignore}``, an answer of that status read as an empty last page (a child whose parent
    has none, say). Matching on ``content`` and actions other than ``ignore`` are refused."""

    status_code: int = Field(ge=400, le=599)
    action: Literal["ignore"]


class ProcessingStep(Strict):
    """One of dlt's ``processing_steps``: ``{filter: module:function}`` keeps the records
    for which the function returns true, ``{map: module:function}`` stores what the
    function returns for each record (a mapping). Steps run in the order written, on
    each record as the API gave it (with its ``include_from_parent`` fields)."""

    filter: FunctionPath | None = None
    map: FunctionPath | None = None

    @model_validator(mode="after")
    def _one(self) -> ProcessingStep:
        if (self.filter is None) == (self.map is None):
            raise ValueError("a processing step is {filter: module:function} or {map: ...}")
        return self


class Endpoint(Strict):
    path: str | None = None
    params: dict[str, str | int | float | bool] = Field(default_factory=dict)
    data_selector: str | None = Field(
        None,
        description="Path of the records in a page (dots, or JSONPath: $.data); empty: the "
        "page itself.",
    )
    paginator: DeclaredPaginator = None
    incremental: Incremental | None = None
    response_actions: list[ResponseAction] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _refused(cls, data: Any) -> Any:
        if isinstance(data, dict):
            refuse(data, "endpoint")
            if data.get("method", "GET").upper() != "GET":
                raise ValueError(
                    f"method: {data['method']}: listings are read with GET here; leave "
                    "method out (or write GET)"
                )
            data = {k: v for k, v in data.items() if k != "method"}
        return data

    @model_validator(mode="before")
    @classmethod
    def _dlt_incremental(cls, data: Any) -> Any:
        """dlt's two ways of naming the parameter the cursor goes out as: a placeholder,
        ``params: {since: "{incremental.start_value}"}``, or an incremental param,
        ``params: {since: {type: incremental, cursor_path: updated_at}}``; any other
        ``{...}`` in a param but ``{resources.NAME.FIELD}`` is refused (it would be sent as
        it is written)."""
        if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
            return data
        data = dict(data)
        params = dict(data["params"])
        inc = dict(data.get("incremental") or {})
        for name, value in list(params.items()):
            if isinstance(value, dict) and value.get("type") == "resolve":
                # dlt's older form of a parent's field: {type: resolve, resource, field}
                extra = set(value) - {"type", "resource", "field"}
                if extra or not value.get("resource") or not value.get("field"):
                    raise ValueError(
                        f"params.{name}: a resolve param takes resource and field only"
                    )
                placeholder = f"{{resources.{value['resource']}.{value['field']}}}"
                params.pop(name)
                path = str(data.get("path") or "")
                if f"{{{name}}}" in path:
                    data["path"] = path.replace(f"{{{name}}}", placeholder)
                else:
                    params[name] = placeholder
            elif isinstance(value, dict) and value.get("type") == "incremental":
                params.pop(name)
                inc = {**{k: v for k, v in value.items() if k != "type"}, **inc}
                inc.setdefault("start_param", name)
            elif isinstance(value, str) and (found := INCREMENTAL.match(value)):
                params.pop(name)
                inc.setdefault(
                    "start_param" if found.group(1) == "start_value" else "end_param", name
                )
            elif isinstance(value, str):
                for inner in _ANY_PLACEHOLDER.findall(value):
                    if not inner.startswith("resources."):
                        raise ValueError(
                            f"params.{name}: placeholder {{{inner}}} is not understood "
                            "(use {resources.NAME.FIELD}, {incremental.start_value} or "
                            "{incremental.end_value})"
                        )
        data["params"] = params
        if inc:
            data["incremental"] = inc
        return data

    @field_validator("data_selector")
    @classmethod
    def _selector(cls, v: str | None) -> str | None:
        return json_path(v)


def _endpoint(value: Any) -> Any:
    """dlt's short form: an endpoint given as its path."""
    return {"path": value} if isinstance(value, str) else value


class ResourceDefaults(Strict):
    """What every resource takes unless it says otherwise (``resource_defaults``); a
    ``Resource`` is these and its own fields."""

    primary_key: str | list[str] | None = None
    write_disposition: Disposition | WriteDisposition | None = None
    merge_key: str | list[str] | None = None
    columns: dict[str, ColumnHint] = Field(default_factory=dict)
    schema_contract: ContractMode | SchemaContract | None = None
    endpoint: Endpoint = Field(default_factory=Endpoint)

    @field_validator("endpoint", mode="before")
    @classmethod
    def _endpoint(cls, v: Any) -> Any:
        return _endpoint(v)


class Resource(ResourceDefaults):
    name: str
    table_name: str | None = None
    selected: bool = Field(
        True, description="false: fetched only to feed its child resources, not stored."
    )
    include_from_parent: list[str] = Field(
        default_factory=list,
        description="Fields of the parent record copied into each record, as "
        "_<parent>_<field> (dlt's names).",
    )
    processing_steps: list[ProcessingStep] = Field(
        default_factory=list,
        description="filter and map steps, each a module:function (dlt's callables).",
    )
    max_pages: int = Field(
        10_000,  # ingest.rest.paging.MAX_PLANNED
        ge=1,
        description="Pages one listing fetches at most; a listing stopped there is incomplete.",
    )

    @model_validator(mode="before")
    @classmethod
    def _dlt_forms(cls, data: Any) -> Any:
        """dlt's endpoint as a path string, and its path left out (the resource's name)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        endpoint = _endpoint(data.get("endpoint"))
        if endpoint is None:
            endpoint = {}
        if isinstance(endpoint, dict) and not endpoint.get("path") and data.get("name"):
            endpoint = {**endpoint, "path": data["name"]}
        data["endpoint"] = endpoint
        return data

    @property
    def disposition(self) -> str:
        """append, replace or merge as declared; left out: merge for a resource with a
        ``primary_key`` (a rerun replaces a key's row by its newest version, never adds a
        second), append for one without (dlt's default: every run's rows are kept)."""
        wd = self.write_disposition
        declared = wd.disposition if isinstance(wd, WriteDisposition) else wd
        return declared or ("merge" if self.key_fields else "append")

    @property
    def contract(self) -> SchemaContract:
        c = self.schema_contract
        if isinstance(c, str):
            return SchemaContract(tables=c, columns=c, data_type=c)
        return c or SchemaContract()

    @property
    def merge_fields(self) -> list[str]:
        mk = self.merge_key
        return [mk] if isinstance(mk, str) else list(mk or [])

    @property
    def hard_delete(self) -> str | None:
        return next((name for name, hint in self.columns.items() if hint.hard_delete), None)

    @field_validator("name", "table_name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not NAME.match(v):
            raise ValueError("use lower-case letters, digits and _ (a table name)")
        return v

    @property
    def key_fields(self) -> list[str]:
        """The primary key's fields (not ``keys``: ``dict(resource)``, as Prefect's walk
        over task parameters does, would call it)."""
        pk = self.primary_key
        return [pk] if isinstance(pk, str) else list(pk or [])

    @property
    def parent(self) -> tuple[str, str] | None:
        """(parent resource, field) named by a ``{resources.NAME.FIELD}`` placeholder."""
        texts = [self.endpoint.path or "", *(str(v) for v in self.endpoint.params.values())]
        for text in texts:
            found = PLACEHOLDER.search(text)
            if found:
                return found.group(1), found.group(2)
        return None


class Source(Strict):
    """A whole source file."""

    name: str = Field(
        "rest_api",
        description="Table prefix. Left out: the file's name (tickets.yaml: tickets), else "
        "dlt's default source name, rest_api.",
    )
    client: Client
    repos: list[str] = Field(
        default_factory=list,
        description="dialect github: the repositories (owner/name) whose pull requests to list.",
    )
    resource_defaults: ResourceDefaults = Field(default_factory=ResourceDefaults)
    schema_contract: ContractMode | SchemaContract | None = None
    resources: list[Resource] = Field(min_length=1)

    @field_validator("resources", mode="before")
    @classmethod
    def _named(cls, v: Any) -> Any:
        """dlt's shorthand: a resource given by its name alone is the endpoint of that path."""
        if isinstance(v, list):
            return [{"name": r, "endpoint": {"path": r}} if isinstance(r, str) else r for r in v]
        return v

    @field_validator("repos")
    @classmethod
    def _repos(cls, v: list[str]) -> list[str]:
        return [check_repo(r) for r in dict.fromkeys(v)]

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v) or "__" in v:
            raise ValueError("use lower-case letters, digits and single _ (a table prefix)")
        return v

    @model_validator(mode="after")
    def _check(self) -> Source:
        if self.client.dialect == "github":
            return self._check_github()
        if self.repos:
            raise ValueError("repos: only a source of client.dialect github lists repositories")
        seen: set[str] = set()
        for i, r in enumerate(self.resources):
            if r.name in seen:
                raise ValueError(f"resources.{i}: resource {r.name!r} is declared twice")
            parent = r.parent
            if parent is not None and parent[0] not in seen:
                raise ValueError(
                    f"resources.{i}: {r.name!r} refers to resource {parent[0]!r}, "
                    "which must be declared before it"
                )
            seen.add(r.name)
            if not self.resolved(r).endpoint.path:
                raise ValueError(f"resources.{i}: {r.name!r} has no endpoint.path")
        return self

    def _check_github(self) -> Source:
        """The GitHub dialect lists the pull requests of ``repos``: one resource."""
        if not self.repos:
            raise ValueError("repos: dialect github needs at least one repository (owner/name)")
        if len(self.resources) != 1 or self.resources[0].endpoint.path != GITHUB_PULLS:
            raise ValueError(
                f"resources: dialect github declares one resource, path {GITHUB_PULLS}"
            )
        state = self.resources[0].endpoint.params.get("state", "all")
        if state not in ("open", "closed", "all"):
            raise ValueError("resources.0: endpoint.params.state: use open, closed or all")
        auth = self.client.auth
        if auth is not None and not isinstance(auth, BearerAuth):
            raise ValueError("client.auth: dialect github takes a bearer token")
        spec = self.resolved(self.resources[0]).endpoint.paginator
        if spec is not None and spec.type != "header_link":
            raise ValueError("client.paginator: GitHub pages by its Link header (header_link)")
        if spec is not None and isinstance(spec.page_size, int) and spec.page_size > 100:
            raise ValueError("client.paginator.page_size: GitHub answers at most 100 per page")
        return self

    def resolved(self, r: Resource) -> Resource:
        """The resource with the defaults filled in (the resource's own values win)."""
        d = self.resource_defaults
        ep, dep = r.endpoint, d.endpoint
        path = ep.path or dep.path
        selector = ep.data_selector if ep.data_selector is not None else dep.data_selector
        paginator = ep.paginator or dep.paginator
        if path and single_entity_path(path):  # dlt: one object, one page
            selector = "" if selector is None else selector
            paginator = paginator or PaginatorSpec(type="single_page")
        endpoint = Endpoint(
            path=path,
            params={**dep.params, **ep.params},
            data_selector=selector,
            paginator=paginator or self.client.paginator,
            incremental=ep.incremental or dep.incremental,
            response_actions=ep.response_actions or dep.response_actions,
        )
        return r.model_copy(
            update={
                "primary_key": r.primary_key if r.primary_key is not None else d.primary_key,
                "write_disposition": r.write_disposition or d.write_disposition,
                "merge_key": r.merge_key if r.merge_key is not None else d.merge_key,
                "columns": {**d.columns, **r.columns},
                "schema_contract": r.schema_contract or d.schema_contract or self.schema_contract,
                "endpoint": endpoint,
            }
        )

    def table(self, r: Resource) -> str:
        if self.client.dialect == "github":
            return "pull_requests"  # the dialect's own table, whatever the source's name
        return f"{self.name}__{r.table_name or r.name}"


GITHUB_PULLS = "repos/{repo}/pulls"


def single_entity_path(path: str) -> bool:
    """dlt's guess that an endpoint answers one object: its path's last segment holds a
    placeholder (``users/{resources.users.id}``); its page is then the record, one page."""
    last = path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
    return re.search(r"\{[A-Za-z0-9.\-_]+\}", last) is not None


def check_repo(repo: str) -> str:
    if not REPO_NAME.match(repo):
        raise ValueError(f"repository must look like owner/name, got {repo!r}")
    return repo


# --------------------------------------------------------------------------- loading


class _LineLoader(yaml.SafeLoader):
    """A safe loader; the composed node tree keeps each value's line for error messages."""


# A checkout's root: ``sources/tickets.yaml`` is found from any working folder.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def source_path(source: str) -> Path:
    """The source file as given, else relative to the project (``sources/tickets.yaml``)."""
    path = Path(source)
    if not path.exists() and (PROJECT_ROOT / source).exists():
        path = PROJECT_ROOT / source
    return path


def load_source(path: str | Path) -> Source:
    """Read and validate a source file (YAML; JSON is YAML too).

    Raises ``SourceError`` naming the file, the line and the field for every problem.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(f"{path}: cannot read the source file ({exc.strerror})") from exc
    return parse_source(text, str(path))


def parse_source(text: str, name: str = "<source>") -> Source:
    """A source file's text as a ``Source``; ``name`` is the file's (its messages name it,
    and its stem is the table prefix of a file that leaves ``name`` out).

    dlt's ``dlt.yml`` form, ``sources: {NAME: {type: rest_api, client: ..., resources: ...}}``,
    is read too: its one ``rest_api`` source, named by its key. One problem is told in one
    line, ``FILE:LINE: FIELD: what is wrong and what to write``; several, one line each."""
    try:
        node = yaml.compose(text, Loader=_LineLoader)
        data = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        raise SourceError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    except RecursionError:  # the YAML parser recurses per level: a 20,000-deep file
        raise SourceError(f"{name}: nested too deep to read (a source file is shallow)") from None
    if not isinstance(data, dict):
        raise SourceError(f"{name}:1: a source file is a mapping (name, client, resources)")
    prefix: list[Any] = []
    if "client" not in data and isinstance(data.get("sources"), dict):
        data, prefix = _dlt_yml(data["sources"], name, node)
    if "name" not in data:
        data = {"name": default_name(name), **data}
    try:
        return Source.model_validate(data)
    except RecursionError:
        raise SourceError(f"{name}: nested too deep to read (a source file is shallow)") from None
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = [
                p
                for p in err["loc"]
                if not (isinstance(p, str) and (p[:1].isupper() or p in AUTH_TYPES))
            ]
            msg = err["msg"].removeprefix("Value error, ")
            if not loc and msg.startswith("resources."):  # a whole-source check naming its place
                head, _, msg = msg.partition(": ")
                loc = [int(p) if p.isdigit() else p for p in head.split(".")]
            if err["type"] == "extra_forbidden" and loc:
                msg += f": {NOT_TAKEN.get(str(loc[-1]), 'not a key of this section (a typo?)')}"
            line = _line_of(node, [*prefix, *loc])
            field = ".".join(str(p) for p in loc) or "(file)"
            lines.append(f"{name}:{line}: {field}: {msg}")
        if len(lines) == 1:
            raise SourceError(lines[0]) from exc
        raise SourceError("invalid source file:\n  " + "\n  ".join(lines)) from exc


# dlt keys this engine does not take (refused at load), and what to write instead
NOT_TAKEN = {
    "max_table_nesting": "nested lists become child tables at any depth here; leave it out",
    "parallelized": "listings run concurrently here already; leave it out",
    "table_format": "tables are Delta tables here; leave it out",
    "file_format": "tables are Delta tables here; leave it out",
    "session": "the HTTP client is this engine's own; leave it out",
    "yield_map": "write a map step (one record in, one out)",
    "lag": "leave it out: the watermark is the largest cursor of a complete listing",
    "last_value_func": "leave it out: the watermark is the largest cursor value",
    "on_cursor_value_missing": "leave it out: a record without its cursor is stored, "
    "and moves no watermark",
    "range_start": "leave it out: a record at the watermark is fetched again, stored once",
    "range_end": "leave it out: end_value is exclusive",
    "allow_external_schedulers": "leave it out",
    "content": "match on status_code only here",
}


def default_name(path: str) -> str:
    """A file's table prefix when it names none: its stem as a table name
    (``Pokemon-API.yaml``: ``pokemon_api``), else dlt's default source name, ``rest_api``."""
    stem = Path(path).stem if not path.startswith("<") else ""
    cleaned = re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]", "_", stem.lower())).strip("_")
    cleaned = cleaned.lstrip("0123456789_")
    return cleaned if cleaned and NAME.match(cleaned) else "rest_api"


def _dlt_yml(
    sources: dict[str, Any], name: str, node: yaml.Node | None
) -> tuple[dict[str, Any], list[Any]]:
    found = {
        k: v for k, v in sources.items() if isinstance(v, dict) and v.get("type") == "rest_api"
    }
    if len(found) != 1:
        line = _line_of(node, ["sources"])
        names = ", ".join(map(str, found)) or "none"
        raise SourceError(
            f"{name}:{line}: sources: a dlt.yml is read for one rest_api source, it holds "
            f"{len(found)} ({names}); write each in a file of its own"
        )
    key, body = next(iter(found.items()))
    data = {k: v for k, v in body.items() if k != "type"}
    data.setdefault("name", str(key))
    return data, ["sources", key]


def _line_of(node: yaml.Node | None, loc: list[Any]) -> int:
    """The 1-based line of the deepest node of ``loc`` that exists."""
    line = (node.start_mark.line + 1) if node is not None else 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    line, node = key.start_mark.line + 1, value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line
