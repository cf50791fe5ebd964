"""Extraction bounded per run, not only per file, and sandboxed from the flow's secrets:
a text of combining marks is parsed in time in proportion to its length; a huge text is
cut in the worker and the row says so, and so are its pages, markdown and chunks; a
spent run budget leaves the remaining files to the next run; the parser's processes see
no credential of the flow's environment."""

from __future__ import annotations

import os
import unicodedata
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.extract.base import clean_text
from ingest.extract.batch import INTERRUPTED, extract_batch
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.extract.structure import rows as structure_rows
from ingest.settings import Settings
from tests.extract_support import layered_pdf

HOOK = "tests.extract_support:misbehaving_extractor"
SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "aws-secret-for-the-test-0123",
    "AWS_ACCESS_KEY_ID": "AKIAFORTHETEST0123",
    "GITHUB_TOKEN": "ghp_" + "t" * 36,
    "PREFECT_API_KEY": "pnu_for_the_test_0123456789",
    "PREFECT_API_AUTH_STRING": "admin:for-the-test-0123",
    "INGEST_GITHUB_TOKEN": "ghp_" + "i" * 36,
    "TRACKER_API_KEY": "a-source-key-0123456789",
}


def marks(n: int) -> str:
    """One letter and 2n combining marks whose classes (230, then 220) NFC must reorder:
    Python's normalisation sorts such a run in time growing with its square."""
    return "a" + "\u0301" * n + "\u0323" * n


def test_a_run_of_combining_marks_keeps_every_character() -> None:
    text = marks(100) + " ok"
    out = clean_text(text)
    assert unicodedata.is_normalized("NFC", out)
    kept = Counter(unicodedata.normalize("NFD", out.replace("\u034f", "")))
    assert kept == Counter(unicodedata.normalize("NFD", text))  # composed apart, none lost
    assert clean_text("cafe\u0301 \u1112\u1161\u11ab\u1100\u1173\u11af") == "café 한글"


def test_a_file_of_combining_marks_is_extracted_within_its_time_limit(tmp_path: Path) -> None:
    path = tmp_path / "marks.txt"
    path.write_text(marks(250_000), encoding="utf-8")  # 1 MB; minutes to normalise before
    with WorkerPool(PoolConfig(workers=1, time_limit=30)) as pool:
        (doc,) = extract_batch(
            Settings().extracting, "b", [("marks.txt", "e", str(path))], run_id="m", pool=pool
        )
    assert doc.status == "ok", doc.error
    assert doc.chars > 500_000


