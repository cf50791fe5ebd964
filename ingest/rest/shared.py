"""Limits that hold for every process calling one API host, not per process: the
in-flight slots and the primary budget, kept on the Prefect server as global
concurrency limits.

Several task runs (Dask workers, processes, machines) that call the same host
each have their own ``AdaptiveWindow`` and ``RateLimitGovernor``; alone, each
would fill the host's in-flight limit and spend down to the reserve as if it
were the only one. With shared limits:

* **In flight** -- a limit named ``<base>-inflight`` whose size is the most
  requests the cluster may have in flight to the host (the configured
  concurrency, or the ceiling remembered for the host when lower). A request
  is sent only with one of the slots this process leased. Slots are leased in
  blocks (``block``) with a server-side lease that this process renews; a
  process that dies loses its leases when they expire, so its slots come back.
  The local window stays adaptive: the shared limit caps the *sum* of the
  windows, each window still grows and shrinks on its own answers (flows
  sharing a bottleneck, as TCP connections share a link), and a process
  returns a lease as soon as none of its slots is needed.
* **Budget** -- per rate-limit window of the API (its reset time), a limit
  named ``<base>-budget-<reset>`` whose size is what the window allows to be
  spent above the reserve, as the first process that saw the window read it
  from the headers. Every request takes a token first (tokens are taken in
  blocks and never given back while spent; unspent ones go back at the end of
  the run), so the whole cluster never spends into the reserve. The request
  that learned the window is charged when a process joins it.

Names come from the host (and port) of the base URL only, never from
credentials or paths; ``name`` replaces the host part.

Cost: one acquire on the server is a round trip (about 5 ms on an idle
machine, and ``prefect.concurrency.asyncio.concurrency`` adds a lease-renewal
thread and events: about 140 ms per acquire and release, see
benchmarks/limits.md), so no request pays it: a block of slots or tokens
costs one round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from uuid import UUID

import httpx

from ingest.backoff import Backoff
from ingest.errors import IngestError

if TYPE_CHECKING:
    from ingest.settings import SharedSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

SharedMode = Literal["auto", "on", "off"]
_LOCKED = 423
# A process holding slots of its own asks again for more after 1, 2, 4 s (at most 5 s).
REFUSAL_BACKOFF = Backoff(base=1.0, cap=5.0, jitter=0)


def limit_base(base_url: str, name: str | None = None) -> str:
    """``ingest-api-<host>[-<port>]`` from the base URL (no userinfo, path or query),
    or ``name`` when given; lower case, only letters, digits, dots and dashes."""
    if name:
        raw = name
    else:
        url = httpx.URL(base_url)
        raw = f"ingest-api-{url.host}" + (f"-{url.port}" if url.port else "")
    return re.sub(r"[^a-z0-9.-]+", "-", raw.lower()).strip("-")


async def with_shared_limits(
    settings: SharedSettings,
    task_runner: str,
    base_url: str,
    fetch: Callable[[SharedLimits | None], Awaitable[T]],
    *,
    in_flight: int,
    remembered: tuple[int, int | None] | None,
) -> T:
    """``await fetch(shared)`` inside the run's shared limits of the host of ``base_url``
    (None when not shared): the limits are held for the whole fetch and returned after it.

    The in-flight limit is sized ``in_flight`` (the configured concurrency), or the
    ceiling an earlier run learned for the host when lower; a limit that exists
    already keeps its size (set by the first run, or by hand in the UI)."""
    name = settings.limit_name
    if not enabled(settings.limits, task_runner=task_runner, name=name, api_url=_api_url):
        return await fetch(None)
    if remembered and remembered[1]:
        in_flight = min(in_flight, remembered[1])
    async with open_shared(
        limit_base(base_url, name),
        in_flight=in_flight,
        block=settings.limit_block,
        lease_seconds=settings.lease_seconds,
    ) as shared:
        return await fetch(shared)


def _api_url() -> str | None:
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return str(url) if url else None


def enabled(
    mode: SharedMode, *, task_runner: str, name: str | None, api_url: Callable[[], str | None]
) -> bool:
    """Whether the limits are shared: ``on``; ``auto`` when the task runner is Dask or a
    limit name is configured, and a Prefect server is configured to hold them."""
    if mode == "off":
        return False
    if mode == "on":
        if not api_url():
            raise ValueError(
                "shared limits need a Prefect server: set PREFECT_API_URL (or INGEST_SHARED_LIMITS"
                "=off)"
            )
        return True
    wanted = task_runner == "dask" or bool(name)
    if wanted and not api_url():
        log.warning("shared limits need PREFECT_API_URL; the limits of this run are its own")
        return False
    return wanted


class SharedLimitsError(IngestError, RuntimeError):
    """The Prefect server refused or failed an operation on a shared limit."""


def _refused(exc: httpx.HTTPStatusError) -> bool:
    """423: the slots are taken now; 422 "greater than the limit": more slots than the
    limit has (a smaller ask may pass). Any other answer is an error."""
    status = exc.response.status_code
    return status == _LOCKED or (status == 422 and "greater than the limit" in _detail(exc))


def _detail(exc: httpx.HTTPStatusError) -> str:
    try:
        body = exc.response.json()
    except ValueError:
        return f"HTTP {exc.response.status_code}"
    detail = body.get("detail") or body.get("exception_detail") if isinstance(body, dict) else body
    return f"HTTP {exc.response.status_code}: {detail}"[:500]


@dataclass(slots=True)
class _Lease:
    lease_id: UUID
    slots: int
    granted: float  # time.monotonic()


@dataclass
class SharedSlots:
    """This process's share of the cluster's in-flight limit of one host.

    ``acquire(want)`` returns when this process may send one more request;
    ``want`` is how many this process would have in flight (its window). A lease
    asks for ``block`` slots (one, when the others hold all but fewer and this
    process holds none). A lease goes back to the server only whole: when its
    slots are free and the process still holds its window without it, when no
    slot was released for ``idle_seconds``, when it was held ``turn_seconds``
    while others may wait, and at the end of the run. So a process holds at most
    about a block more than its window.
    """

    client: Any  # prefect.client.orchestration.PrefectClient
    name: str
    block: int = 8
    lease_seconds: float = 60.0
    turn_seconds: float = 10.0  # a lease this old goes back once free, even under demand
    idle_seconds: float = 0.5  # free this long with no demand: the lease goes back
    leases: list[_Lease] = field(default_factory=list)
    used: int = 0
    round_trips: int = 0
    refused: int = 0
    _cond: asyncio.Condition = field(default_factory=asyncio.Condition)
    _leasing: bool = False
    _waiting: int = 0
    _last_release: float = 0.0
    _next_try: float = 0.0
    _refusals: int = 0
    _want: int = 1
    _idle: asyncio.Task[None] | None = None

    @property
    def held(self) -> int:
        return sum(lease.slots for lease in self.leases)

    async def acquire(self, want: int) -> None:
        async with self._cond:
            self._want = want
            self._waiting += 1
            try:
                while self.used >= self.held:
                    later = self._next_try - time.monotonic()
                    if self._leasing or (self.held and later > 0):
                        # a lease is being asked for, or was refused while this process
                        # has slots: its own requests free one (no polling meanwhile)
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._cond.wait(), max(later, 0.05))
                        continue
                    self._leasing = True
                    try:
                        # a block: fewer calls while the window grows one by one; no
                        # more, since a lease goes back only whole
                        got = await self._lease(self.block, fallback=not self.held)
                    finally:
                        self._leasing = False
                        self._cond.notify_all()
                    if got:
                        self._refusals = 0
                        continue
                    # the others hold the rest: with slots of its own this process asks
                    # again after 1, 2, 4 s (at most 5 s); with none, after the server's
                    # Retry-After (0.2-1 s)
                    self._refusals += 1
                    pause = (
                        REFUSAL_BACKOFF.delay(self._refusals) if self.held else self._retry_after
                    )
                    self._next_try = time.monotonic() + pause
                    if not self.held:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._cond.wait(), pause)
            finally:
                self._waiting -= 1
            self.used += 1

    async def release(self) -> None:
        async with self._cond:
            self.used -= 1
            self._last_release = time.monotonic()
            if self._waiting:  # demand here: only leases held a turn go back
                await self._return_free(demand=True)
            else:
                await self._return_surplus()
                if self.held - self.used and self._idle is None:
                    self._idle = asyncio.create_task(self._return_when_idle())
            self._cond.notify_all()

    async def _return_when_idle(self) -> None:
        """Leases whose slots stayed free for ``idle_seconds`` go back (a pause between
        pages is not a reason to give slots up and lease them again)."""
        try:
            while True:
                due = self._last_release + self.idle_seconds - time.monotonic()
                if due > 0:
                    await asyncio.sleep(due)
                    continue
                async with self._cond:
                    if not self._waiting:
                        await self._return_free(demand=False)
                return
        finally:
            self._idle = None

    async def close(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        async with self._cond:
            for lease in list(self.leases):
                await self._give_back(lease)

    # -- internals ----------------------------------------------------------------
    _retry_after: float = 0.05

    async def _lease(self, ask: int, *, fallback: bool) -> bool:
        """Lease ``ask`` slots, else (``fallback``) one; False when none is free now."""
        for n in dict.fromkeys((ask, 1) if fallback else (ask,)):
            self.round_trips += 1
            try:
                response = await self.client.increment_concurrency_slots_with_lease(
                    names=[self.name],
                    slots=n,
                    mode="concurrency",
                    lease_duration=self.lease_seconds,
                )
            except httpx.HTTPStatusError as exc:
                if not _refused(exc):
                    raise SharedLimitsError(
                        f"leasing {n} slots of {self.name}: {_detail(exc)}"
                    ) from exc
                self.refused += 1
                with contextlib.suppress(ValueError, KeyError):
                    # the server's Retry-After, within [0.2, 1] s: asking more often only
                    # loads the server, less often leaves slots unused
                    wait = float(exc.response.headers["retry-after"])
                    self._retry_after = min(1.0, max(0.2, wait))
                continue
            body = response.json()
            if not body.get("limits"):
                raise SharedLimitsError(f"the shared limit {self.name} does not exist")
            self.leases.append(_Lease(UUID(body["lease_id"]), n, time.monotonic()))
            return True
        return False

    async def _return_free(self, *, demand: bool) -> None:
        now = time.monotonic()
        for lease in sorted(self.leases, key=lambda x: x.granted):
            if self.held - self.used < lease.slots:
                continue
            if demand and now - lease.granted < self.turn_seconds:
                continue
            await self._give_back(lease)

    async def _return_surplus(self) -> None:
        """Free leases the window does not need (it shrank, or a lease overshot it)."""
        for lease in sorted(self.leases, key=lambda x: x.granted):
            free = self.held - self.used
            if free >= lease.slots and self.held - lease.slots >= self._want:
                await self._give_back(lease)

    async def _give_back(self, lease: _Lease) -> None:
        self.leases.remove(lease)
        self.round_trips += 1
        try:
            await self.client.release_concurrency_slots_with_lease(lease.lease_id)
        except httpx.HTTPError as exc:  # the lease expires on the server anyway
            log.warning("returning %d slots of %s failed: %s", lease.slots, self.name, exc)

    async def renew(self) -> None:
        for lease in list(self.leases):
            self.round_trips += 1
            try:
                await self.client.renew_concurrency_lease(lease.lease_id, self.lease_seconds)
            except httpx.HTTPError as exc:
                log.warning("renewing a lease of %s failed: %s", self.name, exc)


@dataclass
class SharedBudget:
    """This process's tokens of the cluster's budget in the API's current window.

    ``take(spendable, reset)`` is called for every request once the budget is
    known: ``spendable`` is remaining minus reserve as this process last saw it,
    ``reset`` the window's reset (epoch seconds). False: the cluster has spent
    what the window allows above the reserve.
    """

    client: Any
    base: str
    block: int = 8
    tokens: int = 0
    window: int | None = None  # the reset epoch of the window the tokens belong to
    spent: int | None = None  # the window whose budget the cluster has spent
    round_trips: int = 0
    prepaid: int | None = None  # the window this process's learning request was charged to
    _next: asyncio.Task[None] | None = None

    async def before_learning(self, now: float) -> float | None:
        """Charge the request about to learn the window to the window the cluster already
        shares, if any (a process that starts late in a window would otherwise send it
        unaccounted, into the reserve). None: send it; else the reset (epoch seconds) of
        the window, which the cluster has spent."""
        if self.window is not None:  # this process knows the window: charged on joining
            return None
        self.round_trips += 1
        prefix = f"{self.base}-budget-"
        every = await self.client.read_global_concurrency_limits(limit=200)
        resets = [
            int(x.name[len(prefix) :])
            for x in every
            if x.name.startswith(prefix) and x.name[len(prefix) :].isdigit()
        ]
        current = [r for r in resets if r > now]
        if not current:
            return None
        key = max(current)
        if await self._increment(self.name_for(key), 1):
            self.prepaid = key
            return None
        return float(key)

    def name_for(self, reset: float) -> str:
        return f"{self.base}-budget-{int(reset)}"

    async def take(self, spendable: int, reset: float) -> bool:
        key = int(reset)
        if key != self.window:
            await self._join(key, spendable)
        # a block is a 32nd of what this process may still spend (at least ``block``, at
        # most 100): few calls on a large budget, little held back when it runs low
        size = max(self.block, min(100, spendable // 32))
        if self.tokens <= 0:
            if self._next is not None:
                await self._next
            elif self.spent != key:
                await self._refill(key, size)
            if self.tokens <= 0:
                self.spent = key
                return False
        self.tokens -= 1
        if self.tokens <= size // 2 and self._next is None and self.spent != key:
            # the next block is asked for while this one still lasts: no request waits
            self._next = asyncio.create_task(self._refill_next(key, size))
        return True

    async def _refill_next(self, key: int, size: int) -> None:
        try:
            if not await self._refill(key, size):
                self.spent = key
        except Exception as exc:  # the request that needs a token asks again
            log.warning("taking budget tokens failed: %s", exc)
        finally:
            self._next = None

    async def close(self) -> None:
        """Give back the tokens taken and not spent."""
        if self._next is not None:
            self._next.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._next
        if self.window is not None and self.tokens > 0:
            await self._decrement(self.name_for(self.window), self.tokens)
            self.tokens = 0

    async def _join(self, key: int, spendable: int) -> None:
        await self.close()
        previous = self.window
        self.window = key
        name = self.name_for(key)
        from prefect.exceptions import ObjectNotFound

        self.round_trips += 1
        try:  # joining is the common case: read first, create when missing
            await self.client.read_global_concurrency_limit_by_name(name)
            created = False
        except ObjectNotFound:
            created = True
        # one more than what may be spent: the request that learned the window is charged
        # below, as every joining process's is
        if created and await ensure_limit(self.client, name, max(0, spendable) + 1) is None:
            log.info("shared budget %s: %d requests above the reserve", name, spendable)
        if self.prepaid != key:
            await self._increment(name, 1)  # the learning request, already spent
        self.prepaid = None
        if previous is not None:  # a window that ended: nobody spends from it any more
            with contextlib.suppress(ObjectNotFound, httpx.HTTPError):
                await self.client.delete_global_concurrency_limit_by_name(self.name_for(previous))

    async def _refill(self, key: int, n: int) -> bool:
        """Take ``n`` tokens of window ``key`` (else what is left); False when none is."""
        name = self.name_for(key)
        got = n if await self._increment(name, n) else 0
        if not got and n > 1:
            self.round_trips += 1
            limit = await self.client.read_global_concurrency_limit_by_name(name)
            left = min(n, int(limit.limit) - int(limit.active_slots))
            got = left if left > 0 and await self._increment(name, left) else 0
        if got and key != self.window:  # the window changed meanwhile: not ours to spend
            await self._decrement(name, got)
            return False
        self.tokens += got
        return got > 0

    async def _increment(self, name: str, n: int) -> bool:
        self.round_trips += 1
        try:
            response = await self.client.increment_concurrency_slots(
                names=[name], slots=n, mode="concurrency"
            )
        except httpx.HTTPStatusError as exc:
            if _refused(exc):
                return False
            raise SharedLimitsError(f"taking {n} tokens of {name}: {_detail(exc)}") from exc
        if not response.json():
            raise SharedLimitsError(f"the shared budget {name} does not exist")
        return True

    async def _decrement(self, name: str, n: int) -> None:
        self.round_trips += 1
        try:
            await self.client.release_concurrency_slots(
                names=[name],
                slots=n,
                occupancy_seconds=0.001,  # must be > 0
            )
        except httpx.HTTPError as exc:
            log.warning("returning %d tokens of %s failed: %s", n, name, exc)


@dataclass
class SharedLimits:
    """The shared in-flight slots and budget of one host, for one run.

    ``async with SharedLimits.open(...)`` creates the in-flight limit if it is
    missing, renews the leases while the run lasts, and gives every slot and
    unspent token back at the end.
    """

    slots: SharedSlots
    budget: SharedBudget

    @property
    def round_trips(self) -> int:
        return self.slots.round_trips + self.budget.round_trips


async def ensure_limit(client: Any, name: str, limit: int) -> int | None:
    """Create the global concurrency limit ``name``; when it exists already (another
    process was first), its size. Two processes creating it at once: the loser's
    insert fails on the server (409, or a 500 from the unique name), so the loser
    reads what the winner created."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists

    try:
        await client.create_global_concurrency_limit(
            GlobalConcurrencyLimitCreate(name=name, limit=limit)
        )
        return None
    except (ObjectAlreadyExists, httpx.HTTPStatusError) as exc:
        try:
            return int((await client.read_global_concurrency_limit_by_name(name)).limit)
        except Exception:
            raise SharedLimitsError(f"cannot create the shared limit {name}: {exc}") from exc


@contextlib.asynccontextmanager
async def open_shared(
    base: str,
    *,
    in_flight: int,
    block: int = 8,
    lease_seconds: float = 60.0,
) -> AsyncIterator[SharedLimits]:
    """Shared limits of the host named ``base`` for the duration of a run; see the module doc."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    name = f"{base}-inflight"
    async with get_client() as client:
        try:
            size = int((await client.read_global_concurrency_limit_by_name(name)).limit)
        except ObjectNotFound:
            size = await ensure_limit(client, name, in_flight) or in_flight
            log.info("shared in-flight limit %s: %d", name, size)
        shared = SharedLimits(
            SharedSlots(client, name, block=min(block, size), lease_seconds=lease_seconds),
            SharedBudget(client, base, block=block),
        )

        async def renew() -> None:
            while True:
                await asyncio.sleep(lease_seconds / 3)
                await shared.slots.renew()

        renewer = asyncio.create_task(renew())
        try:
            yield shared
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            await shared.slots.close()
            await shared.budget.close()
