"""A run's artifacts sent side by side instead of one after another.

Each artifact is one request to the Prefect API; its answer takes the server's time,
not this process's, so a summary's three or four artifacts sent in turn cost three or
four round trips. ``sends`` starts each on a thread of its own (with the caller's
context, so it belongs to the same flow and task run) and, at the end of its block,
waits for all of them: the task still ends only once every artifact is stored, and
the first failure is raised as if the call had been made in place.

Inside ``beside()`` (a run's end: its summary, then its commits) every ``sends`` hands
its artifacts to the block's own: they are waited for at the end of that block, so the
summary's artifacts are stored while the run's history commits instead of before it
(a no-op run waited ~60-75 ms for them, on the critical path).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

# Artifacts in flight at once: a summary has at most five.
MAX_IN_FLIGHT = 4

# ``send(fn, *args, **kwargs)``: ``fn`` started, its future returned.
Send = Callable[..., "Future[Any]"]


@contextmanager
def sends() -> Iterator[Send]:
    """``with sends() as send: send(create_markdown_artifact, key=..., ...)``; a call's
    future, for a call whose answer the block needs (a read of the API beside the block's
    own work). Inside ``beside()``, the calls are that block's to wait for."""
    outer = _BESIDE.get()
    if outer is not None:
        yield outer
        return
    sent: list[Future[Any]] = []
    with ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="artifact") as pool:

        def send(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
            context = contextvars.copy_context()  # the run's context: the artifact's owner
            future = pool.submit(context.run, fn, *args, **kwargs)
            sent.append(future)
            return future

        yield send
    for future in sent:
        future.result()  # the first failure, as the call in place would have raised


_BESIDE: contextvars.ContextVar[Send | None] = contextvars.ContextVar(
    "artifacts_beside", default=None
)


@contextmanager
def beside() -> Iterator[None]:
    """The artifacts that ``sends`` blocks inside start finish beside the rest of this
    block: waited for at its end, where their first failure is raised (after the
    block's own work, so a failed artifact never holds back a commit)."""
    with sends() as send:
        token = _BESIDE.set(send)
        try:
            yield
        finally:
            _BESIDE.reset(token)
