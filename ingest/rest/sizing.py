"""Page sizes and requests in flight from measured latency: the field report's lesson
(a 10-item page answered ~7x faster than a 100-item one; concurrent small pages were 12x
faster than sequential large ones) as code.

A page costs ``base_s + per_item_s * items`` seconds and one request of the budget.
Two ways to choose:

* ``plan_pages``, once the listings' sizes are known: **probes** (page 1 asked at two
  small sizes at once, ``PROBE_SIZES``) tell how many items a listing holds (GitHub's
  ``rel="last"`` page number of the one-item answer) and, by their two latencies, a
  page's fixed time and its time per item (``fit_latency``, least squares; answers of
  one size only scale the configured model). Every page size from 1 to 100 is timed
  with every page asked for at once in waves of as many requests in flight as the host
  allows (``HostLimits``: documented, as GitHub's 100 in flight and 900 requests a
  minute, or found by the window), the requests past a minute's allowance waiting for
  the next minute (``plan_seconds``); the soonest whose requests fit the budget wins,
  and of those within ``PLAN_TOLERANCE`` the one of fewest requests. The plan names the
  in-flight count too, to which the window is opened at once (``AdaptiveWindow.admit``).
  ``SizePlanner`` gathers the probes of a run's listings and plans for all of them;
  the plan and the figures behind it go into the run's summary (``PagePlan``).
  Every request also costs the client CPU (building it, httpx and its pool, reading
  and parsing the answer), and the event loop does that one request at a time: ``n``
  requests cost ``n * cpu_s`` however many are in flight (``LatencyModel.cpu_s``,
  measured as the event loop's CPU over the probes, ``SizePlanner``). Without that term
  ~100 requests at once answered far later than the model said on 2 cores, where
  fewer, larger pages finish sooner (``benchmarks/github.md``). A listing whose pages
  cannot be asked for at once (a cursor, no announced total) reads them one after
  another (``parallel=False``): there larger pages win.
* ``choose_per_page``, before anything is known: the same trade by a simpler model
  (every listing's first page in parallel, then waves of ``concurrency``) over the
  expected sizes (stored counts, or an assumption) and the configured latency model,
  picking the largest size within ``SIZE_TOLERANCE`` of the fastest.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PER_PAGE_MAX = 100  # GitHub caps per_page at 100, as most APIs do
PER_PAGE_MIN = 10  # below this the request count grows faster than latency shrinks
PROBE_SIZE = 1  # items asked for by a probe: its answer is fast and its page count exact
# The probes of a listing, sent together: two sizes, so that a page's fixed time and its
# time per item can be told apart, the larger small so that waiting for it costs little
# (at 260 ms + 44 ms an item: 392 ms against 304 ms); one size twice, so that the host's
# noise shows (``fit_latency``). Three requests of the budget.
PROBE_SIZES = (PROBE_SIZE, PROBE_SIZE, 3)
# Of plans within this share of the fastest, the one of fewest requests: closer than the
# model can tell (the probes' noise), not a trade of seconds for budget.
PLAN_TOLERANCE = 0.05
# A larger size is taken when its modelled time is within this share of the fastest: the
# price of a request in seconds (at 480 items: 12 requests of 40 in 0.54 s rather than 24
# of 20 in 0.50 s).
SIZE_TOLERANCE = 0.1


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Seconds one page of ``items`` takes on the wire: ``base_s + per_item_s * items``;
    and the client CPU one request costs, ``cpu_s``, which requests in flight do not
    share: the event loop spends it one request after another."""

    base_s: float
    per_item_s: float
    noise_s: float = 0.0  # per item: what the answers it was fitted to could not resolve
    cpu_s: float = 0.0  # client CPU a request costs (sending it, reading its answer)

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
        return LatencyModel(self.base_s * scale, self.per_item_s * scale, cpu_s=self.cpu_s)


# The latency assumed before any answer (a plan made up front, ``choose_per_page``) and
# the shape scaled to answers of one size (``fit_latency``): 80 ms a page + 8 ms an item.
PRIOR = LatencyModel(0.08, 0.008)


