"""What the flows' parameters look like in the Prefect UI's run form, and how a flow's
function is run. The flows are plain ``prefect.flow``s; these helpers go under
(``flow_body``) and over (``run_form``) the decorator.

Prefect 3.9 builds a flow's parameter schema from the signature but drops a
``description`` given as ``Annotated[T, Field(description=...)]`` (bounds
survive); it reads descriptions from the docstring's ``Args:`` section.
``described`` writes that section from the ``Field`` metadata, so each
description is written once, beside its parameter, and says the field's bounds
(the run form shows the description, not the schema's minimum and maximum).

``run_form`` also gives each optional parameter (``X | None = None``) the schema of
``X`` without a default: the UI's run form shows a schema of ``anyOf [X, null]`` whose
default is null as its ``None`` choice ("Property is type None"), and one of type ``X``
whose default is null as an input in error ("None is not of type 'string'"), where an
empty input of ``X`` is meant. The server reads a property that is neither required nor
given a default as ``anyOf [X, null]`` when it checks a run's parameters, so null (a
deployment's unset endpoint) still passes, and the flow's own default is None.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, ParamSpec, TypeVar, cast

from prefect import Flow
from prefect.utilities.callables import parameter_schema
from prefect.utilities.hashing import file_hash
from pydantic import Field, GetJsonSchemaHandler, StringConstraints
from pydantic.experimental.missing_sentinel import MISSING
from pydantic.fields import FieldInfo
from pydantic_core import CoreSchema

from ingest.rest.source import REPO_NAME
from tasks import limits
from tasks.history import FINAL_HOOKS
from tasks.runs import stops_on_sigterm

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")
# A GitHub repository as the flows take it (owner/name): the pattern is in the parameter
# schema, so the run form and the server refuse ``octo`` before a run is created.
RepoName = Annotated[str, StringConstraints(pattern=REPO_NAME.pattern)]
# The REST flows' last parameter.
FetchRunner = Annotated[
    Literal["thread", "dask"],
    Field(
        description="Where the fetch task runs: thread (this process) or dask (the cluster "
        "at INGEST_DASK_ADDRESS, else a LocalCluster). The ingest command's default: "
        "INGEST_TASK_RUNNER."
    ),
]
# What every ingestion flow's decorator gives it: its run recorded as it ends
# (``FINAL_HOOKS``), its time limit read as it starts, its parameters validated.
INGEST_FLOW: dict[str, Any] = {
    **FINAL_HOOKS,
    "on_running": [limits.read_flow_limit],
    "validate_parameters": True,
}


def bounds_text(field: FieldInfo, kind: Any = None) -> str:
    """``Bounds: 1-512.`` or ``Length: 3-63 characters.`` from the field's constraints."""
    found: dict[str, Any] = {}
    for c in field.metadata:
        for attr in ("ge", "gt", "le", "lt", "min_length", "max_length"):
            value = getattr(c, attr, None)
            if value is not None:
                found[attr] = value
    low = found.get("ge", found.get("gt"))
    high = found.get("le", found.get("lt"))
    if "min_length" in found or "max_length" in found:
        lo, hi = found.get("min_length", 0), found.get("max_length")
        what = "items" if typing.get_origin(kind) is list else "characters"
        return f"Length: {lo}-{hi} {what}." if hi is not None else f"Length: at least {lo}."
    if low is not None and high is not None:
        return f"Bounds: {low}-{high}."
    if low is not None:
        return f"Bounds: at least {low}." if "ge" in found else f"Bounds: more than {low}."
    if high is not None:
        return f"Bounds: at most {high}."
    return ""


def form_text(text: str) -> str:
    """The UI renders descriptions as markdown with HTML: ``<key>`` would vanish as a tag."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


def described(fn: F) -> F:
    """Append an ``Args:`` section built from the parameters' ``Field`` descriptions, each
    followed by its bounds (the run form shows descriptions, not the schema's bounds)."""
    hints = typing.get_type_hints(fn, include_extras=True)
    lines = []
    for name in inspect.signature(fn).parameters:
        for meta in getattr(hints.get(name), "__metadata__", ()):
            if isinstance(meta, FieldInfo) and meta.description:
                kind = typing.get_args(hints[name])[0]
                text = " ".join(t for t in (meta.description, bounds_text(meta, kind)) if t)
                lines.append(f"    {name}: {form_text(text)}")
    if lines:
        # A summary line first: inspect.getdoc would otherwise strip the Args indentation.
        doc = inspect.cleandoc(fn.__doc__ or f"The {fn.__name__} flow.")
        fn.__doc__ = doc + "\n\nArgs:\n" + "\n".join(lines) + "\n"
    return fn


class FormInput:
    """``Annotated`` metadata giving ``X | None`` the JSON schema of ``X`` (validation keeps
    None): the null choice of ``anyOf`` dropped, the other's keys kept (bounds, items),
    None kept among the values of an enum."""

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        schema = dict(handler(core_schema))
        choices = [c for c in schema.get("anyOf", ()) if c != {"type": "null"}]
        if len(choices) == 1 and len(choices) < len(schema["anyOf"]):
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            chosen = {**choices[0], **rest}
            if "enum" in chosen:  # null stays a value (the form's select lists the rest)
                chosen["enum"] = [*chosen["enum"], None]
            return chosen
        return schema


def _optional(hint: Any) -> bool:
    annotated = typing.get_origin(hint) is typing.Annotated
    return type(None) in typing.get_args(typing.get_args(hint)[0] if annotated else hint)


def form_inputs(fn: F) -> F:
    """``fn`` with ``FormInput`` added to the annotation of each optional parameter."""
    hints = typing.get_type_hints(fn, include_extras=True)
    for name in inspect.signature(fn).parameters:
        hint = hints.get(name)
        if hint is not None and _optional(hint):
            fn.__annotations__[name] = typing.Annotated[hint, FormInput()]
    return fn


def form_signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``fn``'s signature as the parameter schema reads it: an optional parameter's None
    default is pydantic's ``MISSING``, which a JSON schema leaves out (not required, no
    default). Only the schema reads it: Prefect binds and validates a run's parameters
    with the function's own signature (``Flow.fn``)."""
    signature = inspect.signature(fn, eval_str=True)
    hints = typing.get_type_hints(fn, include_extras=True)
    return signature.replace(
        parameters=[
            p.replace(default=MISSING)
            if p.default is None and p.name in hints and _optional(hints[p.name])
            else p
            for p in signature.parameters.values()
        ]
    )


def flow_body(fn: F) -> F:
    """The function a flow runs (put under ``@flow``): its ``Args:`` section written from
    its fields (``described``), its optional parameters inputs of their type in the run
    form (``form_inputs``), and run so that SIGTERM stops it (``stops_on_sigterm``)."""
    return cast(F, stops_on_sigterm(form_inputs(described(fn))))


def run_form(flow: Flow[P, R]) -> Flow[P, R]:
    """The flow (put over ``@flow``) with the run form's parameter schema
    (``form_signature``) as its signature, which what deploys and serves it reads
    (``parameter_schema(flow)``: ``prefect deploy``, ``serve``, ``to_deployment``), and as
    its ``parameters``; its version the hash of its own file, as Prefect gives a flow by
    default (Prefect hashed the file of ``stops_on_sigterm``'s wrapper)."""
    fn = inspect.unwrap(flow.fn)
    flow.__signature__ = form_signature(fn)  # type: ignore[attr-defined]
    flow.parameters = parameter_schema(flow)
    source = inspect.getsourcefile(fn)
    if source:
        flow.version = file_hash(source)
    return flow
