"""Parameter descriptions that reach the Prefect UI's run form.

Prefect 3.9 builds a flow's parameter schema from the signature but drops a
``description`` given as ``Annotated[T, Field(description=...)]`` (bounds
survive); it reads descriptions from the docstring's ``Args:`` section.
``described`` writes that section from the ``Field`` metadata, so each
description is written once, beside its parameter.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic.fields import FieldInfo

F = TypeVar("F", bound=Callable[..., Any])


def described(fn: F) -> F:
    """Append an ``Args:`` section built from the parameters' ``Field`` descriptions."""
    hints = typing.get_type_hints(fn, include_extras=True)
    lines = []
    for name in inspect.signature(fn).parameters:
        for meta in getattr(hints.get(name), "__metadata__", ()):
            if isinstance(meta, FieldInfo) and meta.description:
                lines.append(f"    {name}: {meta.description}")
    if lines:
        # A summary line first: inspect.getdoc would otherwise strip the Args indentation.
        doc = inspect.cleandoc(fn.__doc__ or f"The {fn.__name__} flow.")
        fn.__doc__ = doc + "\n\nArgs:\n" + "\n".join(lines) + "\n"
    return fn
