"""A run's artifacts sent side by side instead of one after another.

Each artifact is one request to the Prefect API; its answer takes the server's time,
not this process's, so a summary's three or four artifacts sent in turn cost three or
four round trips. ``Sends`` starts each on a thread of its own (with the caller's
context, so it belongs to the same flow and task run) and, at the end of its block,
waits for all of them: the task still ends only once every artifact is stored, and
the first failure is raised as if the call had been made in place.

Inside ``beside()`` (a run's end: its summary, then its commits) every ``Sends`` hands
its artifacts to the block's own: they are waited for at the end of that block, so the
summary's artifacts are stored while the run's history commits instead of before it
(a no-op run waited ~60-75 ms for them, on the critical path).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from types import TracebackType
from typing import Any

# Artifacts in flight at once: a summary has at most five.
MAX_IN_FLIGHT = 4


class Sends:
    """``with Sends() as send: send(create_markdown_artifact, key=..., ...)``."""

    def __init__(self) -> None:
        self._outer = _BESIDE.get()  # a ``beside()`` block that waits for these instead
        self._pool = (
            ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="artifact")
            if self._outer is None
            else None
        )
        self._sent: list[Future[Any]] = []

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        """Start ``fn``; its future, for a call whose answer the block needs (a read of
        the API beside the block's own work)."""
        if self._pool is None:
            assert self._outer is not None
            return self._outer(fn, *args, **kwargs)
        context = contextvars.copy_context()  # the run's context: the artifact's owner
        sent = self._pool.submit(context.run, fn, *args, **kwargs)
        self._sent.append(sent)
        return sent

    def __enter__(self) -> Sends:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pool is None:
            return  # the ``beside()`` block waits for them
        self._pool.shutdown(wait=True)
        if kind is None:
            for sent in self._sent:
                sent.result()  # the first failure, as the call in place would have raised


_BESIDE: contextvars.ContextVar[Sends | None] = contextvars.ContextVar(
    "artifacts_beside", default=None
)


@contextmanager
def beside() -> Iterator[None]:
    """The artifacts that ``Sends`` blocks inside start finish beside the rest of this
    block: waited for at its end, where their first failure is raised (after the
    block's own work, so a failed artifact never holds back a commit)."""
    with Sends() as sends:
        token = _BESIDE.set(sends)
        try:
            yield
        finally:
            _BESIDE.reset(token)
