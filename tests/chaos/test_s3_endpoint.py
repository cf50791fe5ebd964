"""The S3 endpoint misbehaving: throttling and 5xx at 5 % and 30 % of requests,
connections reset mid-body, bodies that stall past the read timeout, a wrong
``Content-Length``, objects changed or deleted between the listing and the GET,
credentials that expire mid-run.

Each trial runs the s3-ingest flow through the fault proxy with a seeded plan,
then again with no fault, and compares what is stored with the bucket.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from dev.servers.faultproxy import FaultProxy
from flows.s3_ingest import s3_ingest
from ingest.errors import IngestError
from tests.chaos.support import Trial, check_s3, record, rng, timed, trials
from tests.helpers import body_for, put_many, rows

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

OBJECTS = 40


def seed_bucket(upstream: Any, n: int = OBJECTS, size: int = 40_000) -> str:
    bucket = f"chaos-{uuid.uuid4().hex[:10]}"
    upstream.create_bucket(Bucket=bucket)
    put_many(upstream, bucket, {f"d/{i:03d}.bin": body_for(f"{bucket}{i}", size) for i in range(n)})
    return bucket


def run(
    bucket: str, proxy: FaultProxy, data_dir: Path, **kw: Any
) -> tuple[Any, BaseException | None]:
    """The flow as a deployment runs it; the summary, or the error the person sees."""
    try:
        return s3_ingest(
            bucket=bucket, endpoint_url=proxy.url, data_dir=str(data_dir), extract=False, **kw
        ), None
    except IngestError as exc:
        return None, exc


# (name, rules, what the faulty run must end as: "complete" = every object downloaded,
# "rows" = the run ends (or fails past max_failed_ratio) with failures as error rows)
SCENARIOS = [
    ("5% of requests 500/503/SlowDown", [{"kind": "throttle", "p": 0.05}], "complete", 4, 1),
    ("30% of requests 500/503/SlowDown", [{"kind": "throttle", "p": 0.30}], "rows", 4, 0),
    (
        "connection reset mid-body",
        [{"kind": "reset", "on": "get", "p": 0.2, "times": 1}],
        "complete",
        3,
        1,
    ),
    (
        "body stalls past the read timeout",
        [{"kind": "stall", "on": "get", "p": 0.1, "times": 1, "seconds": 8}],
        "complete",
        3,
        0,
    ),
    (
        "Content-Length longer than the body",
        [{"kind": "long", "on": "get", "p": 0.2, "times": 1}],
        "complete",
        3,
        0,
    ),
    (
        "Content-Length shorter than the body",
        [{"kind": "short", "on": "get", "p": 0.2, "times": 1}],
        "complete",
        3,
        0,
    ),
    (
        "object changed between listing and GET",
        [{"kind": "change", "on": "get", "p": 0.1, "times": 1}],
        "rows",
        3,
        0,
    ),
    (
        "object deleted between listing and GET",
        [{"kind": "delete", "on": "get", "p": 0.1, "times": 1}],
        "rows",
        3,
        0,
    ),
]


@pytest.mark.parametrize(
    ("fault", "rules", "expect", "full", "quick"), SCENARIOS, ids=[s[0] for s in SCENARIOS]
)
def test_endpoint_fault_then_clean_rerun(
    fault: str,
    rules: list[dict[str, Any]],
    expect: str,
    full: int,
    quick: int,
    clean_proxy: FaultProxy,
    s3: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = trials(full, quick)
    if not n:
        pytest.skip("runs under make chaos")
    monkeypatch.setenv("INGEST_S3_READ_TIMEOUT", "2")
    r = rng(fault)
    problems = []
    for i in range(n):
        seed = r.randrange(1 << 30)
        bucket = seed_bucket(s3)
        data_dir = tmp_path / f"t{i}"
        clean_proxy.plan(rules, seed=seed)
        summary, error = run(bucket, clean_proxy, data_dir)
        fired = clean_proxy.stats()
        clean_proxy.plan([])
        with timed() as took:
            again, again_error = run(bucket, clean_proxy, data_dir)
        check = check_s3(s3, bucket, data_dir)
        failed = rows(data_dir, "SELECT key, error FROM s3_object_log WHERE status = 'failed'")
        unexplained = [f for f in failed if not _names_cause(f["error"] or "")]
        if expect == "complete":
            ended = error is None and summary.counts.get("failed", 0) == 0
        else:
            ended = (error is None or "failed" in str(error)) and not unexplained
        ended = ended and again_error is None and again.counts.get("failed", 0) == 0
        trial = record(
            Trial(
                fault,
                point=f"seed {seed}: {fired}",
                ended_as_expected=ended,
                lost=check.lost,
                duplicates=check.duplicates,
                partial=check.partial,
                recover_seconds=took[0],
                note=str(error or "")[:200],
            )
        )
        if not (ended and check.clean):
            problems.append((trial, check.detail, unexplained[:3], again_error))
    assert not problems, problems


def _names_cause(error: str) -> bool:
    causes = (
        "SlowDown",
        "InternalError",
        "ServiceUnavailable",
        "500",
        "503",
        "changed",
        "NoSuchKey",
        "Integrity",
        "Precondition",
    )
    return any(c in error for c in causes)


def test_credentials_expiring_mid_run_stop_it_with_one_clear_error(
    clean_proxy: FaultProxy, s3: Any, tmp_path: Path
) -> None:
    """Every request after the N-th answers 403 ExpiredToken: the run stops early and
    says so, instead of writing one failed row per remaining object."""
    fault = "credentials expire mid-run (403)"
    r = rng(fault)
    problems = []
    for i in range(trials(4, 1)):
        after = r.randrange(3, 20)
        bucket = seed_bucket(s3, n=120, size=5_000)
        data_dir = tmp_path / f"t{i}"
        clean_proxy.plan([{"kind": "expire", "after": after}])
        summary, error = run(bucket, clean_proxy, data_dir, concurrency=4)
        clean_proxy.plan([])
        failed = rows(data_dir, "SELECT count(*) n FROM s3_object_log WHERE status = 'failed'")[0][
            "n"
        ]
        with timed() as took:
            _again, again_error = run(bucket, clean_proxy, data_dir)
        check = check_s3(s3, bucket, data_dir)
        message = str(error or "")
        ended = (
            error is not None
            and "ExpiredToken" in message
            and "credentials" in message.lower()
            and failed <= 8
            and again_error is None
        )
        trial = record(
            Trial(
                fault,
                point=f"after {after} requests",
                ended_as_expected=ended,
                lost=check.lost,
                duplicates=check.duplicates,
                partial=check.partial,
                recover_seconds=took[0],
                note=f"{failed} failed rows; {message[:160]}",
            )
        )
        if not (ended and check.clean):
            problems.append((trial, check.detail, summary and summary.counts))
    assert not problems, problems
