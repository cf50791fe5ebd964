"""The last nights at a glance: freshness rows, the slow-night flag and the chart,
over real Delta tables in a temporary folder (no Prefect)."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ingest import storage
from ingest.records import TaskTiming
from ingest.report import chart, freshness, nights

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 11, 1, 17, 0, tzinfo=UTC)


def seed_nights(data_dir: Path, count: int, slow_night: int, rng: random.Random) -> list[dict]:
    """``count`` nights of two sources; on ``slow_night`` the s3 download stage grows."""
    rows = []
    for i in range(count):
        when = T0 + timedelta(days=i)
        for source in ("s3-ingest", "github-pulls"):
            run_id = f"{source}-{i}"
            stages = {"list-objects": rng.uniform(1.0, 1.5), "download-batch": rng.uniform(4, 6)}
            if source == "github-pulls":
                stages = {"fetch-pulls": rng.uniform(2.0, 3.0)}
            if source == "s3-ingest" and i == slow_night:
                stages["download-batch"] += 15.0  # the injected slow night
            start = when
            timings = []
            for task, wall in stages.items():
                timings.append(
                    TaskTiming(
                        flow_run_id=run_id,
                        flow_name=source,
                        task_run_id=f"{task}-{i}",
                        task_name=task,
                        started_at=start,
                        ended_at=start + timedelta(seconds=wall),
                        seconds=wall,
                    ).as_row()
                )
                start += timedelta(seconds=wall)
            storage.stage(data_dir, run_id, "task_timings", "t", timings)
            storage.commit_run(data_dir, run_id)
            rows.append(
                {
                    "source": source,
                    "target": "s3://b/p" if source == "s3-ingest" else "octo/engine",
                    "state": "completed",
                    "seconds": sum(stages.values()) + 0.5,
                    "rows_changed": rng.randint(0, 40),
                    "failed": 0,
                    "bytes": rng.randint(0, 10**7),
                    "flow_run_id": run_id,
                    "nightly_run_id": f"nightly-{i}",
                    "last_success": when,
                    "lag_seconds": 0.0,
                    "checked_at": when,
                }
            )
    storage.stage(data_dir, "seed", "source_nights", "nights", rows)
    storage.commit_run(data_dir, "seed")
    return rows


def test_a_slow_night_is_flagged_with_the_stage_that_grew(tmp_path: Path) -> None:
    rng = random.Random(12)
    rows = seed_nights(tmp_path, count=16, slow_night=12, rng=rng)
    last = nights.load(tmp_path)

    assert len(last) == 2 * nights.NIGHTS  # the last 14 of each source
    s3 = [n for n in last if n.source == "s3-ingest"]
    assert [n.flow_run_id for n in s3] == [f"s3-ingest-{i}" for i in range(2, 16)]
    slow = [n for n in last if n.slow]
    assert [(n.source, n.flow_run_id) for n in slow] == [("s3-ingest", "s3-ingest-12")]
    [n] = slow
    before = [r["seconds"] for r in rows if r["source"] == "s3-ingest"][2:12]
    assert n.median_before is not None and n.seconds > 2 * n.median_before
    assert sorted(before)[4] <= n.median_before <= sorted(before)[5]  # median of 10
    assert n.grown_stage == "download-batch" and 14.0 < n.grown_by < 17.0

    text = nights.markdown(last)
    slow_lines = [line for line in text.splitlines() if "slow:" in line]
    assert len(slow_lines) == 1 and "**download-batch**" in slow_lines[0]
    assert slow_lines[0].startswith(f"| {n.night} |")
    assert "### s3-ingest `s3://b/p`: 14 nights" in text, text
    assert "### github-pulls `octo/engine`: 14 nights" in text


def test_the_chart_draws_one_bar_per_source_and_night(tmp_path: Path) -> None:
    seed_nights(tmp_path, count=8, slow_night=6, rng=random.Random(3))
    last = nights.load(tmp_path)
    path = chart.write(tmp_path, last)
    root = ET.parse(path).getroot()  # well-formed SVG
    assert root.tag == f"{SVG}svg"
    bars = [r for r in root.iter(f"{SVG}rect") if "bar" in r.get("class", "").split()]
    assert len(bars) == len(last)
    drawn = {(b.get("data-source"), b.get("data-night")): b for b in bars}
    assert set(drawn) == {(n.source, n.night) for n in last}
    tallest = max(n.seconds for n in last)
    for n in last:
        bar = drawn[(n.source, n.night)]
        height = float(bar.get("height", "0"))
        assert abs(height - (chart.HEIGHT - chart.TOP - chart.BOTTOM) * n.seconds / tallest) < 0.1
        assert ("slow" in bar.get("class", "")) == n.slow
    assert [b.get("data-night") for b in bars if "slow" in b.get("class", "")] == [
        n.night for n in last if n.slow
    ]


def test_freshness_keeps_the_last_success_of_a_failed_source(tmp_path: Path) -> None:
    first = freshness.record(
        tmp_path,
        [freshness.SourceNight("s3-ingest", "s3://b/", "completed", rows_changed=7)],
        staged_by="n1",
    )
    storage.commit_run(tmp_path, "n1")
    [failed] = freshness.record(
        tmp_path,
        [freshness.SourceNight("s3-ingest", "s3://b/", "failed", rows_changed=0)],
        staged_by="n2",
    )
    storage.commit_run(tmp_path, "n2")
    assert failed.last_success == first[0].last_success
    assert failed.rows_changed == 7 and failed.lag_seconds is not None
    assert failed.lag_seconds >= 0
    stored = freshness.current(tmp_path)[("s3-ingest", "s3://b/")]
    assert stored["state"] == "failed" and stored["rows_changed"] == 7
    assert "| s3-ingest | s3://b/ |" in freshness.markdown([failed])


def test_one_night_and_a_near_zero_stage_read_right(tmp_path: Path) -> None:
    from ingest.report import history

    seed_nights(tmp_path, count=1, slow_night=-1, rng=random.Random(1))
    text = nights.markdown(nights.load(tmp_path))
    assert "### s3-ingest `s3://b/p`: 1 night\n" in text and "1 nights" not in text
    [row] = history.compare_stages(
        [{"stage": "commit-run", "wall_seconds": 0.21}],
        [{"stage": "commit-run", "wall_seconds": 0.001}],
    )
    assert row["change"] == "+0.21 s"  # no "+20900%" of a figure that rounds to 0.00


def test_each_target_has_its_own_nights_and_a_failed_night_is_marked(tmp_path: Path) -> None:
    """Two prefixes read by one source are two series (never compared with each other);
    a failed night keeps its counts and is drawn apart, in the UI's chart and the SVG."""
    rows = []
    for i, (target, state, seconds) in enumerate(
        [("s3://b/a/", "completed", 4.0), ("s3://b/big/", "completed", 40.0)] * 4
        + [("s3://b/a/", "failed", 2.0)]
    ):
        when = T0 + timedelta(hours=i)
        rows.append(
            {
                "source": "s3-ingest",
                "target": target,
                "state": state,
                "seconds": seconds,
                "rows_changed": 0,
                "failed": 3 if state == "failed" else 0,
                "bytes": 2048,
                "flow_run_id": f"run-{i}",
                "nightly_run_id": f"nightly-{i}",
                "last_success": when,
                "lag_seconds": 0.0,
                "checked_at": when,
            }
        )
    storage.stage(tmp_path, "seed", "source_nights", "nights", rows)
    storage.commit_run(tmp_path, "seed")
    last = nights.load(tmp_path)
    a = [n for n in last if n.target == "s3://b/a/"]
    assert len(a) == 5 and len(last) == 9
    assert not any(n.slow for n in last)  # 40 s of big/ is not a slow night of a/
    [failed] = [n for n in a if n.state == "failed"]
    assert (failed.failed, failed.bytes) == (3, 2048)

    text = nights.markdown(last)
    section = text.split("### s3-ingest `s3://b/a/`: 5 nights", 1)[1].split("###", 1)[0]
    chart_rows = [line for line in section.splitlines() if "█" in line or "░" in line][1:]
    assert len(chart_rows) == 5
    assert chart_rows[-1].endswith("| 2.00 | **FAILED** |") and "░" in chart_rows[-1]
    assert "█" * nights.BAR_CHARS in chart_rows[0]  # the longest night of a/ is full width
    assert f"| {failed.night} | `run-8` | failed | 2.00 | 0.50x | 0 | 3 | 2.0 KB |  |" in section

    root = ET.fromstring(chart.svg(last))
    marked = [r for r in root.iter(f"{SVG}rect") if "failed" in r.get("class", "").split()]
    assert [(m.get("data-source"), m.get("data-night")) for m in marked] == [
        ("s3-ingest", failed.night)
    ]