def _pick(
    requests: Callable[[int], int], seconds: Callable[[int], float], budget: int | None
) -> int:
    """The largest size within ``SIZE_TOLERANCE`` of the fastest among those fitting
    ``budget``; 100 (the fewest requests) when none fits."""
    fits = [
        p for p in range(PER_PAGE_MIN, PER_PAGE_MAX + 1) if budget is None or requests(p) <= budget
    ]
    if not fits:
        return PER_PAGE_MAX
    times = {p: seconds(p) for p in fits}
    fastest = min(times.values())
    return max(p for p in fits if times[p] <= fastest * (1 + SIZE_TOLERANCE))


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
    )


def fit_latency(samples: Sequence[tuple[int, float]], prior: LatencyModel) -> LatencyModel:
    """A page's fixed time and its time per item, fitted (least squares) to answers seen,
    ``(items, seconds)`` each. Answers of one size cannot tell the two parts apart: then
    the ``prior``'s shape, scaled to them (``LatencyModel.calibrated``).

    Answers of the same size that differ show the host's noise: a time per item smaller
    than that noise over the sizes' gap (``noise_s``) cannot be told from none, so the
    fit keeps only what stands above it (a host whose pages cost the same whatever
    their size gets large pages, not small ones drawn by noise), the line still through
    the answers' mean. A fit that says an item costs less than nothing keeps the fixed
    part only; a negative fixed part keeps the per-item part only. The client's CPU per
    request is the prior's (it is measured apart: ``SizePlanner``)."""
    usable = [(n, s) for n, s in samples if s > 0]
    sizes = {n for n, _ in usable}
    if len(sizes) < 2:
        return prior.calibrated(usable)
    mean_n = statistics.fmean(n for n, _ in usable)
    mean_s = statistics.fmean(s for _, s in usable)
    spread = sum((n - mean_n) ** 2 for n, _ in usable)
    slope = sum((n - mean_n) * (s - mean_s) for n, s in usable) / spread
    by_size: dict[int, list[float]] = {}
    for n, s in usable:
        by_size.setdefault(n, []).append(s)
    jitter = max(max(v) - min(v) for v in by_size.values())
    noise = jitter / (max(sizes) - min(sizes))
    slope = max(0.0, slope - noise)
    cpu = prior.cpu_s
    if slope == 0:
        return LatencyModel(mean_s, 0.0, noise, cpu)
    base = mean_s - slope * mean_n
    if base < 0:
        return LatencyModel(0.0, mean_s / mean_n, noise, cpu)
    return LatencyModel(base, slope, noise, cpu)


@dataclass(frozen=True, slots=True)
class HostLimits:
    """What bounds a plan: the requests the host allows in flight (documented, found by
    the window, or the configured cap), the requests it allows a minute (None: none
    documented) and the requests this run may spend of its budget (None: unlimited)."""

    in_flight: int
    per_minute: int | None = None
    budget: int | None = None

    def describe(self) -> str:
        text = f"{self.in_flight} in flight"
        if self.per_minute is not None:
            text += f", {self.per_minute} requests a minute"
        if self.budget is not None:
            text += f", {self.budget} requests of budget"
        return text


