"""The source's HTTP client splits its connections into small pools
(``ingest.rest.transport.ShardedTransport``): as many requests in flight as one pool of the
same size, each pool given its open requests back, against a real server on loopback."""

from __future__ import annotations

import asyncio

from dev.servers.github import DevGitHub
from ingest.rest.transport import SHARD_CONNECTIONS, ShardedTransport, make_http

TOKEN = "ghp_" + "PoolTokenValue0123456789abcdefABCDEFG"  # fake


def test_pools_hold_the_whole_concurrency_in_flight_and_release_every_request() -> None:
    concurrency = 5 * SHARD_CONNECTIONS
    with DevGitHub(repos={"o/r": 40}, token=TOKEN, latency_base_ms=300) as server:

        async def go() -> tuple[list[int], list[int], list[int]]:
            http = make_http(
                server.url,
                headers={"Authorization": f"Bearer {TOKEN}"},
                concurrency=concurrency,
                timeout=10,
            )
            transport = http._transport
            assert isinstance(transport, ShardedTransport)
            async with http:
                pages = await asyncio.gather(
                    *(
                        http.get(f"repos/o/r/pulls?state=all&per_page=1&page={n}")
                        for n in range(1, concurrency + 1)
                    )
                )
                after_burst = list(transport.open)
                # one after another: the first pool each time (its connection reused)
                for n in (1, 2, 3):
                    await http.get(f"repos/o/r/pulls?state=all&per_page=1&page={n}")
                connections = [len(p._pool.connections) for p in transport.pools]
            return [p.json()[0]["number"] for p in pages], after_burst, connections

        numbers, after_burst, connections = asyncio.run(go())
        stats = server.stats()
    assert numbers == list(range(1, concurrency + 1))
    assert stats["max_in_flight"] == concurrency  # no pool held a request back
    assert after_burst == [0] * 5
    assert connections == [SHARD_CONNECTIONS] * 5  # each pool opened its share, no more


def test_a_small_client_keeps_httpx_s_own_pool() -> None:
    http = make_http("http://127.0.0.1:9/", headers={}, concurrency=SHARD_CONNECTIONS, timeout=1)
    assert not isinstance(http._transport, ShardedTransport)
