"""What an API does its own way, handed to the engine as one object, as dlt hands in
paginator and auth objects: ``Dialect``. Its base class is the plain default of every
API that declares none; GitHub's (``ingest.rest.github.GitHub``) is handed in by the
caller that knows the source (``ingest.rest.dialects.dialect_of``), so the engine
(``ingest.rest.run``, ``engine``, ``client`` ...) never imports it.

A dialect answers, for one source:

* ``client_setup``: its headers, credentials and who the credentials are (the plain
  one: the source's ``auth``); the timeout and retries are every source's (the
  ``rest_*`` settings, the source's ``rate_limit.retries``);
* ``load_state``: what it keeps between runs beyond the engine's own state (GitHub: the
  repositories' page ETags and watermarks); the plain one keeps nothing more;
* ``start``: the hooks of one run (``Run``), or None for the engine's plain paging.

``Run`` is what ``ingest.rest.run.SourceRun`` calls where a dialect pages differently:
the listings of a resource, each listing's start, its probes, first URL, page fetch,
last look and stored result, and the run's summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ingest.rest.auth import Credentials, SecretLoader, credentials
from ingest.rest.ratelimit import RetryPolicy

if TYPE_CHECKING:
    from ingest.rest.client import RestClient
    from ingest.rest.config import RestConfig
    from ingest.rest.engine import Listing, Page
    from ingest.rest.records import ApiRequest, RestSummary
    from ingest.rest.shared import SharedLimits
    from ingest.rest.source import Resource, Source
    from ingest.storage.location import LakeLocation


@dataclass(frozen=True, slots=True)
class ClientSetup:
    """How the client of a source talks to its API."""

    credentials: Credentials
    headers: dict[str, str]
    timeout: float
    retry: RetryPolicy
    limit_retries: int
    who: str  # whose access a 403/404 speaks of


@dataclass(frozen=True, slots=True)
class RunStart:
    """What a dialect's ``start`` is given of one run of a source."""

    config: RestConfig
    source: Source
    run_id: str
    state: Any  # what the dialect's load_state read
    full_refresh: bool


class Run:
    """One run's hooks of a dialect (see the module doc); ``SourceRun`` calls them for
    each listing. The engine's own paging is one too (``ingest.rest.run``'s plain run)."""

    # a malformed page is the listing's error (else only the reason it stopped)
    malformed_is_error = False
    # a paginator or data_selector the file leaves out is detected from the first answer
    # (dlt's rule); a dialect pages by its own convention
    detects_paginator = False

    def listings(self, resource: Resource, table: str) -> list[Listing] | None:
        """The listings of ``resource``; None: the engine's (one, or one per parent)."""
        return None

    def open(self, listing: Listing) -> None:
        """The listing's start: watermark, page size, the dialect's state (``own``)."""

    def newest_first(self, listing: Listing) -> bool:
        """Whether paging may stop at the first page older than the watermark."""
        return False

    async def probe(self, client: RestClient, listing: Listing) -> list[str] | None:
        """Requests before the walk; the page URLs known from them, or None when the
        probe failed as a first page would (the listing's outcome set)."""
        return []

    def first_url(self, listing: Listing) -> str:
        raise NotImplementedError

    async def fetch(self, client: RestClient, listing: Listing, url: str, page_no: int) -> Page:
        raise NotImplementedError

    async def close(self, client: RestClient, listing: Listing) -> None:
        """After the walk of a listing that did not fail."""

    async def done(self, client: RestClient, listing: Listing) -> None:
        """After every listing, whatever its outcome; a dialect that stores each listing
        as it ends does it here."""

    async def resource_done(self, resource: Resource, table: str, listings: list[Listing]) -> None:
        """After every listing of ``resource``."""

    async def stage(self, listings: Sequence[Listing]) -> None:
        """At the end of the run (also when it failed): stage what ``done`` did not."""

    def unstored(self, client: RestClient) -> Sequence[ApiRequest]:
        """The run's requests not yet staged by ``done``."""
        return client.requests

    def summary(
        self, client: RestClient, listings: Sequence[Listing], shared: SharedLimits | None
    ) -> RestSummary | None:
        """The run's summary (``shared``: the cluster's limits it ran under); None: the
        engine's."""
        return None


class Dialect:
    """The plain dialect: an API that declares nothing of its own."""

    # the engine's state of the listings (watermarks, rows per listing) is read before a
    # run; a dialect that keeps its own says False
    engine_state = True

    # sent with every request (a source's own headers over them)
    headers: ClassVar[dict[str, str]] = {"Accept": "application/json"}
    who = "these credentials"  # whose access a 403/404 speaks of

    def credentials(
        self,
        config: RestConfig,
        source: Source,
        load_block: SecretLoader | None,
        token: str | None,
    ) -> Credentials:
        """The source's credentials (``token``: one a caller already holds)."""
        return credentials(source.client.auth, load_block)

    def client_setup(
        self,
        config: RestConfig,
        source: Source,
        load_block: SecretLoader | None,
        token: str | None,
    ) -> ClientSetup:
        """The client of ``source``: the dialect's credentials, headers and ``who``, the
        ``rest_*`` settings' timeout and retries, the source's ``rate_limit.retries``."""
        declared, rest = source.client.rate_limit.retries, config.rest
        return ClientSetup(
            credentials=self.credentials(config, source, load_block, token),
            headers={**self.headers, **source.client.headers},
            timeout=rest.timeout,
            retry=RetryPolicy(
                max_attempts=rest.max_attempts, base=rest.retry_base, cap=rest.retry_cap
            ),
            limit_retries=rest.limit_retries if declared is None else declared,
            who=self.who,
        )

    def load_state(self, location: LakeLocation, source: Source, full_refresh: bool) -> Any:
        """What the dialect keeps between runs; the plain one: nothing."""
        return None

    async def start(self, client: RestClient, run: RunStart) -> Run | None:
        """The run's hooks; None: the engine pages the source itself."""
        return None


PLAIN = Dialect()
