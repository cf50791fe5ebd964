"""``kill -9`` of ``ingest s3`` while a big object comes in slowly: the next run fetches
only the bytes the killed one had not written (the Range headers the S3 server saw)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from dev.servers.faultproxy import FaultProxy
from dev.servers.s3 import DevServer
from flows.s3_ingest import s3_ingest
from ingest.s3.keys import TMP_DIR_NAME
from ingest.s3.resume import Journal
from tests.helpers import body_for, harness_api_url, run_cli
from tests.ingest.s3.test_s3_resume import asked
from tests.ingest.s3.test_s3_verify import listed
from tests.scripted_server import wait_for

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

MiB = 1024 * 1024
RANGES = {"INGEST_S3_RANGE_THRESHOLD": str(MiB), "INGEST_S3_RANGE_SIZE": str(MiB)}


def written(journal_file: Path) -> int:
    """Bytes a journal records as written (its lines after the header)."""
    total = 0
    for line in journal_file.read_text().split("\n")[1:-1]:
        start, _, end = line.partition(" ")
        total += int(end) - int(start)
    return total


def test_a_killed_run_s_big_download_resumes_where_it_stopped(
    s3_server: DevServer, s3: Any, bucket: str, data_dir: Path, monkeypatch
) -> None:
    body = body_for("slow", 3 * MiB + 7)
    s3.put_object(Bucket=bucket, Key="drawings/big.dwg", Body=body)
    s3.put_object(Bucket=bucket, Key="drawings/small.txt", Body=b"small")
    obj = listed(s3, bucket, "drawings/big.dwg")
    with FaultProxy(s3_server.url) as proxy:
        # 32 KiB every 0.2 s per range: each 1 MiB range takes ~6 s.
        proxy.plan(
            [{"kind": "slow", "match": "big.dwg", "on": "get", "seconds": 0.2, "piece": 32768}]
        )
        args = ["s3", "--bucket", bucket, "--endpoint-url", proxy.url, "--data-dir", str(data_dir)]
        proc = run_cli(args, env={"PREFECT_API_URL": harness_api_url(), **RANGES})
        tmp = data_dir / "objects" / bucket / TMP_DIR_NAME
        try:

            def half_way() -> bool:
                journals = list(tmp.glob("resume-*.part.done")) if tmp.is_dir() else []
                return bool(journals) and written(journals[0]) >= MiB

            wait_for(half_way, timeout=120)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == -signal.SIGKILL
        assert not (data_dir / "objects" / bucket / "drawings" / "big.dwg").exists()

        journal = Journal.open(data_dir / "objects" / bucket, obj)
        assert journal is not None
        on_disk, resumed = journal.done, journal.resumed
        journal.close()
        assert MiB <= resumed < len(body)

        proxy.plan([])  # no slowness, counters reset
        for name, value in RANGES.items():
            monkeypatch.setenv(name, value)
        summary = s3_ingest(bucket=bucket, endpoint_url=proxy.url, data_dir=str(data_dir))
        assert summary.counts.get("failed", 0) == 0
        assert (data_dir / "objects" / bucket / "drawings" / "big.dwg").read_bytes() == body
        again = asked(proxy, "big.dwg")
    # The rerun asked for exactly the bytes the killed run had not written.
    assert sum(e - s for s, e in again) == len(body) - resumed
    assert all(e <= a or s >= b for s, e in again for a, b in on_disk)
    assert not list(tmp.glob("resume-*"))
