"""The one backoff policy: how long to wait after a failed attempt, and how often to try.

Every retry loop of the project (S3 GETs, REST requests, Delta commits that lost a race,
staging writes) waits ``Backoff.delay(n)`` after its ``n``-th failure: capped
exponential growth, ``min(cap, base * 2**(n-1))``, scaled down by a random factor in
``[1 - jitter, 1]``. ``jitter=1`` is "full jitter" (botocore's standard mode, AWS's
advice for many clients retrying at once); ``jitter=0`` waits exactly the ceiling.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Attempt ``n`` (1-based) failing waits ``min(cap, base * 2**(n-1))`` scaled by a
    random factor in ``[1 - jitter, 1]``; after ``max_attempts`` attempts the last error
    stands."""

    max_attempts: int = 5
    base: float = 1.0
    cap: float = 30.0
    jitter: float = 0.5

    def delay(self, failed_attempts: int, rng: Callable[[], float] = random.random) -> float:
        ceiling = min(self.cap, self.base * 2 ** max(0, failed_attempts - 1))
        return ceiling * (1 - self.jitter * rng())

    def retrying(
        self,
        attempt: Callable[[], T],
        retry_on: type[BaseException] | tuple[type[BaseException], ...],
        *,
        what: str,
        sleep: Callable[[float], None] = time.sleep,
        level: int = logging.WARNING,
    ) -> T:
        """``attempt()`` until it returns, waiting ``delay`` after each ``retry_on`` error;
        the error of the last allowed attempt is raised. Each wait is logged with ``what``."""
        for n in range(1, self.max_attempts + 1):
            try:
                return attempt()
            except retry_on as exc:
                if n >= self.max_attempts:
                    raise
                wait = self.delay(n)
                log.log(level, "%s: %s; again in %.2f s", what, exc, wait)
                sleep(wait)
        raise AssertionError("unreachable")  # max_attempts >= 1