def test_a_huge_text_is_cut_in_the_worker_and_the_row_says_so(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("abcdefghij\n" * 200_000, encoding="utf-8")
    settings = Settings(extract={"max_chars": 100_000})
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        (doc,) = extract_batch(
            settings.extracting, "b", [("big.txt", "e", str(path))], run_id="c", pool=pool
        )
    assert doc.status == "ok"
    assert doc.chars == len(doc.text) == 100_000
    assert doc.metadata["text_cut"] == {"kept": 100_000, "chars": 2_199_999}
    assert any("text cut at 100,000" in w for w in doc.metadata["warnings"])


def test_pages_markdown_and_chunks_obey_the_same_bound(tmp_path: Path) -> None:
    # 60 pages of 1,599 characters (95,940 in all) and an HTML table 6x the bound.
    line = [f"line {i:02d}" + " pipe valve flange" * 4 for i in range(20)]
    (tmp_path / "many.pdf").write_bytes(layered_pdf([("text", line)] * 60))
    rows = "".join(f"<tr><td>valve {i}</td><td>DN{i}</td></tr>" for i in range(3000))
    (tmp_path / "wide.html").write_text(
        f"<html><body><h1>Valves</h1><table>{rows}</table></body></html>"
    )
    stored = [(n, "e", str(tmp_path / n)) for n in ("many.pdf", "wide.html")]
    settings = Settings(extract={"max_chars": 10_000}, chunk={"chars": 500, "overlap": 50})
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        pdf, html = extract_batch(settings.extracting, "b", stored, run_id="c", pool=pool)
    assert pdf.status == html.status == "ok"

    tables = structure_rows([pdf])
    pages = tables["document_pages"]
    assert pdf.pages == 60 and len(pages) == 7  # 6 whole pages and 424 characters of the 7th
    assert sum(p["chars"] for p in pages) == 10_000
    assert [p["text"] for p in pages[:6]] == ["\n".join(line)] * 6
    assert pages[6]["text"] == "\n".join(line)[: 10_000 - 6 * 1599]
    assert pdf.metadata["pages_cut"] == {"pages": 7, "of": 60, "kept": 10_000, "chars": 95_940}
    assert pdf.metadata["text_cut"]["kept"] == 10_000 == len(pdf.text)
    assert len(pdf.structure["markdown"]) == 10_000
    assert pdf.metadata["markdown_cut"]["chars"] > 95_940
    assert any("page texts cut at 10,000" in w for w in pdf.metadata["warnings"])
    chunks = tables["document_chunks"]
    assert {c["page_start"] for c in chunks} == set(range(1, 8))
    assert all(c["end"] <= pages[c["page_start"] - 1]["chars"] for c in chunks)

    # One page (the whole text) and a markdown rendition, each within the bound.
    (page,) = structure_rows([html])["document_pages"]
    assert page["text"] == html.text and len(html.text) <= 10_000
    assert html.structure["markdown"].startswith("# Valves\n\n| valve 0 | DN0 |")
    assert len(html.structure["markdown"]) == 10_000
    assert html.metadata["markdown_cut"]["chars"] > 60_000 and "text_cut" in html.metadata
    assert "pages_cut" not in html.metadata  # its one page is the cut text


def test_a_spent_run_budget_leaves_the_rest_to_the_next_run(tmp_path: Path) -> None:
    names = ["a-hang.txt", "b.txt", "c.txt", "d.txt"]
    stored = []
    for name in names:
        (tmp_path / name).write_text(f"text of {name}")
        stored.append((name, "e", str(tmp_path / name)))
    # one worker, two files handed over at a time: the second waits in the pool's queue
    # for the first, which hangs until the 2 s time limit, past the run's 1 s budget; the
    # third and fourth are not handed over once the budget is spent. The budget binds
    # where work starts: the second, queued in time, is not started when the worker is
    # free at 2 s either.
    settings = Settings(extract={"workers": 1, "run_budget": 1.0})
    warm = tmp_path / "warm.txt"
    warm.write_text("the worker is up")
    with WorkerPool(PoolConfig(workers=1, time_limit=2, preload=(HOOK,))) as pool:
        # the worker up before the run's budget starts: on a busy machine its start alone
        # could spend the 1 s, and then not even the first file would be handed over
        assert pool.submit(HOOK, str(warm), warm.name, 1, 1 << 20).result().status == "ok"
        docs = extract_batch(
            settings.extracting, "b", stored, run_id="budget", pool=pool, extractor=HOOK
        )
    by_key = {d.key: d for d in docs}
    assert [d.key for d in docs] == names
    assert "time limit" in (by_key["a-hang.txt"].error or "")
    for name in ("b.txt", "c.txt", "d.txt"):
        doc = by_key[name]
        assert doc.status == "timeout" and "extract_run_budget=1 s" in (doc.error or "")
        assert doc.extractor_version == INTERRUPTED  # the next run's find-changes picks it up
        assert doc.kind == "txt" and doc.bytes > 0


def test_files_queued_as_they_land_are_not_started_past_the_budget(tmp_path: Path) -> None:
    """Files go to the workers as they land, within seconds of the run's start, long before
    they are parsed: eleven 20 s parses ran under a 60 s budget. The budget is checked
    when a worker takes a job: a file still queued then becomes a ``budget`` row that the
    next run extracts."""
    from ingest.extract.batch import run_deadline, submit_parse
    from ingest.extract.landed import Landed

    names = ["a-hang.txt", "b.txt", "c.txt", "d.txt", "e.txt"]
    settings = Settings(extract={"workers": 1, "run_budget": 1.0})
    warm = tmp_path / "warm.txt"
    warm.write_text("the worker is up")
    with WorkerPool(PoolConfig(workers=1, time_limit=2, preload=(HOOK,))) as pool:
        assert pool.submit(HOOK, str(warm), warm.name, 1, 1 << 20).result().status == "ok"
        deadline = run_deadline(None, settings.extract.run_budget)  # the run starts now
        landed = Landed(
            lambda path, key: submit_parse(
                settings.extracting, pool, path, key, HOOK, start_by=deadline
            )
        )
        stored = []
        for name in names:  # all land (and are queued) at once, well within the budget
            path = tmp_path / name
            path.write_text(f"text of {name}")
            data = path.read_bytes()
            landed.land(str(path), name, len(data), data)
            stored.append((name, "e", str(path)))
        assert pool.pending == len(names)
        # the batch takes the parses its files' landings started
        docs = extract_batch(settings.extracting, "b", stored, run_id="r", pool=pool, landed=landed)
    by_key = {d.key: d for d in docs}
    assert "time limit" in (by_key["a-hang.txt"].error or "")
    for name in names[1:]:
        doc = by_key[name]
        assert doc.extractor == "budget" and doc.status == "timeout", doc
        assert doc.extractor_version == INTERRUPTED  # the next run extracts it


@pytest.fixture
def secrets() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in SECRETS}
    os.environ.update(SECRETS)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_workers_see_no_secret_of_the_flow(secrets: None) -> None:
    with WorkerPool(PoolConfig(workers=1, time_limit=30)) as pool:
        outcome = pool.submit("tests.extract_support:environment").result()
        assert outcome.status == "ok", outcome.error
        seen = outcome.value
        environs = [Path(f"/proc/{pid}/environ").read_bytes() for pid in pool.pids()]
    assert "PATH" in seen
    assert not set(SECRETS) & set(seen)
    for value in SECRETS.values():
        assert value not in repr(seen)
        assert all(value.encode() not in raw for raw in environs)