@dataclass(frozen=True, slots=True)
class PagePlan:
    """The page size and requests in flight chosen from measured latency, and the figures
    behind the choice (for the logs and the run summary)."""

    per_page: int
    in_flight: int
    requests: int
    seconds: float
    items: int
    latency: LatencyModel
    samples: int  # answers the latency was fitted to
    limits: HostLimits
    parallel: bool = True  # a listing's pages asked for at once (else one after another)

    def describe(self) -> str:
        """``per_page 10, 48 in flight for 480 items: 48 requests, ~0.80 s by the model
        (a page 0.260 s + 0.0440 s an item, from 3 answers, ...; client CPU 2.1 ms a
        request; host: 100 in flight, ...)``."""
        return (
            f"per_page {self.per_page}, {self.in_flight} in flight for {self.items} items: "
            f"{self.requests} requests, ~{self.seconds:.2f} s by the model "
            f"(a page {self.latency.base_s:.3f} s + {self.latency.per_item_s:.4f} s an item, "
            f"from {self.samples} answers, noise {self.latency.noise_s:.4f} s an item; "
            f"client CPU {self.latency.cpu_s * 1000:.1f} ms a request"
            f"{'' if self.parallel else '; pages one after another'}; "
            f"host: {self.limits.describe()})"
        )

    def figures(self) -> dict[str, Any]:
        """The plan as plain values (the run summary's ``size_plan_figures``)."""
        return {
            "per_page": self.per_page,
            "in_flight": self.in_flight,
            "requests": self.requests,
            "model_seconds": round(self.seconds, 4),
            "items": self.items,
            "page_seconds": round(self.latency.base_s, 4),
            "item_seconds": round(self.latency.per_item_s, 5),
            "item_noise_seconds": round(self.latency.noise_s, 5),
            "request_cpu_seconds": round(self.latency.cpu_s, 5),
            "parallel": self.parallel,
            "samples": self.samples,
            "host_in_flight": self.limits.in_flight,
            "host_per_minute": self.limits.per_minute,
            "budget": self.limits.budget,
        }


