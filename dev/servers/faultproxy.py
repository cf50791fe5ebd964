"""A fault-injecting HTTP proxy in front of an S3-compatible server.

The proxy sits between a client and any S3-compatible server (``dev.servers.s3``
or ``dev.servers.memory_s3``) and answers each request from the upstream server,
unless a rule of its *plan* picks it for a fault. It speaks HTTP/1.1 on raw
sockets, so it can do on the wire what a real network and a real S3 do and an
HTTP framework refuses to: reset a connection half-way through a body, stall a
body for longer than the client's read timeout, declare a ``Content-Length``
that the body does not match.

A plan is a list of rules (JSON), tried in order; the first that fires wins:

``{"kind": K, "p": 0.05, "match": "sub/", "on": "get", "times": 1, "after": 0}``

* ``kind``: ``500`` / ``503`` (an S3 ``InternalError`` / ``ServiceUnavailable``
  answer), ``slowdown`` (503 ``SlowDown``), ``throttle`` (one of the three at
  random), ``reset`` (headers and half the body, then a TCP reset), ``stall``
  (headers and half the body, then nothing for ``seconds``), ``long`` (a
  ``Content-Length`` larger than the body, then the connection closes),
  ``short`` (a ``Content-Length`` of half the body: the client gets a truncated
  body that looks complete), ``expire`` (403 ``ExpiredToken``), ``change`` /
  ``delete`` (the object is overwritten / deleted on the upstream server just
  before the request is forwarded: changed or gone between listing and GET),
  ``delay`` (the request waits ``seconds`` before it is forwarded: a slow
  endpoint, e.g. a listing that takes long), ``slow`` (the body is sent in
  pieces of ``piece`` bytes, ``seconds`` apart: a slow link), ``corrupt`` (one
  byte of the body flipped, the length kept);
* ``p``: probability per matching request (seeded: a run of the same plan and
  seed over the same requests fires at the same requests), default 1;
* ``match``: substring of the request path; ``on``: ``get`` (object GETs),
  ``list`` (bucket listings), ``any`` (default);
* ``times``: at most this many firings per path (default unlimited);
* ``after``: fire only once this many requests have been proxied (``expire``
  with ``after`` is credentials that run out mid-run).

Control endpoints (JSON, never forwarded): ``POST /_dev/plan``
(``{"rules": [...], "seed": N}``, resets the counters), ``GET /_dev/stats``
(requests proxied, faults fired by kind, and ``gets``: the path and ``Range``
header of every object GET, in order), ``POST /_dev/reset``.

Run ``python -m dev.servers.faultproxy --upstream http://127.0.0.1:5000`` or use
``FaultProxy`` as a context manager.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import socket
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from dev.servers.child import ChildServer

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
_ERRORS = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "ServiceUnavailable", "Please reduce your request rate."),
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "expire": (403, "ExpiredToken", "The provided token has expired."),
}


@dataclass
class Rule:
    kind: str
    p: float = 1.0
    match: str = ""
    on: str = "any"
    times: int | None = None
    after: int = 0
    seconds: float = 30.0
    piece: int = 65536


@dataclass
class Plan:
    rules: list[Rule] = field(default_factory=list)
    seed: int = 0
    rng: random.Random = field(default_factory=random.Random)
    requests: int = 0
    fired: Counter[str] = field(default_factory=Counter)
    hits: Counter[tuple[int, str]] = field(default_factory=Counter)
    gets: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def of(cls, spec: dict[str, Any]) -> Plan:
        seed = int(spec.get("seed", 0))
        return cls([Rule(**r) for r in spec.get("rules", [])], seed, random.Random(seed))

    def pick(self, method: str, path: str, query: str) -> Rule | None:
        """The rule that fires for this request, if any (counts the request)."""
        self.requests += 1
        parts = path.lstrip("/").split("/", 1)
        is_object = len(parts) == 2 and parts[1] != ""
        kind = "get" if method == "GET" and is_object else "list" if "list-type" in query else ""
        for i, rule in enumerate(self.rules):
            if rule.on != "any" and rule.on != kind:
                continue
            if rule.match not in path or self.requests <= rule.after:
                continue
            if rule.times is not None and self.hits[(i, path)] >= rule.times:
                continue
            if rule.p < 1.0 and self.rng.random() >= rule.p:
                continue
            self.hits[(i, path)] += 1
            self.fired[rule.kind] += 1
            return rule
        return None


class Proxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.plan = Plan()
        self.client = httpx.AsyncClient(timeout=60.0, limits=httpx.Limits(max_connections=256))

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is to be dropped."""
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = [tuple(x.strip() for x in h.split(":", 1)) for h in lines[1:] if ":" in h]
        length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
        body = await reader.readexactly(length) if length else b""
        url = urlsplit(target)
        path = unquote(url.path)
        if path.startswith("/_dev/"):
            await self._send(
                writer, 200, [("Content-Type", "application/json")], self._control(path, body)
            )
            return True
        rule = self.plan.pick(method, path, url.query)
        if method == "GET" and path.lstrip("/").partition("/")[2]:
            asked = next((v for k, v in headers if k.lower() == "range"), "")
            self.plan.gets.append((path, asked))
        kind = rule.kind if rule else ""
        if kind == "throttle":
            kind = self.plan.rng.choice(["500", "503", "slowdown"])
        if kind in _ERRORS:
            status, code, message = _ERRORS[kind]
            xml = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>{message}</Message><Resource>{path}</Resource></Error>"
            ).encode()
            await self._send(writer, status, [("Content-Type", "application/xml")], xml)
            return True
        if kind in ("change", "delete"):
            await self._mutate(kind, path)
        if kind == "delay":
            await asyncio.sleep(rule.seconds if rule else 1.0)
        forward = [(k, v) for k, v in headers if k.lower() not in _HOP]
        answer = await self.client.request(
            method, self.upstream + target, headers=forward, content=body or None
        )
        out = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in _HOP]
        data = answer.content
        if kind in ("reset", "stall") and len(data) > 1 and method == "GET":
            await self._send(writer, answer.status_code, out, data[: len(data) // 2], len(data))
            if kind == "stall":
                await asyncio.sleep(rule.seconds if rule else 30.0)
                return False
            sock = writer.get_extra_info("socket")
            if sock is not None:  # SO_LINGER 0: close() sends a RST, not a FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if kind == "long" and method == "GET":
            await self._send(writer, answer.status_code, out, data, len(data) + 1000)
            return False
        if kind == "slow" and method == "GET" and rule is not None:
            await self._send(writer, answer.status_code, out, b"", len(data))
            for at in range(0, len(data), rule.piece):
                writer.write(data[at : at + rule.piece])
                await writer.drain()
                await asyncio.sleep(rule.seconds)
            return True
        if kind == "corrupt" and method == "GET" and data:
            mangled = bytearray(data)
            mangled[len(mangled) // 2] ^= 0xFF
            await self._send(writer, answer.status_code, out, bytes(mangled))
            return True
        if kind == "short" and method == "GET" and len(data) > 1:
            half = data[: len(data) // 2]
            await self._send(writer, answer.status_code, out, half, len(half))
            return True
        await self._send(writer, answer.status_code, out, data)
        return True

    async def _mutate(self, kind: str, path: str) -> None:
        """Overwrite or delete the object on the upstream server (a signed request)."""
        bucket, key = path.lstrip("/").split("/", 1)
        await asyncio.to_thread(_mutate_upstream, self.upstream, kind, bucket, key)

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        declared: int | None = None,
    ) -> None:
        lines = [f"HTTP/1.1 {status} {httpx.codes.get_reason_phrase(status) or 'Status'}"]
        lines += [f"{k}: {v}" for k, v in headers]
        lines.append(f"Content-Length: {len(body) if declared is None else declared}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()

    def _control(self, path: str, body: bytes) -> bytes:
        if path == "/_dev/plan":
            self.plan = Plan.of(json.loads(body or b"{}"))
        elif path == "/_dev/reset":
            self.plan = Plan.of({"rules": [], "seed": 0})
        stats: dict[str, Any] = {
            "requests": self.plan.requests,
            **{f"fault {k}": v for k, v in self.plan.fired.items()},
            "gets": self.plan.gets,
        }
        return json.dumps(stats).encode()


def _mutate_upstream(upstream: str, kind: str, bucket: str, key: str) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=upstream, region_name="us-east-1")
    if kind == "delete":
        s3.delete_object(Bucket=bucket, Key=key)
        return
    old = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=key, Body=old + b" (changed)")


async def _serve(upstream: str, host: str, port: int) -> None:
    proxy = Proxy(upstream)
    server = await asyncio.start_server(proxy.handle, host, port, limit=1 << 20)
    async with server:
        await server.serve_forever()


class FaultProxy(ChildServer):
    """``with FaultProxy(upstream_url) as proxy: proxy.plan([...], seed=1); proxy.url``."""

    label = "fault proxy"

    def __init__(self, upstream: str, port: int | None = None) -> None:
        super().__init__(port)
        import sys

        self.cmd = [
            sys.executable,
            "-m",
            "dev.servers.faultproxy",
            "--upstream",
            upstream,
            "--port",
            str(self.port),
        ]

    def plan(self, rules: list[dict[str, Any]], seed: int = 0) -> None:
        self.post("/_dev/plan", {"rules": rules, "seed": seed})


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help="URL of the S3-compatible server")
    p.add_argument("--port", type=int, default=5100)
    p.add_argument("--host", default="127.0.0.1")
    a = p.parse_args(argv)
    asyncio.run(_serve(a.upstream, a.host, a.port))


if __name__ == "__main__":
    main()
