"""How many requests may be in flight to one host, found the way TCP finds a path's
capacity (congestion control), because APIs rarely say it.

A server that allows fewer requests in flight than a client sends answers the
excess with limit answers (429, or GitHub's 403 "secondary rate limit"), each
with a ``Retry-After`` stall. ``AdaptiveWindow`` avoids them:

* **slow start**: the window starts small (``initial``) and grows by one per
  clean answer (doubling every round trip) up to ``ssthresh``;
* **additive increase**: above ``ssthresh`` it grows by one per round trip;
* **multiplicative decrease**: a limit answer (or a timeout) shrinks it to
  ``beta`` times the requests that were in flight when the refused request was
  sent, once per burst (answers to requests sent before the decrease are the
  same event, as TCP's fast recovery treats one window's losses), and records
  the **ceiling**: the most requests in flight that the host accepted;
* **holding under the ceiling**: after the ceiling is known the window climbs
  back to it quickly and stays there; it probes one above only after
  ``probe_after`` clean round trips (doubling after each failed probe), so a
  known ceiling costs a limit answer rarely, not every few round trips;
* **latency**: growth stops while answers take more than ``latency_factor``
  times the fastest smoothed latency seen (the server is queueing), and the
  window shrinks once per round trip beyond twice that;
* **paced exploration** while the host's limit is unknown (no limit answer
  yet, none remembered): a new in-flight level above the highest one reached
  is opened at most once per ``ramp`` seconds. A limit answer comes back
  within one round trip of its request, long before a page does, so pacing
  bounds the overshoot to the levels opened during that round trip (one or
  two on loopback, more on a far host: raise ``ramp`` there) instead of a
  whole burst of clean answers (20 answers arriving together would send 40
  requests at once). While the window is full and requests wait, a level that stood that
  long without a refusal was accepted, so the window grows by one (slow start
  in time, not only per answer): a first run reaches 100 in flight in about a
  second instead of four page round trips;
* the window only grows while it is used: the window was full (in flight
  close to the window) at some moment between a request's send and its
  answer, as TCP's congestion-window validation asks (RFC 7661), so a
  sequential listing cannot inflate it for the next burst. Judging only by
  the in-flight count *at send* would let just the last one or two requests
  of each burst count (the first ones of a burst go out with 1, 2, 3 ... on
  the wire), and slow start would grow by ~2 per round trip instead of
  doubling.

The ceiling and window are remembered per host (``api_windows``), so the next
run starts where this one ended instead of rediscovering the limit.
``adaptive=False`` is a fixed window (the benchmark's fixed-concurrency
contender).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["ok", "limit", "timeout", "error"]


@dataclass(slots=True)
class Ticket:
    """A request admitted by the window: the decrease epoch when it was admitted, and the
    requests on the wire (this one included) when it was actually sent. A request may
    wait between the two (a ``Retry-After`` pause), so only the second counts what the
    server saw."""

    epoch: int
    in_flight: int
    sent_with: int = 0
    seq: int = 0  # admission order, to tell whether the window filled up after it


class AdaptiveWindow:
    """The in-flight limit of one host; one per client, on one event loop.

    Args:
        initial: window of the first round trip (a safe start).
        maximum: never more in flight than this (the configured concurrency).
        ceiling: a ceiling remembered from an earlier run (None: unknown).
        adaptive: False keeps the window at ``maximum`` whatever happens.
        beta: share of the in-flight count kept after a limit answer.
        probe_after: clean round trips at the ceiling before probing above it.
        latency_factor: smoothed latency over its best beyond which growth stops.
        ramp: seconds between two new in-flight levels while the limit is unknown
            (0: no pacing, no growth in time).
    """

    def __init__(
        self,
        *,
        initial: int = 4,
        maximum: int = 64,
        ceiling: int | None = None,
        adaptive: bool = True,
        beta: float = 0.85,
        probe_after: int = 16,
        latency_factor: float = 2.0,
        ramp: float = 0.02,
    ) -> None:
        self.maximum = max(1, maximum)
        self.adaptive = adaptive
        self.beta = beta
        self.latency_factor = latency_factor
        self.ceiling = min(ceiling, self.maximum) if ceiling else None
        start = min(initial, self.ceiling or self.maximum) if adaptive else self.maximum
        self.cwnd = float(max(1, start))
        self.ssthresh = float(self.ceiling or self.maximum)
        self.in_flight = 0
        self.epoch = 0
        self.limit_answers = 0
        self.decreases = 0
        self._admitted = 0
        self._full_at = -1  # admission number when the window was last full
        self._clean_at_ceiling = 0
        self._probe_wait = probe_after
        self._srtt: float | None = None
        self._best: float | None = None
        self._samples = 0
        self.ramp = ramp
        self._high = int(self.cwnd)  # most in flight reached while the limit is unknown
        self._level_at = -math.inf  # when the last new level was opened (monotonic)
        self._holding = False  # latency says the server queues: no growth
        self._cond = asyncio.Condition()

    @property
    def size(self) -> int:
        """Requests allowed in flight now."""
        return max(1, min(self.maximum, math.floor(self.cwnd)))

    async def acquire(self) -> Ticket:
        async with self._cond:
            while True:
                if self.in_flight < self.size and (
                    self.in_flight < self._high or not self._exploring()
                ):
                    break
                if not self._exploring():
                    await self._cond.wait()
                    continue
                wait = self._level_at + self.ramp - time.monotonic()
                if wait <= 0:  # the newest level stood a round trip unrefused: open one more
                    self._level_at = time.monotonic()
                    self._high = self.in_flight + 1
                    self.cwnd = max(self.cwnd, float(self._high))
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._cond.wait(), timeout=wait)
            self.in_flight += 1
            self._admitted += 1
            if self.in_flight >= self.size - 1:
                self._full_at = self._admitted
            return Ticket(self.epoch, self.in_flight, seq=self._admitted)

    def _exploring(self) -> bool:
        """Pacing applies: adaptive, the host's limit unknown, room under the cap."""
        return (
            self.adaptive
            and self.ramp > 0
            and self.ceiling is None
            and not self._holding
            and self.size < self.maximum
        )

    async def release(self, ticket: Ticket, outcome: Outcome, seconds: float = 0.0) -> None:
        """Account for an answer; ``ticket.sent_with`` should hold the requests on the
        wire when it was sent (else the count at admission stands in)."""
        if not ticket.sent_with:
            ticket.sent_with = ticket.in_flight
        async with self._cond:
            self.in_flight -= 1
            if self.adaptive:
                if outcome == "ok":
                    self._grow(ticket, seconds)
                elif outcome in ("limit", "timeout"):
                    self._shrink(ticket, limit=outcome == "limit")
            self._cond.notify_all()

    def _grow(self, ticket: Ticket, seconds: float) -> None:
        if (
            self.ceiling is not None
            and ticket.epoch == self.epoch
            and ticket.sent_with > self.ceiling
        ):
            self.ceiling = ticket.sent_with  # a probe above the ceiling went through
            self.ssthresh = float(self.ceiling)
        if seconds > 0:
            self._samples += 1
            self._srtt = seconds if self._srtt is None else 0.8 * self._srtt + 0.2 * seconds
            if self._samples >= 8:
                self._best = self._srtt if self._best is None else min(self._best, self._srtt)
        self._holding = False
        if self._best and self._srtt:
            ratio = self._srtt / self._best
            if ratio > 2 * self.latency_factor and ticket.epoch == self.epoch:
                self._holding = True
                self._decrease(self.cwnd)  # queueing at the server: back off, once per round
                return
            if ratio > self.latency_factor:
                self._holding = True
                return  # queueing starts: hold
        if ticket.sent_with < self.size - 1 and self._full_at < ticket.seq:
            return  # the window was not used: growing it would be a guess
        if self.ceiling is not None and self.cwnd >= self.ceiling:
            self._clean_at_ceiling += 1
            if self._clean_at_ceiling < self._probe_wait * self.size:
                self.cwnd = float(self.ceiling)
                return  # hold at the known ceiling; probe above it only now and then
        if self.cwnd < self.ssthresh:
            self.cwnd = min(self.cwnd + 1, float(self.maximum))
        else:
            self.cwnd = min(self.cwnd + 1 / self.cwnd, float(self.maximum))

    def _shrink(self, ticket: Ticket, *, limit: bool) -> None:
        if limit:
            self.limit_answers += 1
            accepted = max(1, ticket.sent_with - 1)
            if self.ceiling is not None and accepted >= self.ceiling:
                self._probe_wait *= 2  # a failed probe: wait longer before the next
            self.ceiling = accepted if self.ceiling is None else min(self.ceiling, accepted)
            self._clean_at_ceiling = 0
        if ticket.epoch != self.epoch:
            return  # the same burst as the last decrease
        self._decrease(float(ticket.sent_with))

    def _decrease(self, basis: float) -> None:
        self.epoch += 1
        self.decreases += 1
        self.cwnd = max(1.0, min(self.cwnd, basis) * self.beta)
        self.ssthresh = float(self.ceiling) if self.ceiling is not None else max(1.0, self.cwnd)

    def admit(self, in_flight: int) -> None:
        """Open the window to ``in_flight`` at once (a plan made from measured latency
        within a ceiling the host documents or showed): the levels up to it are not
        ramped to. Never beyond the cap or a known ceiling; a limit answer still shrinks
        it."""
        if not self.adaptive:
            return
        level = min(max(1, in_flight), self.ceiling or self.maximum, self.maximum)
        if level > self.cwnd:
            self.cwnd = float(level)
            self._high = max(self._high, level)

    def plan_size(self, initial: int) -> int:
        """Requests in flight to plan page sizes for: a fixed window's size, the host's
        known ceiling, else ``initial`` (the starting window of a host not seen before).

        A window that never met a limit only says the cap was not reached, not that
        more in flight is faster: planned for it, pages get small and many (200
        requests of 51 instead of 100 of 100 at a window of 100), which a loaded
        client or server does not answer sooner. The pacing ramp fills the window
        either way."""
        if not self.adaptive:
            return self.size
        return self.ceiling or min(self.size, max(1, initial))

    def remembered(self) -> tuple[int, int | None]:
        """(window, ceiling) to start the next run with."""
        return self.size, self.ceiling
