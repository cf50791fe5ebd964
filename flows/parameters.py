"""Parameter descriptions that reach the Prefect UI's run form.

Prefect 3.9 builds a flow's parameter schema from the signature but drops a
``description`` given as ``Annotated[T, Field(description=...)]`` (bounds
survive); it reads descriptions from the docstring's ``Args:`` section.
``described`` writes that section from the ``Field`` metadata, so each
description is written once, beside its parameter, and says the field's bounds
(the run form shows the description, not the schema's minimum and maximum).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from prefect import Flow
from pydantic.fields import FieldInfo

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")
# What goes to the API as it is: JSON's own types (str keys for objects).
_JSON_SCALARS = (str, int, float, bool, type(None))


def deployment_defaults() -> dict[str, Any] | None:
    """The default parameters of the deployment this flow run belongs to, as the server
    holds them (a child flow of the nightly: the nightly's); None for a flow called in a
    process of its own (an ``ingest`` command, a test). What ``ingest.security`` checks a
    run's parameters against."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext
    from prefect.runtime import deployment

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is not None and run.parent_task_run_id is None:
        # A run of its own (no parent's deployment to inherit): its record is at hand;
        # prefect.runtime's deployment.id asks the API for it again (~50 ms a run).
        deployment_id = run.deployment_id
    else:
        deployment_id = deployment.id
    if not deployment_id:
        return None
    with get_client(sync_client=True) as client:
        return dict(client.read_deployment(UUID(str(deployment_id))).parameters or {})


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


def _plain(value: Any, depth: int = 0) -> bool:
    if isinstance(value, _JSON_SCALARS):
        return not isinstance(value, float) or value == value  # NaN goes the long way
    if depth > 8:
        return False
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


class IngestFlow(Flow[P, R]):
    """A Prefect flow whose plain JSON parameters reach the API as they are.

    Prefect's ``Flow.serialize_parameters`` passes every value through FastAPI's
    ``jsonable_encoder``, so each flow run imports FastAPI (0.11 s of a command's start,
    whatever the parameters). A command's parameters are strings, numbers, booleans and
    lists of them, which that encoder returns unchanged; anything else still goes through
    it.
    """

    def serialize_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        plain = {k: v for k, v in parameters.items() if _plain(v)}
        rest = {k: v for k, v in parameters.items() if k not in plain}
        if rest:
            plain.update(super().serialize_parameters(rest))
        return {k: plain[k] for k in parameters if k in plain}

    def with_options(self, **options: Any) -> IngestFlow[P, R]:  # type: ignore[override]
        new = super().with_options(**options)
        new.__class__ = type(self)  # Flow.with_options builds a plain Flow
        return new  # type: ignore[return-value]


def ingest_flow(**options: Any) -> Callable[[Callable[P, R]], IngestFlow[P, R]]:
    """``@flow(**options)`` building an ``IngestFlow``."""

    def decorate(fn: Callable[P, R]) -> IngestFlow[P, R]:
        return IngestFlow(fn=fn, **options)

    return decorate
