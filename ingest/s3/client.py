"""A run's connection to S3 (``S3Connection``): the boto3 client, the request lanes and
the obstore store of each bucket.

``S3Connection.open`` builds the boto3 client used for listing; from the same session
and settings the connection builds, on first use, the obstore ``S3Store`` the GETs go
through (``ingest.s3.get``), the fast lister (``ingest.s3.rawlist``) and the request
lanes, the threads those GETs run on. Nothing is cached per process: the run holds its
connection (``ingest.context.RunContext``) and closes it at its end.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from obstore.auth.boto3 import Boto3CredentialProvider
from obstore.store import S3Store

from ingest import interrupt
from ingest.aws import block_session
from ingest.s3.rawlist import RawLister, new_lister
from ingest.settings import S3Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

log = logging.getLogger(__name__)


# Frozen credentials obstore reuses before asking the session again (botocore refreshes
# temporary credentials 10-15 minutes before they expire, so 5 minutes stays inside that).
CREDENTIALS_TTL = timedelta(minutes=5)


def _new_client(s3: S3Settings) -> tuple[S3Client, boto3.session.Session]:
    """A boto3 S3 client whose connection pool matches the request concurrency, with the
    credentials of the AwsCredentials block ``s3_credentials_block`` when one is named
    (``ingest.aws.block_session``), else the AWS chain; and its session."""
    config = Config(
        max_pool_connections=s3.concurrency + 4,
        retries={"mode": "standard", "max_attempts": s3.max_attempts},
        connect_timeout=s3.connect_timeout,
        read_timeout=s3.read_timeout,
        tcp_keepalive=True,
        # Checksums only where an operation requires them: botocore's 2025 defaults
        # (when_supported) add CRC trailers to uploads and ChecksumMode to every GET, which
        # several S3-compatible stores refuse. Downloads are checked by ingest.s3.verify.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3={"addressing_style": "path"} if s3.endpoint_url else None,
    )
    session = (
        block_session(s3.credentials_block, used_for="INGEST_S3_CREDENTIALS_BLOCK")
        if s3.credentials_block
        else boto3.session.Session()
    )
    client = session.client(
        "s3",
        endpoint_url=s3.endpoint_url,
        region_name=s3.region or session.region_name or "us-east-1",
        config=config,
    )
    return client, session


class S3Connection:
    """A run's way to S3: the boto3 client (listing, the GET fallback, uploads), and, built
    from it on first use, the obstore store of each bucket (the GETs), the fast lister of
    each bucket (``ingest.rawlist``) and the request lanes every batch of the run shares.

    ``S3Connection.open(settings.s3)`` builds the client from the S3 settings; a connection
    over a client built elsewhere (``S3Connection(client, settings.s3)``, no session: a test's, a
    caller's own) lists and GETs through that client alone. Thread-safe: the run's batch
    tasks share one, and so one pool of keep-alive connections. ``close`` (or ``with``)
    stops the lanes and closes the client's connections.
    """

    def __init__(
        self,
        client: S3Client,
        settings: S3Settings,
        session: boto3.session.Session | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.session = session
        self._stores: dict[str, S3Store | None] = {}
        self._listers: dict[str, RawLister | None] = {}
        self._lanes: RequestLanes | None = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, settings: S3Settings) -> S3Connection:
        """A connection with its own client, built from ``settings`` (the S3 group)."""
        client, session = _new_client(settings)
        return cls(client, settings, session)

    def store(self, bucket: str) -> S3Store | None:
        """The obstore ``S3Store`` of ``bucket`` (see ``_new_store``), or None: the GET
        then goes through ``client.get_object``."""
        try:
            return self._stores[bucket]
        except KeyError:
            pass
        with self._lock:
            if bucket not in self._stores:
                self._stores[bucket] = _new_store(self, bucket)
            return self._stores[bucket]

    def lister(self, bucket: str) -> RawLister | None:
        """The fast ListObjectsV2 path of ``bucket``, or None (then botocore lists)."""
        with self._lock:
            if bucket not in self._listers:
                self._listers[bucket] = (
                    None
                    if self.session is None
                    else new_lister(self.client, self.session, self.settings, bucket)
                )
            return self._listers[bucket]

    @property
    def lanes(self) -> RequestLanes:
        """The connection's request lanes: ``s3_concurrency`` GETs in flight at most,
        across every batch that shares the connection."""
        with self._lock:
            if self._lanes is None:
                self._lanes = RequestLanes(self.settings.concurrency)
            return self._lanes

    def close(self) -> None:
        """Stop the lanes (requests in flight finish) and close the client's connections."""
        with self._lock:
            lanes, self._lanes = self._lanes, None
            listers = [lister for lister in self._listers.values() if lister is not None]
            self._stores.clear()
            self._listers.clear()
        if lanes is not None:
            lanes.pool.shutdown(wait=False, cancel_futures=True)
        for lister in listers:
            lister.http.clear()
        close = getattr(self.client, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> S3Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RequestLanes:
    """The bound on requests in flight of a connection, shared by every batch.

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


def _new_store(conn: S3Connection, bucket: str) -> S3Store | None:
    """The obstore ``S3Store`` of ``bucket`` for a connection that built its client.

    Same credentials (the boto3 session's chain, refreshed through
    ``get_frozen_credentials``), endpoint, region and timeouts as the client; path-style
    addressing for custom endpoints; as many pooled connections as the client; obstore's
    own retries off (``ingest.s3.get._get_obstore`` retries, counting attempts). None for
    a client built elsewhere or a configuration obstore cannot take.
    """
    session, settings, client = conn.session, conn.settings, conn.client
    if session is None or bucket.endswith("--x-s3"):  # S3 Express needs session auth
        return None
    endpoint = settings.endpoint_url
    options: dict[str, Any] = {
        "connect_timeout": timedelta(seconds=settings.connect_timeout),
        "read_timeout": timedelta(seconds=settings.read_timeout),
        # What limits a GET is the read timeout: no byte for that long (headers or body) fails
        # the request, which is then retried or resumed. The whole-request timeout is only a
        # backstop, sized so that one request (at most s3_range_threshold bytes) on a slow but
        # live link is not cut.
        "timeout": timedelta(seconds=settings.request_timeout),
        "pool_max_idle_per_host": str(settings.concurrency + 4),
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
