"""A local S3-compatible server for the demo, the tests and the benchmarks.

It serves moto's S3 application (the same WSGI app as ``moto_server``) in a
separate process on loopback, with three additions that a plain
``moto_server`` lacks:

* HTTP/1.1 keep-alive, served by uvicorn (stock ``moto_server`` runs on
  werkzeug, which answers ``Connection: close`` on every response, so every
  request pays a new TCP connection and a new server thread);
* optional latency per request, like ``tc netem`` on a real link (sleeping
  threads cost no CPU);
* fault injection for tests: answer 500/503 to the first N GETs of matching
  keys, or cut their bodies mid-stream; and request counters at
  ``/_dev/stats`` so tests can check that a re-run made no GET;
* conditional writes made atomic: moto checks ``If-None-Match: *`` (PUT,
  CompleteMultipartUpload) and then writes, two steps that two threads can
  interleave; here writes carrying a condition run one at a time, as S3
  guarantees (Delta commits and the staging area's claims rely on it).

Run ``python -m dev.servers.s3 [--port 9000]`` (9000 is the demo's port, the default) or
use ``DevServer`` as a context manager; ``make dev-s3 DIR=folder`` (``dev.s3_folder``)
starts it with a bucket holding a folder's files. Needs the ``demo`` extra (moto[server]).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dev.servers.child import ChildServer, free_port

__all__ = ["DevServer", "Fault", "Middleware", "free_port", "serve"]
from urllib.parse import unquote

# ---------------------------------------------------------------------------- server side


@dataclass
class Fault:
    """``kind`` is an HTTP status (500, 503), ``cut`` (half the body, then the
    connection drops) or ``corrupt`` (one byte flipped); applies to the first
    ``times`` GETs of each key containing ``match``."""

    kind: str
    match: str
    times: int = 1

    @classmethod
    def parse(cls, spec: str) -> Fault:
        kind, match, *times = spec.split(":")
        return cls(kind, match, int(times[0]) if times else 1)


@dataclass
class _State:
    faults: list[Fault]
    latency: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    conditional: threading.Lock = field(default_factory=threading.Lock)
    stats: Counter[str] = field(default_factory=Counter)
    hits: Counter[tuple[int, str]] = field(default_factory=Counter)


class Middleware:
    """WSGI wrapper adding latency, faults and counters around moto's app."""

    def __init__(self, app: Any, faults: list[Fault], latency_ms: float) -> None:
        self.app = app
        self.state = _State(faults, latency_ms / 1000)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ["REQUEST_METHOD"]
        if path.startswith("/_dev/"):
            return self._control(path, method, start_response)
        if self.state.latency:
            time.sleep(self.state.latency)
        query = environ.get("QUERY_STRING", "")
        is_object = path.count("/") >= 2 and path.split("/", 2)[2] != ""
        kind = "object" if is_object else "bucket"
        with self.state.lock:
            self.state.stats[f"{method} {kind}"] += 1
            if "list-type" in query:
                self.state.stats["LIST"] += 1
            fault = self._fault_for(unquote(path)) if method == "GET" and is_object else None
        if fault is None:
            if method in ("PUT", "POST") and (
                "HTTP_IF_NONE_MATCH" in environ or "HTTP_IF_MATCH" in environ
            ):
                with self.state.conditional:  # check and write as one step
                    return list(self.app(environ, start_response))
            return self.app(environ, start_response)
        if fault.kind == "cut":
            return self._cut(environ, start_response)
        if fault.kind == "corrupt":
            mangled = bytearray(b"".join(self.app(environ, start_response)))
            if mangled:
                mangled[len(mangled) // 2] ^= 0xFF
            return [bytes(mangled)]
        status = int(fault.kind)
        code = "SlowDown" if status == 503 else "InternalError"
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>injected fault</Message></Error>"
        ).encode()
        start_response(
            f"{status} Injected",
            [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
        )
        return [body]

    def _fault_for(self, path: str) -> Fault | None:
        for i, fault in enumerate(self.state.faults):
            if fault.match in path and self.state.hits[(i, path)] < fault.times:
                self.state.hits[(i, path)] += 1
                self.state.stats[f"fault {fault.kind}"] += 1
                return fault
        return None

    def _cut(self, environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        """Send the headers and half the body, then drop the connection."""
        chunks = b"".join(self.app(environ, start_response))

        def gen() -> Iterator[bytes]:
            yield chunks[: len(chunks) // 2]
            raise ConnectionAbortedError("injected: body cut mid-stream")

        return gen()

    def _control(self, path: str, method: str, start_response: Any) -> list[bytes]:
        with self.state.lock:
            if path == "/_dev/reset" and method == "POST":
                self.state.stats.clear()
            body = json.dumps(dict(self.state.stats)).encode()
        start_response(
            "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]


def serve(
    port: int, host: str, faults: list[Fault], latency_ms: float, keepalive: bool, threads: int
) -> None:
    """Serve moto's S3 app; ``keepalive`` picks uvicorn (HTTP/1.1 keep-alive, the WSGI
    app on a pool of ``threads``) over werkzeug, which closes every connection."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    app = Middleware(DomainDispatcherApplication(create_backend_app), faults, latency_ms)
    if keepalive:
        import warnings

        import uvicorn
        from uvicorn.middleware.wsgi import WSGIMiddleware

        warnings.simplefilter("ignore", DeprecationWarning)  # WSGIMiddleware is deprecated
        uvicorn.run(
            WSGIMiddleware(app, workers=threads),  # type: ignore[arg-type]
            host=host,
            port=port,
            http="h11",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=120,
        )
        return

    from werkzeug.serving import WSGIRequestHandler, run_simple

    class QuietHandler(WSGIRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    run_simple(host, port, app, threaded=True, request_handler=QuietHandler)


# ---------------------------------------------------------------------------- client side


class DevServer(ChildServer):
    """Start the server in a child process; ``with DevServer() as srv: srv.url``."""

    label = "S3 server"

    def __init__(
        self,
        *,
        faults: Iterable[str] = (),
        latency_ms: float = 0,
        keepalive: bool = True,
        threads: int = 256,
        stock: bool = False,
        port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(port)
        if stock:  # the plain moto_server command, exactly as users run it
            exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
            self.cmd = [exe, "-H", "127.0.0.1", "-p", str(self.port)]
        else:
            self.cmd = [
                sys.executable,
                "-m",
                "dev.servers.s3",
                "--port",
                str(self.port),
                "--latency-ms",
                str(latency_ms),
            ]
            self.cmd += ["--threads", str(threads)] if keepalive else ["--no-keepalive"]
            for f in faults:
                self.cmd += ["--fault", f]
        self.env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", **(env or {})}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=9000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--latency-ms", type=float, default=0)
    p.add_argument("--no-keepalive", action="store_true", help="werkzeug, a connection per request")
    p.add_argument("--threads", type=int, default=256, help="WSGI threads behind uvicorn")
    p.add_argument(
        "--fault", action="append", default=[], help="KIND:MATCH[:TIMES], KIND 500|503|cut|corrupt"
    )
    a = p.parse_args(argv)
    faults = [Fault.parse(f) for f in a.fault]
    serve(a.port, a.host, faults, a.latency_ms, not a.no_keepalive, a.threads)


if __name__ == "__main__":
    main()
