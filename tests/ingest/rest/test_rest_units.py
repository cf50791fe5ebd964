"""Unit tests of the REST engine's pure parts: the adaptive window (AIMD), the source
file's schema and its line-numbered errors, rate-limit header dialects. No server."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import pytest

from ingest.rest.config import RestConfig
from ingest.rest.errors import SourceError
from ingest.rest.ratelimit import parse_budget
from ingest.rest.source import parse_source
from ingest.rest.window import AdaptiveWindow, Ticket


def answer(window: AdaptiveWindow, outcome: str, sent_with: int, epoch: int | None = None) -> None:
    """One answer to a request that went out with ``sent_with`` on the wire."""

    async def go() -> None:
        ticket = await window.acquire()
        ticket.sent_with = sent_with
        if epoch is not None:
            ticket.epoch = epoch
        await window.release(ticket, outcome, 0.1)  # type: ignore[arg-type]

    asyncio.run(go())


def test_window_slow_start_grows_by_one_per_clean_answer_when_used() -> None:
    w = AdaptiveWindow(initial=4, maximum=64)
    for _ in range(4):
        answer(w, "ok", sent_with=w.size)
    assert w.size == 8  # one round trip: doubled
    answer(w, "ok", sent_with=1)  # the window was not used: no growth on a guess
    assert w.size == 8


def test_window_slow_start_doubles_per_burst() -> None:
    """A burst sent at once goes out with 1, 2 ... 10 on the wire; every answer counts
    as the window was full after its send, so one round trip doubles the window."""

    async def go() -> int:
        w = AdaptiveWindow(initial=10, maximum=100)
        tickets = [await w.acquire() for _ in range(10)]
        for t in tickets:
            await w.release(t, "ok", 0.1)
        return w.size

    assert asyncio.run(go()) == 20


def test_window_opens_new_levels_in_time_until_a_limit_answer() -> None:
    """While the host's limit is unknown, a full window with requests waiting grows by one
    per ``ramp`` (the newest request stood unrefused), without any answer; the first limit
    answer ends that, and no request beyond the window is admitted after it."""

    async def go() -> tuple[int, int, list[float], bool]:
        w = AdaptiveWindow(initial=2, maximum=64, ramp=0.01)
        tickets = [await w.acquire() for _ in range(2)]
        opened = []
        for _ in range(6):  # no answer arrives: each one more is a level opened in time
            tickets.append(await w.acquire())
            opened.append(time.monotonic())
        grown = w.size
        refused = tickets.pop()
        refused.sent_with = 8
        await w.release(refused, "limit", 0.001)
        try:  # the window is full and the limit known: nobody else gets in
            await asyncio.wait_for(w.acquire(), timeout=0.3)
            admitted = True
        except TimeoutError:
            admitted = False
        gaps = [b - a for a, b in itertools.pairwise(opened)]
        return grown, w.ceiling or 0, gaps, admitted

    grown, ceiling, gaps, admitted = asyncio.run(go())
    assert grown == 8 and ceiling == 7
    assert min(gaps) >= 0.009  # paced: one new level per ramp, never a burst
    assert not admitted


def test_window_without_ramp_grows_only_per_answer() -> None:
    async def go() -> bool:
        w = AdaptiveWindow(initial=2, maximum=64, ramp=0)
        for _ in range(2):
            await w.acquire()
        try:
            await asyncio.wait_for(w.acquire(), timeout=0.2)
            return True
        except TimeoutError:
            return False

    assert not asyncio.run(go())


def test_window_plans_pages_for_a_known_ceiling_else_the_start() -> None:
    assert AdaptiveWindow(initial=90, maximum=100).plan_size(10) == 10  # no limit met
    assert AdaptiveWindow(initial=8, maximum=100, ceiling=8).plan_size(10) == 8
    assert AdaptiveWindow(initial=10, maximum=50, adaptive=False).plan_size(10) == 50


def test_window_shrinks_once_per_burst_and_remembers_the_ceiling() -> None:
    w = AdaptiveWindow(initial=16, maximum=64)
    answer(w, "limit", sent_with=13, epoch=0)
    assert w.ceiling == 12 and w.size == int(13 * 0.85)
    size = w.size
    answer(w, "limit", sent_with=14, epoch=0)  # same burst: no second decrease
    assert w.size == size and w.decreases == 1 and w.limit_answers == 2
    for _ in range(50):
        answer(w, "ok", sent_with=w.size)
    assert w.size == 12  # back up to the ceiling, and held there
    assert w.remembered() == (12, 12)


def test_window_probes_above_the_ceiling_only_after_clean_round_trips() -> None:
    w = AdaptiveWindow(initial=8, maximum=64, ceiling=8, probe_after=4)
    held = 0
    while w.size == 8 and held < 1000:
        answer(w, "ok", sent_with=8)
        held += 1
    assert held >= 4 * 8  # four round trips at the ceiling first
    answer(w, "ok", sent_with=9)  # the probe went through: the ceiling rises
    assert w.ceiling == 9


def test_window_fixed_when_not_adaptive() -> None:
    w = AdaptiveWindow(initial=4, maximum=20, adaptive=False)
    answer(w, "limit", sent_with=20)
    assert w.size == 20 and w.ceiling is None


def test_window_starts_from_what_the_host_allowed_last_time() -> None:
    w = AdaptiveWindow(initial=6, maximum=64, ceiling=6)
    assert w.size == 6 and w.ssthresh == 6


def test_parse_budget_reads_both_header_dialects() -> None:
    gh = parse_budget(
        {"x-ratelimit-remaining": "7", "x-ratelimit-limit": "60", "x-ratelimit-reset": "1900000000"}
    )
    assert gh is not None and gh[1].remaining == 7 and gh[1].reset == 1900000000
    ietf = parse_budget(
        {"ratelimit-remaining": "3", "ratelimit-limit": "10", "ratelimit-reset": "30"},
        now=lambda: 1000.0,
    )
    assert ietf is not None and ietf[1].limit == 10 and ietf[1].reset == 1030.0
    assert parse_budget({"content-type": "application/json"}) is None


SOURCE = """\
name: tracker
client:
  base_url: https://api.example.com/
  auth:
    type: bearer
    env: TRACKER_TOKEN
  paginator: {type: offset, limit: 50, total_path: total}
