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
* errors name the file and line (``load_source``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ingest.rest import steps
from ingest.rest.errors import SourceError
from ingest.rest.paging import (
    BodyCursorPaginator,
    HeaderCursorPaginator,
    JsonLinkPaginator,
    LinkHeaderPaginator,
    OffsetPaginator,
    PageNumberPaginator,
    Paginator,
)

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
PLACEHOLDER = re.compile(r"\{resources\.([A-Za-z0-9_]+)\.([A-Za-z0-9_.]+)\}")


INCREMENTAL = re.compile(r"^\{incremental\.(start_value|end_value)\}$")
_ANY_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_JSON_NAME = re.compile(r"\[\s*'([^']*)'\s*\]|\[\s*\"([^\"]*)\"\s*\]")


def json_path(value: str | None) -> str | None:
    """dlt's JSONPath for one field (``$.data``, ``$.meta.next``, ``$['next']``) as the dotted
    path the engine digs (``data``, ``meta.next``); ``$`` is the page itself. A path that
    selects several values (``*``, ``..``, a filter, an index) is refused: the engine reads
    one field, and a path it cannot follow would page silently short."""
    if value is None:
        return None
    path = value.strip()
    if not path.startswith("$"):
        return path
    path = _JSON_NAME.sub(lambda m: "." + (m.group(1) or m.group(2) or ""), path[1:])
    if any(t in path for t in ("*", "..", "?", "[", "]", "@")):
        raise ValueError(
            f"JSONPath {value!r} selects more than one field; use a path to one field "
            "($.a.b), which is what this engine follows"
        )
    return path.lstrip(".")


def resolve_function(path: str) -> Callable[..., Any]:
    """The function a source file names (``processing_steps``, ``incremental.convert``):
    one the project ships, by name, or an import path ``module:function`` the worker's
    settings register (``ingest.rest.steps``); raises ``ValueError`` saying what is wrong.
    A source file is data: it never chooses code to import."""
    return steps.resolve(path)


def _importable(path: str) -> str:
    resolve_function(path)  # at load: a wrong path is told with its line, before any request
    return path


FunctionPath = Annotated[str, AfterValidator(_importable)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SecretRef(_Strict):
    """Where a credential comes from: a Prefect Secret block, else an environment variable."""

    secret: str | None = Field(None, description="Name of a Prefect Secret block.")
    env: str | None = Field(None, description="Name of an environment variable.")

    @model_validator(mode="before")
    @classmethod
    def _no_literals(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for literal in ("token", "password", "api_key", "key", "value"):
                if literal in data:
                    raise ValueError(
                        f"'{literal}' would put a credential in the file; name a Prefect Secret "
                        "block with 'secret:' or an environment variable with 'env:'"
                    )
        return data

    @model_validator(mode="after")
    def _one_source(self) -> SecretRef:
        if not self.secret and not self.env:
            raise ValueError("give 'secret:' (a Prefect Secret block) or 'env:' (a variable)")
        return self


class BearerAuth(SecretRef):
    type: Literal["bearer"]


class ApiKeyAuth(SecretRef):
    type: Literal["api_key"]
    name: str = Field("Authorization", description="Header or query parameter name.")
    location: Literal["header", "query"] = "header"


class BasicAuth(SecretRef):
    """HTTP basic: the user name is not a secret; the password comes from secret/env."""

    type: Literal["http_basic"]
    username: str


class OAuth2ClientCredentials(SecretRef):
    """OAuth 2 client credentials (dlt's ``oauth2_client_credentials``): the client
    secret (from secret/env) and the client id are posted to ``access_token_url`` once a
    run, and the access token it answers goes out as a bearer token."""

    type: Literal["oauth2_client_credentials"]
    access_token_url: str
    client_id: str
    access_token_request_data: dict[str, str] = Field(
        default_factory=dict, description="More form fields of the token request (scope=...)."
    )
    default_token_expiration: int = Field(3600, ge=1)


_AUTH_TYPES = ("bearer", "api_key", "http_basic", "oauth2_client_credentials")
Auth = Annotated[
    BearerAuth | ApiKeyAuth | BasicAuth | OAuth2ClientCredentials, Field(discriminator="type")
]


class PaginatorSpec(_Strict):
    """dlt's paginator types and options (those that apply to each type)."""

    type: Literal[
        "header_link",
        "page_number",
        "offset",
        "cursor",
        "header_cursor",
        "json_link",
        "single_page",
    ]
    # page_number
    page_param: str = "page"
    base_page: int = 1
    total_path: str | None = None  # page_number: total pages; offset: total items
    total_header: str | None = None  # the same in a response header
    # page_number and offset: the page size, and the parameter that carries it
    page_size: int | Literal["auto"] | None = None
    page_size_param: str | None = None
    # offset
    offset_param: str = "offset"
    limit_param: str = "limit"
    limit: int | None = None
    # cursor / header_cursor / json_link
    cursor_path: str = "next_cursor"
    cursor_param: str = "cursor"
    cursor_key: str = "x-next-cursor"
    next_url_path: str = "next"

    @field_validator("cursor_path", "next_url_path", "total_path")
    @classmethod
    def _paths(cls, v: str | None) -> str | None:
        return json_path(v)

    @field_validator("page_size", "limit")
    @classmethod
    def _positive(cls, v: Any) -> Any:
        if isinstance(v, int) and not 1 <= v <= 10_000:
            raise ValueError("must be between 1 and 10000")
        return v


class Incremental(_Strict):
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
        return resolve_function(self.convert)(value) if self.convert else value

    @field_validator("cursor_path")
    @classmethod
    def _cursor(cls, v: str) -> str:
        return json_path(v) or v


Disposition = Literal["append", "replace", "merge"]
ContractMode = Literal["evolve", "freeze", "discard_row", "discard_value"]


class WriteDisposition(_Strict):
    """dlt's long form, ``{disposition: merge, strategy: upsert}``: both merge strategies
    dlt names for a primary key upsert the same way here."""

    disposition: Disposition
    strategy: Literal["delete-insert", "upsert"] | None = None


class SchemaContract(_Strict):
    """dlt's schema contract, per entity: what a new table (a nested list's, once its
    parent's table exists), a new column, or a value of another type than its column's
    does: ``evolve`` (added; a variant column), ``freeze`` (the run fails, naming the
    field), ``discard_row`` (the record is not stored), ``discard_value`` (the value is
    not stored in its column; the record keeps it in ``data``)."""

    tables: ContractMode = "evolve"
    columns: ContractMode = "evolve"
    data_type: ContractMode = "evolve"


class ColumnHint(_Strict):
    """dlt's column hints that apply here: ``hard_delete`` (a true value deletes the
    stored row, and its child rows, instead of storing it)."""

    hard_delete: bool = False


class ResponseAction(_Strict):
    """dlt's ``response_actions`` entry this engine takes: ``{status_code: 404, action:
    ignore}``, an answer of that status read as an empty last page (a child whose parent
    has none, say). Matching on ``content`` and actions other than ``ignore`` are refused."""

    status_code: int = Field(ge=400, le=599)
    action: Literal["ignore"]


class ProcessingStep(_Strict):
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


class Endpoint(_Strict):
    path: str | None = None
    params: dict[str, str | int | float | bool] = Field(default_factory=dict)
    data_selector: str | None = Field(
        None,
        description="Path of the records in a page (dots, or JSONPath: $.data); empty: the "
        "page itself.",
    )
    paginator: PaginatorSpec | None = None
    incremental: Incremental | None = None
    response_actions: list[ResponseAction] = Field(default_factory=list)

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


class Resource(_Strict):
    name: str
    table_name: str | None = None
    primary_key: str | list[str] | None = None
    write_disposition: Disposition | WriteDisposition | None = None
    merge_key: str | list[str] | None = None
    columns: dict[str, ColumnHint] = Field(default_factory=dict)
    schema_contract: ContractMode | SchemaContract | None = None
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
    endpoint: Endpoint = Field(default_factory=Endpoint)
    max_pages: int = Field(
        10_000,  # ingest.rest.paging.MAX_PLANNED
        ge=1,
        description="Pages one listing fetches at most; a listing stopped there is incomplete.",
    )

    @property
    def disposition(self) -> str:
        """append, replace or merge (dlt's default for a resource with a key: merge here,
        as the rows of a key are replaced by their newest version)."""
        wd = self.write_disposition
        return (wd.disposition if isinstance(wd, WriteDisposition) else wd) or "merge"

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


class ResourceDefaults(_Strict):
    primary_key: str | list[str] | None = None
    write_disposition: Disposition | WriteDisposition | None = None
    merge_key: str | list[str] | None = None
    columns: dict[str, ColumnHint] = Field(default_factory=dict)
    schema_contract: ContractMode | SchemaContract | None = None
    endpoint: Endpoint = Field(default_factory=Endpoint)


class RateLimit(_Strict):
    reserve: int = Field(0, ge=0, description="Requests of an announced budget never spent.")
    max_wait: float = Field(
        900.0, ge=0, description="Longest wait for a spent budget to reset, in seconds."
    )
    backoff: float = Field(
        1.0, ge=0, description="First pause after a limit answer without Retry-After."
    )


class Client(_Strict):
    dialect: Literal["github"] | None = Field(
        None,
        description="github: what is GitHub's own (its headers, page ETags sent back as "
        "If-None-Match, the /rate_limit probe, budget-sized pages, the pull_requests table); "
        "see ingest.rest.github.",
    )
    base_url: str
    auth: Auth | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    paginator: PaginatorSpec | None = None
    concurrency: int = Field(32, ge=1, le=256, description="Most requests in flight.")
    rate_limit: RateLimit = Field(default_factory=RateLimit)

    @field_validator("headers")
    @classmethod
    def _no_secret_headers(cls, v: dict[str, str]) -> dict[str, str]:
        # Headers go to every host a listing reaches; a credential goes under auth, which
        # sends it to the API's own origin only. Refused by what the name says it carries
        # (X-Auth-Token, Private-Token, X-Session-Id, Proxy-Authorization ...).
        for name in v:
            if _CREDENTIAL_HEADER.search(name):
                raise ValueError(f"header {name!r} carries a credential; declare it under auth")
        return v


_CREDENTIAL_HEADER = re.compile(
    r"(?i)auth|token|secret|passw|api[-_]?key|cookie|session|signature|credential|^key$"
)


class Source(_Strict):
    """A whole source file."""

    name: str
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
        endpoint = Endpoint(
            path=ep.path or dep.path,
            params={**dep.params, **ep.params},
            data_selector=ep.data_selector if ep.data_selector is not None else dep.data_selector,
            paginator=ep.paginator or dep.paginator or self.client.paginator,
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


def check_repo(repo: str) -> str:
    if not REPO_NAME.match(repo):
        raise ValueError(f"repository must look like owner/name, got {repo!r}")
    return repo


def make_paginator(
    spec: PaginatorSpec | None, data_selector: str | None, page_size: int
) -> Paginator:
    """The paging strategy a spec names (``header_link`` when none is declared)."""
    kind = spec.type if spec else "header_link"
    if spec is None or kind == "header_link":
        return LinkHeaderPaginator(page_param=spec.page_param if spec else "page")
    if kind == "page_number":
        return PageNumberPaginator(
            page_param=spec.page_param,
            size_param=spec.page_size_param or "per_page",
            page_size=page_size,
            first_page=spec.base_page,
            total_pages_path=spec.total_path,
            total_pages_header=spec.total_header,
            items_path=data_selector,
        )
    if kind == "offset":
        return OffsetPaginator(
            offset_param=spec.offset_param,
            limit_param=spec.page_size_param or spec.limit_param,
            limit=page_size,
            total_path=spec.total_path,
            total_header=spec.total_header,
            items_path=data_selector,
        )
    if kind == "cursor":
        return BodyCursorPaginator(
            cursor_path=spec.cursor_path, cursor_param=spec.cursor_param, items_path=data_selector
        )
    if kind == "header_cursor":
        return HeaderCursorPaginator(
            cursor_header=spec.cursor_key, cursor_param=spec.cursor_param, items_path=data_selector
        )
    if kind == "json_link":
        return JsonLinkPaginator(next_url_path=spec.next_url_path, items_path=data_selector)
    return SinglePage(items_path=data_selector)


class SinglePage(Paginator):
    """One page, no paging."""

    def __init__(self, items_path: str | None = None) -> None:
        self.items_path = items_path

    def next_url(self, url: str, headers: Any, data: Any) -> str | None:
        return None


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
                if not (isinstance(p, str) and (p[:1].isupper() or p in _AUTH_TYPES))
            ]
            msg = err["msg"].removeprefix("Value error, ")
            if not loc and msg.startswith("resources."):  # a whole-source check naming its place
                head, _, msg = msg.partition(": ")
                loc = [int(p) if p.isdigit() else p for p in head.split(".")]
            line = _line_of(node, loc)
            field = ".".join(str(p) for p in loc) or "(file)"
            lines.append(f"{name}:{line}: {field}: {msg}")
        raise SourceError("invalid source file:\n  " + "\n  ".join(lines)) from exc


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