def plan_seconds(
    totals: Sequence[int],
    per_page: int,
    latency: LatencyModel,
    limits: HostLimits,
    *,
    recheck: bool = False,
    parallel: bool = True,
) -> tuple[int, int, float]:
    """``(requests, in_flight, seconds)`` of reading listings of ``totals`` items at
    ``per_page``, every page asked for at once: waves of as many requests in flight as
    the host allows; the requests past a minute's allowance wait for the next minute;
    with ``recheck``, one round trip without items when a listing takes more than one
    page (the GitHub sync asks page 1 again at the end). Not ``parallel``: the listings
    at once (in waves), each listing's pages one after another. On top, the client's CPU
    of every request (``LatencyModel.cpu_s``), spent one request at a time."""
    largest = max(totals)
    pages = [max(1, math.ceil(n / per_page)) for n in totals]
    requests = sum(pages)
    if parallel:
        in_flight = max(1, min(limits.in_flight, requests))
        seconds = math.ceil(requests / in_flight) * latency.seconds(min(per_page, largest))
    else:
        in_flight = max(1, min(limits.in_flight, len(totals)))
        rounds = math.ceil(len(totals) / in_flight) * max(pages)
        seconds = rounds * latency.seconds(min(per_page, largest))
    if limits.per_minute is not None and requests > limits.per_minute:
        seconds = max(seconds, 60.0 * ((requests - 1) // limits.per_minute))
    if recheck and largest > per_page:
        seconds += latency.seconds(0)
        requests_cpu = requests + len(totals)
    else:
        requests_cpu = requests
    return requests, in_flight, seconds + requests_cpu * latency.cpu_s


def plan_pages(
    totals: Sequence[int],
    *,
    latency: LatencyModel,
    limits: HostLimits,
    samples: int = 0,
    recheck: bool = False,
    parallel: bool = True,
    tolerance: float = PLAN_TOLERANCE,
    largest: int = PER_PAGE_MAX,
) -> PagePlan:
    """The page size (1 to ``largest``) and requests in flight that finish listings of
    ``totals`` items soonest by ``plan_seconds``, among the sizes whose requests fit
    the budget (none fits: ``largest``, the fewest requests). Of sizes within
    ``tolerance`` of the fastest, the one of fewest requests."""
    totals = [max(0, n) for n in totals] or [0]
    timed = {
        p: plan_seconds(totals, p, latency, limits, recheck=recheck, parallel=parallel)
        for p in range(1, largest + 1)
    }
    fits = [p for p, (r, _, _) in timed.items() if limits.budget is None or r <= limits.budget]
    if not fits:
        fits = [largest]
    fastest = min(timed[p][2] for p in fits)
    chosen = min(
        (p for p in fits if timed[p][2] <= fastest * (1 + tolerance)),
        key=lambda p: (timed[p][0], timed[p][2]),
    )
    requests, in_flight, seconds = timed[chosen]
    return PagePlan(
        chosen, in_flight, requests, seconds, sum(totals), latency, samples, limits, parallel
    )


class SizePlanner:
    """One page size and in-flight count for the listings of a run whose size is
    automatic, planned when every one of them has been probed (or has left: its probe
    failed).

    Each listing reports its probes (``size_for``: the items the listing holds, and each
    probe's items and seconds: two sizes, so that a page's fixed time and its time per
    item can be told apart) and waits; the last report fits the latency to every probe
    (``fit_latency``) and plans for all of them at once (``plan_pages``) within the host's
    limits as they stand then; ``admit`` opens the window to the planned in-flight count.
    A listing that will not report calls ``leave``.

    The client's CPU per request (``LatencyModel.cpu_s``) is what ``cpu_clock`` (the
    event loop thread's CPU time) advanced from the first probe sent (``probing``) to the
    last report, over the probes reported: each on a new connection, as the planned
    requests will be. What the run did before (reading its state, the client's set-up:
    once a run, not once a request) is left out; without a ``probing`` call, from the
    planner's creation. Never below the configured model's.

    Args:
        listings: how many listings will report or leave.
        latency: the configured latency model: the prior when the probes cannot be
            fitted (answers of one size).
        limits: the host's limits and the budget when the plan is made.
        expected: items assumed for a listing whose probe could not tell its size.
        recheck: listings of several pages are looked at again at the end
            (``plan_seconds``).
        admit: called with the planned in-flight count.
    """

    def __init__(
        self,
        listings: int,
        *,
        latency: LatencyModel,
        limits: Callable[[], HostLimits],
        expected: int,
        recheck: bool = False,
        admit: Callable[[int], None] | None = None,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self._cpu_clock = cpu_clock
        self._cpu_at = cpu_clock()
        self._probing = False
        self._parallel = True
        self._waiting = listings
        self._recheck = recheck
        self.latency = latency
        self._limits = limits
        self._expected = expected
        self._admit = admit
        self._totals: list[int] = []
        self._samples: list[tuple[int, float]] = []
        self._ready = asyncio.Event()
        self.plan: PagePlan | None = None
        if listings <= 0:
            self._ready.set()

    async def size_for(
        self, total: int | None, samples: Sequence[tuple[int, float]], *, parallel: bool = True
    ) -> int:
        """Report one listing's probes, ``(items, seconds)`` each; the planned page size
        once every listing reported. ``parallel``: the listing's pages can be asked for at
        once (else one after another, and the plan is for that)."""
        self._totals.append(self._expected if total is None else total)
        self._samples.extend(samples)
        self._parallel = self._parallel and parallel
        self._arrive()
        await self._ready.wait()
        assert self.plan is not None
        return self.plan.per_page

    def probing(self) -> None:
        """A listing's probes are about to be sent: the client's CPU is counted from the
        first such call."""
        if not self._probing:
            self._probing = True
            self._cpu_at = self._cpu_clock()

    def leave(self) -> None:
        """A listing that will not report (its probe failed)."""
        self._arrive()

    def _arrive(self) -> None:
        self._waiting -= 1
        if self._waiting > 0 or self._ready.is_set():
            return
        if self._totals:
            cpu = (self._cpu_clock() - self._cpu_at) / max(1, len(self._samples))
            self.latency = fit_latency(self._samples, self.latency)
            self.latency = dataclasses.replace(
                self.latency, cpu_s=max(self.latency.cpu_s, max(0.0, cpu))
            )
            self.plan = plan_pages(
                self._totals,
                latency=self.latency,
                limits=self._limits(),
                samples=len(self._samples),
                recheck=self._recheck,
                parallel=self._parallel,
            )
            if self._admit is not None:
                self._admit(self.plan.in_flight)
        self._ready.set()
