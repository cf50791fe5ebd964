"""The ``client`` section of a source file, and the parts of its schema every section
uses: how the API is reached (``base_url``, ``auth`` naming where its credential lives,
``headers``, the ``paginator`` and the ``rate_limit``), dlt's JSONPath for one field,
and the dlt forms refused at load with what to write instead. ``make_paginator`` turns
a paginator spec into the paging strategy (``ingest.rest.paging``) it names.

The resources and the whole file are ``ingest.rest.source``'s.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from ingest.rest.paging import (
    AutoPaginator,
    BodyCursorPaginator,
    HeaderCursorPaginator,
    JsonLinkPaginator,
    LinkHeaderPaginator,
    OffsetPaginator,
    PageNumberPaginator,
    Paginator,
    SinglePagePaginator,
)

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


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# keys that would hold a credential in the file (dlt's auth fields among them)
LITERAL_CREDENTIALS = (
    "token",
    "password",
    "api_key",
    "client_secret",
    "access_token",
    "key",
    "value",
)


class SecretRef(Strict):
    """Where a credential comes from: a Prefect Secret block, else an environment variable."""

    secret: str | None = Field(None, description="Name of a Prefect Secret block.")
    env: str | None = Field(None, description="Name of an environment variable.")

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


AUTH_TYPES = ("bearer", "api_key", "http_basic", "oauth2_client_credentials")
Auth = Annotated[
    BearerAuth | ApiKeyAuth | BasicAuth | OAuth2ClientCredentials, Field(discriminator="type")
]


class PaginatorSpec(Strict):
    """dlt's paginator types and options (those that apply to each type), with dlt's
    defaults: ``page_number`` counts from ``base_page`` 0 and reads the total of pages at
    ``total`` (``total_path: null``: no total), ``offset`` the total of items at
    ``total``; both stop at an empty page unless ``stop_after_empty_page: false``; the
    ``cursor`` is read at ``cursors.next``, the ``header_cursor`` from the ``next``
    header. ``page_size`` (with ``page_size_param``) is this engine's: left out, no size
    is sent but what the file's ``params`` or ``limit`` say; ``auto``, the engine picks."""

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
    base_page: int = 0
    page: int | None = Field(None, description="The first page asked for (base_page).")
    maximum_page: int | None = None
    total_path: str | None = "total"  # page_number: total pages; offset: total items
    total_header: str | None = None  # the same in a response header
    stop_after_empty_page: bool | None = None  # None: dlt's default of the type
    has_more_path: str | None = None
    # page_number and offset: the page size, and the parameter that carries it
    page_size: int | Literal["auto"] | None = None
    page_size_param: str | None = None
    # offset
    offset_param: str = "offset"
    limit_param: str = "limit"
    limit: int | None = None
    offset: int = Field(0, ge=0, description="The first offset asked for.")
    maximum_offset: int | None = None
    # cursor / header_cursor / json_link / header_link
    cursor_path: str = "cursors.next"
    cursor_param: str = "cursor"
    cursor_key: str = "next"
    next_url_path: str = "next"
    links_next_key: str = "next"

    @field_validator("cursor_path", "next_url_path", "total_path", "has_more_path")
    @classmethod
    def _paths(cls, v: str | None) -> str | None:
        return json_path(v)

    @field_validator("page_size", "limit")
    @classmethod
    def _positive(cls, v: Any) -> Any:
        if isinstance(v, int) and not 1 <= v <= 10_000:
            raise ValueError("must be between 1 and 10000")
        return v

    @model_validator(mode="before")
    @classmethod
    def _refused(cls, data: Any) -> Any:
        if isinstance(data, dict):
            refuse(data, "paginator")
        return data

    @model_validator(mode="after")
    def _stops(self) -> PaginatorSpec:
        """dlt refuses a page_number or offset paginator that has no way to end."""
        if self.type in ("page_number", "offset"):
            maximum = self.maximum_page if self.type == "page_number" else self.maximum_offset
            bound = "maximum_page" if self.type == "page_number" else "maximum_offset"
            if (
                self.total is None
                and self.total_header is None
                and maximum is None
                and self.has_more_path is None
                and self.stop_after_empty_page is False
            ):
                raise ValueError(
                    "stop_after_empty_page: false leaves the listing no end; give "
                    f"total_path, has_more_path or {bound}"
                )
        return self

    @property
    def stops_on_empty(self) -> bool:
        if self.stop_after_empty_page is not None:
            return self.stop_after_empty_page
        return self.type != "cursor"

    @property
    def total(self) -> str | None:
        """The total's path as the file means it: declared, else dlt's ``total`` unless a
        header carries the total instead."""
        if "total_path" in self.model_fields_set or self.total_header is None:
            return self.total_path
        return None


# dlt forms this engine does not take, by where they stand, and what to write instead
# (refused at load)
REFUSED = {
    "paginator": {
        "page_body_path": "pages are asked for by a query parameter here; write page_param",
        "offset_body_path": "offsets are sent as a query parameter here; write offset_param",
        "limit_body_path": "the limit is sent as a query parameter here; write limit_param",
        "cursor_body_path": "the cursor is sent as a query parameter here; write cursor_param",
    },
    "endpoint": {
        "json": "a request body is not sent here (listings are GET requests); put the values "
        "in params",
        "data": "a request body is not sent here (listings are GET requests); put the values "
        "in params",
        "auth": "one auth per source here; declare it under client.auth",
        "headers": "headers are declared once per source here; write them under client.headers",
    },
}


