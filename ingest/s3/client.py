"""The boto3 S3 client, the shared request pool and the obstore store of a client.

``make_client`` builds (and caches per process) the boto3 client used for listing;
``object_store`` builds, from the same session and settings, the obstore ``S3Store``
the GETs go through (``ingest.s3.get``); ``request_lanes`` are the process-wide
threads those GETs run on.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from obstore.auth.boto3 import Boto3CredentialProvider
from obstore.store import S3Store

from ingest import interrupt
from ingest.aws import block_session
from ingest.settings import Settings

log = logging.getLogger(__name__)


# Frozen credentials obstore reuses before asking the session again (botocore refreshes
# temporary credentials 10-15 minutes before they expire, so 5 minutes stays inside that).
CREDENTIALS_TTL = timedelta(minutes=5)

# id(client) -> (boto3 session, settings) of the clients make_client built (they are cached
# for the life of the process, so an id is never reused for another client).
_client_sources: dict[int, tuple[boto3.session.Session, Settings]] = {}
_stores: dict[tuple[int, str], S3Store | None] = {}


_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def make_client(settings: Settings) -> Any:
    """A boto3 S3 client whose connection pool matches the request concurrency, with the
    credentials of the AwsCredentials block ``s3_credentials_block`` when one is named
    (``ingest.aws.block_session``), else the AWS chain.

    Clients are thread-safe and cached per process, so batch tasks running in
    threads share one pool of keep-alive connections.
    """
    key = (
        settings.s3_endpoint_url,
        settings.s3_region,
        settings.s3_concurrency,
        settings.s3_max_attempts,
        settings.s3_connect_timeout,
        settings.s3_read_timeout,
        settings.s3_request_timeout,
        os.environ.get("AWS_CA_BUNDLE"),
        settings.s3_credentials_block,
    )
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            config = Config(
                max_pool_connections=settings.s3_concurrency + 4,
                retries={"mode": "standard", "max_attempts": settings.s3_max_attempts},
                connect_timeout=settings.s3_connect_timeout,
                read_timeout=settings.s3_read_timeout,
                tcp_keepalive=True,
                s3={"addressing_style": "path"} if settings.s3_endpoint_url else None,
            )
            session = (
                block_session(settings.s3_credentials_block, used_for="INGEST_S3_CREDENTIALS_BLOCK")
                if settings.s3_credentials_block
                else boto3.session.Session()
            )
            client = session.client(
                "s3",
                endpoint_url=settings.s3_endpoint_url,
                region_name=settings.s3_region or session.region_name or "us-east-1",
                config=config,
            )
            _clients[key] = client
            _client_sources[id(client)] = (session, settings)
        return client


_lanes: dict[int, RequestLanes] = {}


class RequestLanes:
    """The process-wide bound on requests in flight, shared by every batch.

    Up to ``limit`` *lanes* (jobs on a thread pool of that size) each take the next
    queued request until the queue is empty, then end. A batch queues its requests
    (``add``) and starts lanes only while fewer than ``limit`` run, so a steady stream
    of batches keeps the same lanes busy across batch boundaries instead of handing the
    pool dozens of new jobs per batch (at 128 in flight and 250 objects a batch, those
    hand-offs were a tenth of the client's Python time). Requests run in the order
    queued: the oldest batch finishes first.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pool = ThreadPoolExecutor(limit, thread_name_prefix="s3-get")
        self._jobs: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._running = 0

    @property
    def stopped(self) -> bool:
        """The run was interrupted (``ingest.interrupt``): a job not yet started reports
        itself not fetched instead of sending its request; those in flight finish."""
        return interrupt.requested()

    def add(self, jobs: Iterable[Callable[[], None]]) -> None:
        """Queue ``jobs`` (each catches its own errors) and start the lanes they need."""
        with self._lock:
            self._jobs.extend(jobs)
            start = min(self.limit - self._running, len(self._jobs))
            self._running += start
        for _ in range(start):
            self.pool.submit(self._lane)

    def _lane(self) -> None:
        jobs, lock = self._jobs, self._lock
        while True:
            with lock:
                if not jobs:
                    self._running -= 1
                    return
                job = jobs.popleft()
            try:
                job()
            except BaseException:  # a job reports its own outcome; never lose the lane
                log.exception("request job failed outside its own handler")


def request_lanes(concurrency: int) -> RequestLanes:
    """The process-wide request lanes for ``concurrency`` requests in flight."""
    with _clients_lock:
        lanes = _lanes.get(concurrency)
        if lanes is None:
            lanes = _lanes[concurrency] = RequestLanes(concurrency)
        return lanes


def object_store(client: Any, bucket: str) -> S3Store | None:
    """The obstore ``S3Store`` of ``bucket`` for a client built by ``make_client``.

    Same credentials (the boto3 session's chain, refreshed through
    ``get_frozen_credentials``), endpoint, region and timeouts as the client; path-style
    addressing for custom endpoints; as many pooled connections as the client; obstore's
    own retries off (``ingest.s3.get._get_obstore`` retries, counting attempts). None for
    a client built elsewhere or a configuration obstore cannot take: the GET then goes
    through ``client.get_object``.
    """
    key = (id(client), bucket)
    try:
        return _stores[key]
    except KeyError:
        pass
    with _clients_lock:
        if key not in _stores:
            _stores[key] = _new_store(client, bucket)
        return _stores[key]


def _new_store(client: Any, bucket: str) -> S3Store | None:
    source = _client_sources.get(id(client))
    if source is None or bucket.endswith("--x-s3"):  # S3 Express needs session auth
        return None
    session, settings = source
    endpoint = settings.s3_endpoint_url
    options: dict[str, Any] = {
        "connect_timeout": timedelta(seconds=settings.s3_connect_timeout),
        "read_timeout": timedelta(seconds=settings.s3_read_timeout),
        # What limits a GET is the read timeout: no byte for that long (headers or body) fails
        # the request, which is then retried or resumed. The whole-request timeout is only a
        # backstop, sized so that one request (at most s3_range_threshold bytes) on a slow but
        # live link is not cut.
        "timeout": timedelta(seconds=settings.s3_request_timeout),
        "pool_max_idle_per_host": str(settings.s3_concurrency + 4),
    }
    if endpoint and urlsplit(endpoint).scheme == "http":
        options["allow_http"] = True
    bundle = ca_bundle(session)
    if bundle:  # AWS_CA_BUNDLE or the profile's ca_bundle: botocore trusts it, so must obstore
        options["root_certificate"] = bundle
    config: dict[str, Any] = {"region": client.meta.region_name}
    if endpoint:
        config["endpoint"] = endpoint
        config["virtual_hosted_style_request"] = False
    try:
        if session.get_credentials() is None:
            return None  # no credentials: client.get_object raises the usual error
        return S3Store(
            bucket,
            config=config,  # type: ignore[arg-type]
            client_options=options,  # type: ignore[arg-type]
            retry_config={"max_retries": 0},
            credential_provider=Boto3CredentialProvider(session, ttl=CREDENTIALS_TTL),
        )
    except Exception as exc:  # an unusual configuration: let botocore handle it
        log.warning("s3://%s: no obstore store (%s); GETs go through boto3", bucket, exc)
        return None


def ca_bundle(session: boto3.session.Session) -> str | None:
    """The PEM text of the CA bundle botocore uses for this session (``AWS_CA_BUNDLE`` or
    ``ca_bundle`` of the profile), None when it uses the default trust store."""
    path = session._session.get_config_variable("ca_bundle")
    if not path:
        return None
    with open(path, encoding="ascii") as f:
        return f.read()


def client_source(client: Any) -> tuple[boto3.session.Session, Settings] | None:
    """The boto3 session and settings ``make_client`` built ``client`` from (None for a
    client built elsewhere)."""
    return _client_sources.get(id(client))
