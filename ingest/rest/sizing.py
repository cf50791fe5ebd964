"""Budget-aware page sizes: the page size of a listing when none is declared.

Every page costs one request of the budget; smaller pages answer faster and run
in parallel. Two ways to choose, for GitHub and every declared REST source alike:

* ``plan_per_page``, once the listings' sizes are known: a **probe** (the first
  page asked with one item, ``PROBE_SIZE``) tells how many items a listing holds
  (GitHub's ``rel="last"`` page number) and how fast the host answers. The
  latency model is scaled to what the probes showed (``LatencyModel.calibrated``),
  and each page size is timed by the in-flight window's own model
  (``AdaptiveWindow.finish_seconds``: the levels open now, the paced ramp while the
  host's limit is unknown, a known ceiling's waves). ``SizePlanner`` gathers the
  probes of a run's listings and plans one size for all of them. The probe costs
  one request per listing, and page 1 is asked again at the planned size.
* ``choose_per_page``, before anything is known: the same trade by a simpler model
  (every listing's first page in parallel, then waves of ``concurrency``) over the
  expected sizes (stored counts, or an assumption).

Both pick the fastest size among those whose request count fits the budget the API
announced (rate-limit headers), and then the largest size within ``SIZE_TOLERANCE``
of that time: fewer requests for about the same wall time. That tolerance is the
trade of requests against seconds, stated once here; every plan says what it chose
and what the fastest would have cost (``SizePlan.describe``).
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PER_PAGE_MAX = 100  # GitHub caps per_page at 100, as most APIs do
PER_PAGE_MIN = 10  # below this the request count grows faster than latency shrinks
PROBE_SIZE = 1  # items asked for by a probe: its answer is fast and its page count exact
# A larger size is taken when its modelled time is within this share of the fastest: the
# price of a request in seconds (at 480 items: 12 requests of 40 in 0.54 s rather than 24
# of 20 in 0.50 s).
SIZE_TOLERANCE = 0.1


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Seconds one page of ``items`` takes: ``base_s + per_item_s * items``."""

    base_s: float
    per_item_s: float

    def seconds(self, items: int) -> float:
        return self.base_s + self.per_item_s * items

    def calibrated(self, samples: Sequence[tuple[int, float]]) -> LatencyModel:
        """The model scaled to answers seen, ``(items, seconds)`` each: by the median of
        their ratios to the model. Its shape (how latency grows per item) stays the
        configured one: answers of one size cannot tell the two parts apart."""
        ratios = [s / self.seconds(n) for n, s in samples if s > 0 and self.seconds(n) > 0]
        if not ratios:
            return self
        scale = statistics.median(ratios)
        return LatencyModel(self.base_s * scale, self.per_item_s * scale)


@dataclass(frozen=True, slots=True)
class SizePlan:
    """A chosen page size, its requests and modelled seconds, beside the fastest one."""

    per_page: int
    requests: int
    seconds: float
    fastest_per_page: int
    fastest_requests: int
    fastest_seconds: float
    items: int

    def describe(self) -> str:
        """``per_page 40 for 480 items: 12 requests, ~0.54 s (fastest: 20, 24 requests,
        ~0.50 s)``, for the logs and the run summary."""
        text = (
            f"per_page {self.per_page} for {self.items} items: {self.requests} requests, "
            f"~{self.seconds:.2f} s by the model"
        )
        if self.fastest_per_page != self.per_page:
            text += (
                f" (fastest: {self.fastest_per_page}, {self.fastest_requests} requests, "
                f"~{self.fastest_seconds:.2f} s)"
            )
        return text


def _pick(
    requests: Callable[[int], int],
    seconds: Callable[[int], float],
    budget: int | None,
    tolerance: float,
    items: int,
) -> SizePlan:
    """The largest size within ``tolerance`` of the fastest among those fitting ``budget``;
    100 (the fewest requests) when none fits."""
    fits = [
        p for p in range(PER_PAGE_MIN, PER_PAGE_MAX + 1) if budget is None or requests(p) <= budget
    ]
    if not fits:
        n, t = requests(PER_PAGE_MAX), seconds(PER_PAGE_MAX)
        return SizePlan(PER_PAGE_MAX, n, t, PER_PAGE_MAX, n, t, items)
    times = {p: seconds(p) for p in fits}
    fastest = min(fits, key=lambda p: (times[p], -p))
    chosen = max(p for p in fits if times[p] <= times[fastest] * (1 + tolerance))
    return SizePlan(
        chosen,
        requests(chosen),
        times[chosen],
        fastest,
        requests(fastest),
        times[fastest],
        items,
    )