resource_defaults:
  primary_key: id
resources:
  - name: projects
    endpoint: {path: projects, data_selector: data}
  - name: tickets
    endpoint:
      path: projects/{resources.projects.id}/tickets
      incremental: {cursor_path: updated_at, start_param: since}
"""


def test_a_valid_source_resolves_defaults_and_parents() -> None:
    source = parse_source(SOURCE)
    tickets = source.resolved(source.resources[1])
    assert tickets.parent == ("projects", "id") and tickets.key_fields == ["id"]
    assert tickets.endpoint.paginator is not None and tickets.endpoint.paginator.limit == 50
    assert source.table(tickets) == "tracker__tickets"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("env: TRACKER_TOKEN", "token: abc123"),
            ":4: client.auth: 'token' puts a credential in the file; write env",
        ),
        (("type: offset", "type: offst"), ":7: client.paginator.type: Input should be"),
        (("  - name: projects", "  - name: Projects"), ":11: resources.0.name: use lower-case"),
        (
            ("{resources.projects.id}", "{resources.nope.id}"),
            ":13: resources.1: 'tickets' refers to resource 'nope'",
        ),
        (
            ("  base_url:", "  headers: {Authorization: x}\n  base_url:"),
            ":3: client.headers: header 'Authorization' carries a credential",
        ),
    ],
)
def test_source_errors_name_the_line(change: tuple[str, str], expected: str) -> None:
    with pytest.raises(SourceError) as info:
        parse_source(SOURCE.replace(*change), "tracker.yaml")
    assert f"tracker.yaml{expected}" in str(info.value)


def test_not_yaml_names_the_line() -> None:
    with pytest.raises(
        SourceError, match=r"tracker.yaml:3: not valid YAML: expected .,. or .\]., but got .:."
    ):
        parse_source("name: t\nclient: [a\n  b: c\n", "tracker.yaml")


def test_ticket_default_counts_admission() -> None:
    assert Ticket(0, 3).sent_with == 0


def test_the_github_options_become_a_dialect_source() -> None:
    """``ingest github``'s options, the dialect's defaults for what they leave open,
    declare the source the REST engine runs with the GitHub dialect."""
    from ingest.rest import github
    from ingest.settings import Settings

    settings = Settings(github={"base_url": "https://ghe.test/api/v3"})
    source = github.github_source(
        settings.github,
        ["octo/a", "octo/b", "octo/a"],
        state="open",
        rate_limit_reserve=7,
        concurrency=9,
    )
    assert source.client.dialect == "github" and source.repos == ["octo/a", "octo/b"]
    assert source.client.base_url == "https://ghe.test/api/v3"  # the worker's API root
    assert source.table(source.resources[0]) == "pull_requests"
    assert github.state_of(source) == "open" and github.per_page_of(source) is None
    assert source.client.rate_limit.reserve == 7 and source.client.concurrency == 9
    fixed = github.github_source(
        settings.github, ["octo/a"], per_page=25, max_wait=0, limit_retries=2
    )
    assert github.per_page_of(fixed) == 25 and github.state_of(fixed) == "all"
    assert fixed.client.rate_limit.max_wait == 0 and fixed.client.rate_limit.retries == 2
    with pytest.raises(SourceError, match="repos: repository must look like owner/name"):
        github.github_source(settings.github, ["octo"])


def test_the_github_source_file_declares_what_the_command_runs() -> None:
    """The one GitHub source file and ``ingest github`` (its options left open: the
    dialect's defaults) declare the same client and listing: the file's knobs are the
    dialect's."""
    from ingest.rest import github
    from ingest.rest.source import load_source
    from ingest.settings import Settings

    path = Path(__file__).resolve().parents[3] / "sources" / "github.yaml"  # the project's
    filed = load_source(path)
    built = github.github_source(Settings().github, filed.repos)
    assert filed.client.base_url.rstrip("/") == built.client.base_url.rstrip("/")
    skip = {"base_url"}
    assert filed.client.model_dump(exclude=skip) == built.client.model_dump(exclude=skip)
    assert github.state_of(filed) == github.state_of(built) == "all"
    assert filed.client.rate_limit.retries == github.DEFAULTS["retries"]
    listing = filed.resolved(filed.resources[0]).endpoint
    assert listing.path == built.resources[0].endpoint.path


def test_a_sources_rate_limit_retries_is_its_clients() -> None:
    """``client.rate_limit.retries`` of a source is how many limit answers one request
    may take; left out, the ``rest_limit_retries`` setting; the plain dialect and
    GitHub's read them alike, with every REST source's timeout and retries."""
    from ingest.rest import github
    from ingest.rest.dialect import PLAIN
    from ingest.settings import Settings

    settings = Settings(rest={"limit_retries": 3, "timeout": 4.0, "max_attempts": 2})
    plain = parse_source(
        "client: {base_url: 'http://127.0.0.1:1/'}\nresources: [things]\n", "t.yaml"
    )
    setup = PLAIN.client_setup(RestConfig.of(settings), plain, None, None)
    assert (setup.limit_retries, setup.timeout, setup.retry.max_attempts) == (3, 4.0, 2)
    gh = github.github_source(settings.github, ["octo/a"], limit_retries=6)
    setup = github.GITHUB.client_setup(RestConfig.of(settings), gh, None, "ghp_" + "x" * 36)
    assert (setup.limit_retries, setup.timeout, setup.retry.max_attempts) == (6, 4.0, 2)
    assert setup.headers["X-GitHub-Api-Version"] and setup.who == github.WHO
    assert github.github_source(settings.github, ["octo/a"]).client.rate_limit.retries == 5


DIALECT = """name: gh
repos: [octo/a]
client: {dialect: github, base_url: "http://x/"}
resources:
  - name: pulls
    endpoint: {path: "repos/{repo}/pulls"}
"""


def test_a_dialect_source_file_is_checked_line_by_line() -> None:
    source = parse_source(DIALECT, "gh.yaml")
    assert source.repos == ["octo/a"] and source.client.auth is None  # unauthenticated
    with pytest.raises(SourceError, match="at least one repository"):
        parse_source(DIALECT.replace("[octo/a]", "[]"), "gh.yaml")
    with pytest.raises(SourceError, match="declares one resource, path repos/"):
        parse_source(DIALECT.replace("repos/{repo}/pulls", "repos/{repo}/issues"), "gh.yaml")
    with pytest.raises(SourceError, match=r"only a source of client\.dialect github"):
        parse_source(DIALECT.replace("dialect: github, ", ""), "gh.yaml")
    key = DIALECT.replace(
        'base_url: "http://x/"', 'base_url: "http://x/", auth: {type: api_key, env: K}'
    )
    with pytest.raises(SourceError, match="dialect github takes a bearer token"):
        parse_source(key, "gh.yaml")
