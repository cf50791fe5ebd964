"""The functions a source file may name: data, not code.

dlt's ``processing_steps`` (``filter``, ``map``) and ``incremental.convert`` are Python
callables. A source file is data that whoever writes it controls (a deployment's run
names one under the source roots), so it never chooses code to import: it names

* a function the project ships, by its bare name (``SHIPPED``: ``convert: unix_seconds``);
* or a function the worker's own configuration registers, by its import path:
  ``INGEST_SOURCE_FUNCTIONS='["mypackage.steps:trim", "mypackage.more:*"]'`` (an entry
  ``module:*`` registers every public function *defined* in that module, not the names
  it imports, so ``from os import getenv`` in it registers nothing).

Anything else (``os:getenv``, ``builtins:eval``, an unregistered module of the project) is
refused when the file loads, before any request, with the file's line. Registering a
function is deploying code: it runs in the flow's process with the worker's
credentials, and is reviewed as the worker's code is.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:([A-Za-z_][\w.]*|\*)$")
ENV_NAME = "INGEST_SOURCE_FUNCTIONS"


def _instant(value: Any) -> datetime:
    """An ISO 8601 timestamp (``Z`` or an offset; naive is UTC), a date, or a datetime."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    else:
        moment = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def unix_seconds(value: Any) -> int:
    """An ISO timestamp as whole Unix seconds (an API whose ``since`` takes those)."""
    return int(_instant(value).timestamp())


def unix_millis(value: Any) -> int:
    """An ISO timestamp as Unix milliseconds."""
    return int(_instant(value).timestamp() * 1000)


def iso_date(value: Any) -> str:
    """The UTC date of an ISO timestamp, ``YYYY-MM-DD`` (an API filtering by day)."""
    return _instant(value).astimezone(UTC).date().isoformat()


def utc_iso(value: Any) -> str:
    """An ISO timestamp in UTC with ``Z``, to the second (``2025-05-01T00:00:00Z``)."""
    return _instant(value).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# What every source file may name, by bare name.
SHIPPED: dict[str, Callable[..., Any]] = {
    f.__name__: f for f in (unix_seconds, unix_millis, iso_date, utc_iso)
}


@functools.cache
def _registered(raw: str | None) -> tuple[str, ...]:
    from ingest.settings import Settings  # the one settings object (and its .env)

    return tuple(Settings().source_functions)


def registered() -> tuple[str, ...]:
    """The import paths the worker's settings register (``INGEST_SOURCE_FUNCTIONS``),
    read again when the variable changes."""
    return _registered(os.environ.get(ENV_NAME))


def is_registered(path: str, entries: tuple[str, ...]) -> bool:
    module = path.partition(":")[0]
    return path in entries or f"{module}:*" in entries


def _import(path: str, *, whole_module: bool) -> Callable[..., Any]:
    module_name, _, attr = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{path!r}: module {module_name!r} cannot be imported ({exc})") from exc
    for name in attr.split("."):
        if not hasattr(target, name):
            raise ValueError(f"{path!r}: module {module_name!r} has no {attr!r}")
        target = getattr(target, name)
    if not callable(target):
        raise ValueError(f"{path!r}: {attr!r} is not a function")
    if whole_module and (
        attr.startswith("_") or getattr(target, "__module__", None) != module_name
    ):
        raise ValueError(
            f"{path!r} is not a registered function: {module_name}:* registers the public "
            f"functions defined in {module_name}, and {attr!r} is not one"
        )
    return target  # type: ignore[no-any-return]


def resolve(path: str) -> Callable[..., Any]:
    """The function ``path`` names: a shipped one by name, or a registered import path;
    ``ValueError`` saying what is wrong (and what may be named) otherwise. Cached per
    path and registration (a step is resolved for every record)."""
    return _resolve(path, registered())


@functools.cache
def _resolve(path: str, entries: tuple[str, ...]) -> Callable[..., Any]:
    if path in SHIPPED:
        return SHIPPED[path]
    if not IMPORT_PATH.match(path) or path.endswith(":*"):
        raise ValueError(
            f"{path!r} is neither a function the project ships ({', '.join(SHIPPED)}) nor "
            "an import path module:function registered in INGEST_SOURCE_FUNCTIONS"
        )
    if not is_registered(path, entries):
        raise ValueError(
            f"{path!r} is not a registered function: a source file names one the project "
            f"ships ({', '.join(SHIPPED)}) or one this worker registers in "
            f"{ENV_NAME} (source files are data; importing what they name would run "
            "any code)"
        )
    return _import(path, whole_module=path not in entries)
