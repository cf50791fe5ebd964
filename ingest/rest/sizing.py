"""Budget-aware page sizes: the page size of a listing when none is declared.

Every page costs one request of the budget; smaller pages answer faster and run
in parallel. ``choose_per_page`` picks the fastest size by a simple latency
model among those whose request count fits the budget the API announced
(rate-limit headers), for GitHub and every declared REST source alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

PER_PAGE_MAX = 100  # GitHub caps per_page at 100, as most APIs do
PER_PAGE_MIN = 10  # below this the request count grows faster than latency shrinks


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
    """The page size when none is given: the fastest by ``estimate_seconds`` among
    those whose request count fits ``budget``; larger pages when within 10 % of the
    fastest (fewer requests for the same time). When nothing fits, 100 (the fewest
    requests), and the governor stops cleanly at the reserve.

    ``expected`` is the number of pull requests expected per repository (stored
    counts from earlier runs, or an assumption); ``budget`` the requests this run
    may spend (None: unlimited).
    """
    expected = [max(1, n) for n in expected] or [1]
    fits = [
        p
        for p in range(PER_PAGE_MIN, PER_PAGE_MAX + 1)
        if budget is None or sum(math.ceil(n / p) for n in expected) <= budget
    ]
    if not fits:
        return PER_PAGE_MAX
    times = {p: estimate_seconds(p, expected, concurrency, base_s, per_item_s) for p in fits}
    best = min(times.values())
    return max(p for p in fits if times[p] <= best * 1.1)
