"""The Prefect server the project starts: Prefect's own app, with a prompt ``Retry-After``.

On SQLite, Prefect's server answers 503 when a write meets another writer's lock
("database is locked": a request whose transaction read before it wrote gets it at once,
whatever the busy timeout). Prefect's client retries a 503 after the ``Retry-After`` it
names (seconds; fractions are accepted) or, without one, after 2 s, 4 s, 8 s, 16 s, 32 s.
Such a lock lasts milliseconds, so those waits were the delay: the nightly's second child
started 2-13 s after the first (benchmarks/nightly_children.md).

``RetryAfter`` adds the header to each 503 that has none: ``BASE_SECONDS``, or
``FACTOR`` times the age of the current spell of 503s (at most ``CAP_SECONDS``; a spell
ends once no 503 came for ``QUIET_SECONDS`` after every client it answered was due
back). Two such answers in a row within half a second are usual under load (the lock
is met again on the retry), and Prefect's client gives up after 5 retries: short waits
alone would cut its patience from 62 s to about 2 s. So while a spell is younger than
``UNCOUNTED_SECONDS`` the 503 also says ``Prefect-Maintenance: true``, with which
Prefect's client does not count the retry against its limit (its documented
behaviour, meant for a server that is briefly unavailable); after that the retries
count again, and a lock that lasts fails a lone client after about 90 s (Prefect's
own waits, 2 + 4 + 8 + 16 + 32 s: 62 s). The client adds its own jitter
(up to +20 %) to a named wait. On PostgreSQL, which has no database-wide lock, such 503s
are rare and the headers harmless.

* ``create_app``: the factory uvicorn runs for a command's own server
  (``uvicorn --factory deployments.server_app:create_app``, ``local_api.TemporaryServer``).
* ``python -m deployments.server_app --host H --port P``: what ``prefect server start``
  runs in the foreground with one worker process (the UI, the services: scheduler, late
  runs, recorder, ...; uvicorn with Prefect's keep-alive, websocket ping and log level
  settings), with this app; ``serve.PrefectServer`` runs it for ``ingest serve``.
  ``prefect server start`` takes no app of ours, hence this.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

BASE_SECONDS = 0.25  # a lock is held for milliseconds: ask again soon
FACTOR = 0.25  # of a spell's age: a lock met again and again is asked about less often
CAP_SECONDS = 10.0
QUIET_SECONDS = 1.0  # no 503 for this long after the clients were due back ends a spell
UNCOUNTED_SECONDS = 30.0  # retries of a younger spell do not count against the client's 5
JITTER = 0.2  # the most Prefect's client adds to a named wait (PREFECT_CLIENT_RETRY_JITTER_FACTOR)


@dataclass(kw_only=True)
class RetryWait:
    """For the 503 answered at each call's time: the ``Retry-After`` seconds (``base``,
    or ``factor`` times the age of the current spell of 503s, at most ``cap``) and
    whether the client's retry goes uncounted (the spell is younger than ``uncounted``).

    A spell lasts while 503s keep coming: it ends only ``quiet`` seconds after the
    latest client it answered was due back (its wait plus Prefect's jitter), so one
    client meeting a lasting lock alone keeps the spell going."""

    base: float = BASE_SECONDS
    factor: float = FACTOR
    cap: float = CAP_SECONDS
    quiet: float = QUIET_SECONDS
    uncounted: float = UNCOUNTED_SECONDS
    clock: Callable[[], float] = time.monotonic
    _spell_start: float = field(default=0.0, init=False)
    _spell_end: float = field(default=float("-inf"), init=False)

    def __call__(self) -> tuple[float, bool]:
        now = self.clock()
        if now > self._spell_end:
            self._spell_start = now
        age = now - self._spell_start
        wait = min(self.cap, max(self.base, self.factor * age))
        self._spell_end = max(self._spell_end, now + wait * (1 + JITTER) + self.quiet)
        return wait, age < self.uncounted


class RetryAfter:
    """ASGI middleware: a 503 response without ``Retry-After`` gets one from ``wait``,
    and ``Prefect-Maintenance: true`` when ``wait`` says the retry goes uncounted."""

    def __init__(self, app: ASGIApp, wait: Callable[[], tuple[float, bool]] | None = None) -> None:
        self.app = app
        self.wait = wait or RetryWait()

    def __getattr__(self, name: str) -> Any:
        # Prefect's app carries attributes its callers read (``api_app``, ``openapi``).
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan (migrations, services), websockets
            await self.app(scope, receive, send)
            return

        async def send_with_retry_after(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 503:
                headers = list(message.get("headers", []))
                if not any(name.lower() == b"retry-after" for name, _ in headers):
                    seconds, uncounted = self.wait()
                    headers.append((b"retry-after", f"{seconds:.2f}".encode()))
                    if uncounted:
                        headers.append((b"prefect-maintenance", b"true"))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_retry_after)


def create_app() -> RetryAfter:
    """Prefect's ``create_app()`` (its settings and ``PREFECT__SERVER_*`` variables
    decide the UI and services, as under ``uvicorn --factory``) inside ``RetryAfter``."""
    from prefect.server.api.server import create_app as prefect_app

    return RetryAfter(prefect_app())


def main(argv: list[str] | None = None) -> int:
    """``prefect server start --host H --port P`` in the foreground, with ``create_app``'s
    middleware around Prefect's app."""
    p = argparse.ArgumentParser(
        prog="python -m deployments.server_app",
        description="Prefect's server (UI, API, services) answering 503s with Retry-After.",
    )
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    a = p.parse_args(argv)

    import prefect
    import uvicorn
    from prefect.server.api.server import create_app as prefect_app
    from prefect.settings import get_current_settings

    server = get_current_settings().server
    print(f"Prefect {prefect.__version__} server on {a.host}:{a.port}", flush=True)
    # What `prefect server start` runs with one worker process (prefect.cli._server_utils).
    uvicorn.run(
        app=RetryAfter(prefect_app(final=True)),
        app_dir=str(prefect.__module_path__.parent),
        host=a.host,
        port=a.port,
        timeout_keep_alive=server.api.keepalive_timeout,
        ws_ping_interval=server.api.websocket_ping_interval,
        ws_ping_timeout=server.api.websocket_ping_timeout,
        log_level=server.logging_level.lower(),
    )
    print("Server stopped!", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
