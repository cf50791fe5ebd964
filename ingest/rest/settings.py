"""The settings groups of the REST sources (``INGEST_HTTP_*``, ``INGEST_REST_*``,
``INGEST_SHARED_*``, ``INGEST_GITHUB_*``), fields of ``ingest.settings.Settings``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, model_validator

MiB = 1024 * 1024


class HttpSettings(BaseModel):
    """Every REST client's (GitHub and declared sources; ``INGEST_HTTP_*``)."""

    adaptive: bool = Field(
        True,
        description="Find how many requests each host allows in flight (like TCP congestion "
        "control) instead of sending the configured concurrency at once.",
    )
    # 4: with the paced ramp below the window reaches 20 in flight within ~0.3 s anyway,
    # and a host allowing 8 is not sent a burst it refuses (10, TCP's IW10, cost 2 limit
    # answers there before the first refusal could come back).
    initial_window: int = Field(
        4, ge=1, le=256, description="Requests in flight at first, for a host not seen before."
    )
    # A limit answer comes back within one round trip, a page after its whole latency: a
    # new in-flight level opened every 20 ms finds a ceiling of 100 in about two seconds
    # and overshoots a lower one by the levels opened while its refusal travels (one to
    # three on a loaded loopback), not by a burst. Raise it for a far host.
    ramp: float = Field(
        0.02,
        ge=0,
        le=5,
        description="Seconds between two new in-flight levels while a host's limit is unknown "
        "(0: grow only per clean answer).",
    )

    max_page_bytes: int = Field(
        64 * MiB,
        ge=1024,
        description="Bytes of one API page read at most (as it streams in); a longer body is "
        "a failed page, so a hostile or broken API cannot fill the flow's memory.",
    )
    body_deadline: float = Field(
        120.0,
        gt=0,
        le=3600,
        description="Seconds one answer may take in all, from sending the request to its last "
        "byte, redirects included (the per-read timeout alone lets a body dribbled a byte at "
        "a time last for ever); past it the attempt is a timeout, retried as one.",
    )
    max_retry_after: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="Longest Retry-After obeyed, in seconds: an answer asking for longer "
        "fails its page at once, saying what was asked, instead of pausing every request "
        "of the source for that long.",
    )


class GitHubSettings(BaseModel):
    """What a worker holds for GitHub (``INGEST_GITHUB_*``): its token and its API root.
    How a GitHub source pages (state, page size, in-flight cap, rate-limit reserve, waits,
    retries) is declared in the source (``sources/github.yaml``, or ``ingest github``'s
    options and the ``github-pulls`` flow's parameters over the dialect's defaults,
    ``ingest.rest.github.github_source``); retries and timeouts are every REST source's
    (``INGEST_REST_*``)."""

    token: SecretStr | None = Field(None, description="GitHub token (never logged).")
    base_url: str = Field(
        "https://api.github.com",
        description="REST API root; GitHub Enterprise Server uses https://HOST/api/v3. The "
        "worker trusts it for deployed runs (docs/security.md).",
    )

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        """A retired setting is an error naming where its job went, not a value ignored."""
        if isinstance(data, dict):
            for key in data:
                if key in RETIRED_GITHUB:
                    raise ValueError(f"INGEST_GITHUB_{key.upper()}: {RETIRED_GITHUB[key]}")
        return data


# GitHub settings that are gone, and where what they set went. An error rather than a
# deprecated alias: each now lives in the source (a file, an option, a flow parameter) or
# is every REST source's setting, so an alias would set something else than it said (a
# timeout of every source) or be silently outvoted by the source's own value.
_MEASURED = (
    "gone: the page plan measures the host's latency (page 1 probed at two sizes, "
    "ingest.rest.sizing.fit_latency); remove the variable"
)


def _moved(where: str) -> str:
    return f"moved to {where}; remove the variable"


def _declared(key: str, parameter: str, option: str = "") -> str:
    command = f", `ingest github {option}`," if option else ""
    return _moved(
        f"the GitHub source: {key} in sources/github.yaml{command} or the github-pulls "
        f"flow's {parameter} parameter"
    )


def _rest(name: str) -> str:
    return _moved(f"INGEST_REST_{name}, which every REST source, GitHub's included, uses")


RETIRED_GITHUB = {
    "latency_base": _MEASURED,
    "latency_per_item": _MEASURED,
    "state": _declared("resources[0].endpoint.params.state", "state", "--state"),
    "per_page": _declared("client.paginator.page_size", "per_page", "--per-page"),
    "concurrency": _declared("client.concurrency", "concurrency", "--concurrency"),
    "rate_limit_reserve": _declared("client.rate_limit.reserve", "rate_limit_reserve"),
    "max_wait": _declared("client.rate_limit.max_wait", "max_wait"),
    "secondary_backoff": _moved("client.rate_limit.backoff of the GitHub source (default 60)"),
    "secondary_retries": _moved("client.rate_limit.retries of the GitHub source (default 5)"),
    "max_attempts": _rest("MAX_ATTEMPTS"),
    "retry_base": _rest("RETRY_BASE"),
    "retry_cap": _rest("RETRY_CAP"),
    "timeout": _rest("TIMEOUT"),
    "budget_share": _rest("BUDGET_SHARE"),
    "expected_pulls": _rest("EXPECTED_ROWS"),
}


class SharedSettings(BaseModel):
    """Limits shared across workers (``INGEST_SHARED_*``), held on the Prefect server."""

    limits: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Hold each API host's in-flight limit and budget for every process calling "
        "it, as global concurrency limits on the Prefect server: on, off, or auto (on when the "
        "task runner is dask or shared_limit_name is set, and PREFECT_API_URL names a server).",
    )
    limit_name: str | None = Field(
        None,
        description="Name the shared limits start with instead of ingest-api-<host>[-<port>] "
        "(processes that call one API through different addresses share it by this name).",
    )
    limit_block: int = Field(
        8,
        ge=1,
        le=100,
        description="In-flight slots and budget tokens leased per call to the Prefect server.",
    )
    lease_seconds: float = Field(
        60.0,
        ge=60,  # the Prefect server's shortest lease
        description="Lease of the in-flight slots, renewed while the run lasts; a process that "
        "dies gives its slots back when its leases expire.",
    )


class RestSettings(BaseModel):
    """Every REST source's client, GitHub's included (``INGEST_REST_*``)."""

    timeout: float = Field(
        30.0, gt=0, le=600, description="Seconds without an answer before a request is retried."
    )
    max_attempts: int = Field(
        5, ge=1, le=20, description="Attempts per request on 5xx, timeouts, bodies not JSON."
    )
    retry_base: float = Field(
        1.0, ge=0, le=60, description="First retry delay in seconds (doubles, with jitter)."
    )
    retry_cap: float = Field(30.0, ge=0, le=600, description="Longest retry delay in seconds.")
    limit_retries: int = Field(
        8,
        ge=0,
        le=50,
        description="Limit answers (429 ...) one request may take before failing, where the "
        "source's rate_limit.retries does not say (GitHub's says 5).",
    )
    budget_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of an announced budget (above the reserve) that page_size: auto "
        "may plan to spend in one run.",
    )
    expected_rows: int = Field(
        500,
        ge=1,
        description="Rows assumed per listing (GitHub: pull requests per repository) before "
        "a run stored some (page_size: auto, when not probed).",
    )