def refuse(data: dict[str, Any], where: str) -> None:
    """A dlt form ``REFUSED`` at ``where`` (paginator, endpoint) is one line naming its key
    and what to write instead."""
    for key, instead in REFUSED[where].items():
        if key in data:
            raise ValueError(f"{key}: {instead}")


def paginator_form(value: Any) -> Any:
    """dlt's short forms: a paginator named by its type (``paginator: json_link``), and
    ``auto`` (or ``{type: auto}``), which leaves the paginator to be detected from the first
    response, as does a paginator left out."""
    if value == "auto" or (isinstance(value, dict) and value.get("type", "auto") == "auto"):
        if isinstance(value, dict) and set(value) - {"type"}:
            raise ValueError("a detected paginator (auto) takes no options; name its type")
        return None
    if isinstance(value, str):
        return {"type": value}
    return value


# a paginator where a file declares one: a spec, or one of dlt's short forms
DeclaredPaginator = Annotated[PaginatorSpec | None, BeforeValidator(paginator_form)]


class RateLimit(Strict):
    reserve: int = Field(0, ge=0, description="Requests of an announced budget never spent.")
    max_wait: float = Field(
        900.0, ge=0, description="Longest wait for a spent budget to reset, in seconds."
    )
    backoff: float = Field(
        1.0, ge=0, description="First pause after a limit answer without Retry-After."
    )
    retries: int | None = Field(
        None,
        ge=0,
        le=50,
        description="Limit answers (429, 403 with Retry-After ...) one request may take before "
        "failing; empty: INGEST_REST_LIMIT_RETRIES.",
    )


class Client(Strict):
    dialect: Literal["github"] | None = Field(
        None,
        description="github: what is GitHub's own (its headers, page ETags sent back as "
        "If-None-Match, the /rate_limit probe, budget-sized pages, the pull_requests table); "
        "see ingest.rest.github.",
    )
    base_url: str
    auth: Auth | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    paginator: DeclaredPaginator = None
    concurrency: int = Field(32, ge=1, le=256, description="Most requests in flight.")
    rate_limit: RateLimit = Field(default_factory=RateLimit)

    @field_validator("auth", mode="before")
    @classmethod
    def _auth_forms(cls, v: Any) -> Any:
        """dlt's forms: ``auth: {token: ...}`` is bearer (the type implied), and a literal
        credential is refused in one line naming its key and what to write instead."""
        if isinstance(v, str):
            raise ValueError(
                f"{v!r}: an auth named by its type alone has nowhere to read its credential "
                f"from; write {{type: {v}, env: VARIABLE}} (or a Prefect Secret block's name "
                "as secret)"
            )
        if isinstance(v, dict):
            if "type" not in v:
                v = {"type": "bearer", **v}
            if v["type"] not in AUTH_TYPES:
                raise ValueError(
                    f"type: {v['type']!r} is not an auth type here; write one of "
                    + ", ".join(AUTH_TYPES)
                )
            for literal in LITERAL_CREDENTIALS:
                if literal in v:  # worded so that redaction (any "secret: X") leaves it readable
                    raise ValueError(
                        f"'{literal}' puts a credential in the file; write env with the name of "
                        "an environment variable that holds it, or secret with the name of a "
                        f"Prefect Secret block (auth: {{type: {v['type']}, env: "
                        f"API_{literal.upper()}}})"
                    )
        return v

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


def make_paginator(
    spec: PaginatorSpec | None,
    data_selector: str | None,
    page_size: int | None,
    *,
    detect: bool = False,
) -> Paginator:
    """The paging strategy a spec names, with dlt's defaults. None: detected from the
    first response (``detect``, a declared source's), else ``header_link``. ``page_size``
    is the size the engine sends, None when the file leaves it unsent."""
    if spec is None:
        return AutoPaginator(data_selector) if detect else LinkHeaderPaginator()
    kind = spec.type
    if kind == "header_link":
        return LinkHeaderPaginator(page_param=spec.page_param, next_rel=spec.links_next_key)
    # dlt's stop rules where the type has them: an empty page, has_more_path
    stops: dict[str, Any] = {
        "items_path": data_selector,
        "stop_after_empty_page": spec.stops_on_empty,
        "has_more_path": spec.has_more_path,
    }
    if kind == "page_number":
        return PageNumberPaginator(
            page_param=spec.page_param,
            size_param=spec.page_size_param or "per_page",
            page_size=page_size,
            first_page=spec.base_page,
            start_page=spec.page,
            total_pages_path=spec.total,
            total_pages_header=spec.total_header,
            maximum_page=spec.maximum_page,
            **stops,
        )
    if kind == "offset":
        return OffsetPaginator(
            offset_param=spec.offset_param,
            limit_param=spec.page_size_param or spec.limit_param,
            limit=page_size or DEFAULT_LIMIT,
            total_path=spec.total,
            total_header=spec.total_header,
            start=spec.offset,
            maximum_offset=spec.maximum_offset,
            **stops,
        )
    if kind == "cursor":
        return BodyCursorPaginator(
            cursor_path=spec.cursor_path, cursor_param=spec.cursor_param, **stops
        )
    if kind == "header_cursor":
        return HeaderCursorPaginator(
            cursor_header=spec.cursor_key, cursor_param=spec.cursor_param, items_path=data_selector
        )
    if kind == "json_link":
        return JsonLinkPaginator(next_url_path=spec.next_url_path, items_path=data_selector)
    return SinglePagePaginator(items_path=data_selector)


# an offset paginator's limit when the file gives none (dlt requires one)
DEFAULT_LIMIT = 100
