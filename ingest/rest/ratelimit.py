"""Rate-limit protocols (GitHub's ``x-ratelimit-*``, the IETF ``RateLimit-*`` fields),
and the one retry policy for 5xx and timeouts.

Retry layers, one per failure kind (see ``ingest.rest.client``):

1. ``RateLimitGovernor`` gates every request on the primary budget read from
   ``x-ratelimit-*`` headers: a request is sent only while ``remaining``
   minus the requests already in flight stays above the reserve, so
   ``remaining`` never falls below it. When the budget is spent it waits
   for ``x-ratelimit-reset`` if that is within ``max_wait``, otherwise it
   raises ``RateLimitStop`` and the run stops cleanly. Secondary limits
   (403/429 with ``Retry-After``, or without it) pause *all* requests:
   ``Retry-After`` seconds, else ``secondary_backoff`` doubling per
   consecutive hit. How many requests may be in flight afterwards is the
   adaptive window's business (``ingest.rest.window``), not the governor's.
2. ``RetryPolicy`` retries 5xx answers, timeouts and broken connections of
   one request: capped exponential backoff with full jitter.
3. Prefect task retries are not used for paging: a page that fails after
   its retries becomes an ``api_requests`` row with its error, and the
   repository's watermark is not advanced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ingest.backoff import Backoff
from ingest.rest.errors import RateLimitStop

if TYPE_CHECKING:
    from ingest.rest.shared import SharedBudget

log = logging.getLogger(__name__)


# 5xx answers and timeouts are retried with the project's one backoff policy.
RetryPolicy = Backoff


@dataclass(slots=True)
class Budget:
    """The primary limit of one resource (``core``, ``search`` ...), as last seen."""

    limit: int
    remaining: int
    used: int
    reset: float  # epoch seconds

    def reset_in(self, now: float) -> float:
        return self.reset - now


def parse_budget(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> tuple[str, Budget] | None:
    """The budget a response announces, or None when it announces none.

    Reads GitHub's ``x-ratelimit-limit/-remaining/-used/-reset/-resource`` (reset
    in epoch seconds) and the IETF draft's ``ratelimit-limit/-remaining/-reset``
    (reset in seconds from now); a reset below 10^9 is read as seconds from now
    whichever the prefix, as many APIs send it so.
    """
    for prefix in ("x-ratelimit-", "ratelimit-"):
        try:
            remaining = int(headers[prefix + "remaining"])
            limit_text = str(headers.get(prefix + "limit", remaining))
            limit = int(limit_text.split(",")[0].split(";")[0])
            used = int(headers.get(prefix + "used", max(0, limit - remaining)))
            reset = float(headers.get(prefix + "reset", 0))
        except (KeyError, ValueError):
            continue
        if 0 < reset < 1e9:
            reset = float(round(now() + reset))
        return headers.get(prefix + "resource", "core"), Budget(limit, remaining, used, reset)
    return None


class RateLimitGovernor:
    """Admits requests while the primary budget allows; pauses on secondary limits.

    One governor is shared by every request of a run (all repositories), on
    one event loop.

    Args:
        reserve: requests to leave unspent; capped at a tenth of the limit so
            that unauthenticated runs (60/hour) can still make progress.
        max_wait: longest wait, in seconds, for the primary limit to reset;
            beyond it the run stops cleanly with ``RateLimitStop``.
        secondary_backoff: first pause, in seconds, after a secondary limit
            without ``Retry-After`` (GitHub asks for at least 60); doubles per
            consecutive hit.
        clock: wall clock in epoch seconds (``x-ratelimit-reset`` is epoch).
        shared: the cluster's budget (``ingest.rest.shared``): a request is admitted
            only with one of its tokens too, so processes calling the same host
            together never spend into the reserve.
    """

    def __init__(
        self,
        *,
        reserve: int = 100,
        max_wait: float = 900.0,
        secondary_backoff: float = 60.0,
        resource: str = "core",
        clock: Callable[[], float] = time.time,
        shared: SharedBudget | None = None,
    ) -> None:
        self.shared = shared
        self.reserve = reserve
        self.max_wait = max_wait
        self.secondary_backoff = secondary_backoff
        self.resource = resource
        self.clock = clock
        self.budget: Budget | None = None
        self.unlimited = False  # rate limiting disabled (some GitHub Enterprise servers)
        self.pending = 0
        # requests admitted together while the budget is unknown: 1, or the probes a
        # dialect sends at once (each at most one request spent past an unknown budget)
        self.learning = 1
        self.paused_until = 0.0  # time.monotonic()
        self.secondary_hits = 0
        self._strikes = 0
        self._cond = asyncio.Condition()

    @property
    def effective_reserve(self) -> int:
        if self.budget is None:
            return self.reserve
        return min(self.reserve, self.budget.limit // 10)

    def spendable(self, share: float, remaining: int | None = None) -> int | None:
        """The requests a run may plan to spend: ``share`` of those above the reserve, of
        ``remaining`` when given, else of the budget last seen (None: no budget announced,
        or no rate limit)."""
        if remaining is None:
            if self.unlimited or self.budget is None:
                return None
            remaining = self.budget.remaining
        return max(1, int(max(0, remaining - self.effective_reserve) * share))

    async def acquire(self) -> None:
        """Wait until one more request may be sent; raise ``RateLimitStop`` when it may not."""
        async with self._cond:
            while True:
                pause = self.paused_until - time.monotonic()
                if pause > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._cond.wait(), timeout=pause)
                    continue
                if self.unlimited:
                    break
                budget = self.budget
                if budget is None:  # not known yet: one request at a time learns it
                    # (``learning`` at a time without a shared budget: probes sent together)
                    if self.pending < (self.learning if self.shared is None else 1):
                        spent_reset = None
                        if self.shared is not None:
                            spent_reset = await self.shared.before_learning(self.clock())
                        if spent_reset is None:
                            break
                        wait = spent_reset - self.clock() + 1.0
                        if wait > self.max_wait:
                            raise RateLimitStop(
                                "primary rate limit: spent by the processes sharing it; "
                                f"resets in {wait:.0f} s, beyond max_wait {self.max_wait:.0f} s",
                                reset_at=spent_reset,
                            )
                        self.paused_until = time.monotonic() + wait
                        continue
                    await self._cond.wait()
                    continue
                above = budget.remaining - self.pending - self.effective_reserve
                # with a shared budget, a token too (none: the cluster spent the window's)
                if above > 0 and (
                    self.shared is None or await self.shared.take(above, budget.reset)
                ):
                    break
                if self.pending:  # answers in flight may show a reset
                    await self._cond.wait()
                    continue
                wait = budget.reset_in(self.clock()) + 1.0
                if wait <= 1.0:  # the window has reset: learn the new budget
                    self.budget = None
                    continue
                reset_at = datetime.fromtimestamp(budget.reset, UTC).strftime("%H:%M:%S UTC")
                if wait > self.max_wait:
                    spent = " (spent by the processes sharing it)" if above > 0 else ""
                    raise RateLimitStop(
                        f"primary rate limit: {budget.remaining} of {budget.limit} requests left "
                        f"(reserve {self.effective_reserve}){spent}; resets at {reset_at}, "
                        f"in {wait:.0f} s, beyond max_wait {self.max_wait:.0f} s",
                        reset_at=budget.reset,
                    )
                log.warning("primary rate limit reached; waiting %.0f s until %s", wait, reset_at)
                self.paused_until = time.monotonic() + wait
                self.budget = None
            self.pending += 1

    async def release(self, headers: Mapping[str, str] | None) -> None:
        """Account for an answered (or failed) request and read its headers."""
        async with self._cond:
            self.pending -= 1
            if headers is not None:
                self.observe(headers)
            self._cond.notify_all()

    def observe(self, headers: Mapping[str, str]) -> None:
        parsed = parse_budget(headers, self.clock)
        if parsed is None:
            if self.budget is None:  # answers without a budget: rate limiting is disabled
                self.unlimited = True
            return
        resource, seen = parsed
        if resource != self.resource:
            return
        self.unlimited = False
        current = self.budget
        if current is None or seen.reset > current.reset:  # first sight, or a new window
            self.budget = seen
        elif seen.reset == current.reset and seen.remaining < current.remaining:
            self.budget = seen  # answers arrive out of order; the lowest is the latest

    async def secondary_limit(self, retry_after: float | None) -> float:
        """Pause every request after a secondary limit for exactly ``Retry-After``
        seconds (else the doubling backoff); returns the pause in seconds.

        Answers to requests that were in flight together are one burst: only
        the first one escalates the backoff.
        """
        async with self._cond:
            self.secondary_hits += 1
            now = time.monotonic()
            if self.paused_until > now:  # another answer of the same burst
                return self.paused_until - now
            if retry_after is not None:
                pause = retry_after
            else:
                self._strikes += 1
                # Doubling per strike, without jitter: every request of the process waits
                # on this one pause, so there is nobody to spread out.
                pause = Backoff(base=self.secondary_backoff, cap=math.inf, jitter=0).delay(
                    self._strikes
                )
            self.paused_until = now + pause
            self._cond.notify_all()
        log.warning("rate limit answer; pausing all requests for %.2f s", pause)
        return pause

    def succeeded(self) -> None:
        """A request went through: the next secondary limit starts the backoff afresh."""
        self._strikes = 0

    def primary_exhausted(self) -> None:
        """A 403/429 with ``remaining: 0`` (the headers were observed on release)."""
        if self.budget is not None:
            self.budget.remaining = 0
