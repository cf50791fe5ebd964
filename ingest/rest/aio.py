"""Running the asynchronous paging from synchronous code (Prefect tasks, the CLI)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ingest import interrupt

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running loop
    (then on a short-lived thread with its own loop, in a copy of the caller's context:
    Prefect's settings, such as the API URL of a test server, live there).

    An interrupted run (``ingest.interrupt``) cancels the coroutine: what it fetched and
    staged stays for the next run."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_cancellable(coro))
    box: dict[str, Any] = {}
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = context.run(asyncio.run, _cancellable(coro))
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="rest-paging")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


async def _cancellable(coro: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(coro)

    def stop() -> None:
        loop.call_soon_threadsafe(task.cancel)

    with interrupt.stoppable(stop):
        return await task