def estimate_seconds(
    per_page: int, expected: Sequence[int], concurrency: int, base_s: float, per_item_s: float
) -> float:
    """Wall time of a run by a simple model: every repository's first page in
    parallel, then the rest in waves of ``concurrency``; a page takes
    ``base_s + per_item_s * per_page``."""
    firsts = len(expected)
    rest = sum(max(0, math.ceil(n / per_page) - 1) for n in expected)
    waves = math.ceil(firsts / concurrency) + math.ceil(rest / concurrency)
    return waves * (base_s + per_item_s * per_page)


def choose_per_page(
    expected: Sequence[int],
    *,
    concurrency: int,
    budget: int | None,
    base_s: float,
    per_item_s: float,
) -> int:
    """The page size when none is given and nothing is known yet: the fastest by
    ``estimate_seconds`` among those whose request count fits ``budget``; larger pages
    when within ``SIZE_TOLERANCE`` of the fastest. When nothing fits, 100 (the fewest
    requests), and the governor stops cleanly at the reserve.

    ``expected`` is the number of items expected per listing (stored counts from
    earlier runs, or an assumption); ``budget`` the requests this run may spend (None:
    unlimited).
    """
    expected = [max(1, n) for n in expected] or [1]
    return _pick(
        lambda p: sum(math.ceil(n / p) for n in expected),
        lambda p: estimate_seconds(p, expected, concurrency, base_s, per_item_s),
        budget,
        SIZE_TOLERANCE,
        sum(expected),
    ).per_page


def plan_per_page(
    totals: Sequence[int],
    *,
    finish: Callable[[int, float], float],
    latency: LatencyModel,
    budget: int | None,
    recheck: bool = False,
    tolerance: float = SIZE_TOLERANCE,
) -> SizePlan:
    """The page size of listings whose sizes are known (``totals``, items each), every
    page of them (page 1 included) asked for at once through one window.

    A size's time is ``finish(requests, seconds_per_page)`` (the window's model,
    ``AdaptiveWindow.finish_seconds``) with the page's seconds from ``latency`` (scaled
    to what the probes showed); with ``recheck``, plus one round trip without items
    when a listing takes more than one page (the GitHub sync asks page 1 again at the
    end, to see whether the listing moved while it was read). Sizes whose requests do
    not fit ``budget`` are out.
    """
    totals = [max(0, n) for n in totals] or [0]
    largest = max(totals)

    def requests(p: int) -> int:
        return sum(max(1, math.ceil(n / p)) for n in totals)

    def seconds(p: int) -> float:
        t = finish(requests(p), latency.seconds(min(p, largest)))
        return t + latency.seconds(0) if recheck and largest > p else t

    return _pick(requests, seconds, budget, tolerance, sum(totals))


class SizePlanner:
    """One page size for the listings of a run whose size is automatic, planned when
    every one of them has been probed (or has left: its probe failed).

    Each listing reports its probe (``size_for``: the items the listing holds, and the
    probe's items and seconds) and waits; the last report plans the size for all of
    them at once (``plan_per_page``), with the budget as it stands then and the window
    as it is then. A listing that will not report calls ``leave``.

    Args:
        listings: how many listings will report or leave.
        latency: the configured latency model, scaled by the probes' answers.
        finish: the window's model (``AdaptiveWindow.finish_seconds``).
        budget: the requests the run may still spend when the plan is made (None:
            unlimited).
        expected: items assumed for a listing whose probe could not tell its size.
        recheck: listings of several pages are looked at again at the end
            (``plan_per_page``).
    """

    def __init__(
        self,
        listings: int,
        *,
        latency: LatencyModel,
        finish: Callable[[int, float], float],
        budget: Callable[[], int | None],
        expected: int,
        recheck: bool = False,
    ) -> None:
        self._waiting = listings
        self._recheck = recheck
        self.latency = latency
        self._finish = finish
        self._budget = budget
        self._expected = expected
        self._totals: list[int] = []
        self._samples: list[tuple[int, float]] = []
        self._ready = asyncio.Event()
        self.plan: SizePlan | None = None
        if listings <= 0:
            self._ready.set()

    async def size_for(self, total: int | None, probe_items: int, seconds: float) -> int:
        """Report one listing's probe; the planned page size once every listing reported."""
        self._totals.append(self._expected if total is None else total)
        self._samples.append((probe_items, seconds))
        self._arrive()
        await self._ready.wait()
        assert self.plan is not None
        return self.plan.per_page

    def leave(self) -> None:
        """A listing that will not report (its probe failed)."""
        self._arrive()

    def _arrive(self) -> None:
        self._waiting -= 1
        if self._waiting > 0 or self._ready.is_set():
            return
        if self._totals:
            self.latency = self.latency.calibrated(self._samples)
            self.plan = plan_per_page(
                self._totals,
                finish=self._finish,
                latency=self.latency,
                budget=self._budget(),
                recheck=self._recheck,
            )
        self._ready.set()
