"""Files settled as they land (``ingest.extract.landed``): the first bytes a download had
in hand decide the same row as the file would, the downloader hands them over for each
small object once it is in place (and for nothing else), and a batch's extraction takes
those outcomes instead of opening the files again. Real GETs against the moto server on
loopback for the downloader; no Prefect."""

from __future__ import annotations

import hashlib
import os
import random
import time
from pathlib import Path
from typing import Any

from ingest import s3 as s3lib
from ingest.extract import extract_by_head, settle_by_head
from ingest.extract.batch import extract_batch, parse_as_landed
from ingest.extract.detect import HEAD
from ingest.extract.landed import Landed
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.records import S3Object
from ingest.s3 import keys
from ingest.settings import Settings
from tests.ingest.extract.test_extract_by_head import candidates, generated
from tests.ingest.s3.test_request_lanes import listed

MiB = 1024 * 1024


def test_the_first_bytes_in_hand_decide_what_the_file_would(tmp_path: Path) -> None:
    decided = 0
    for path in candidates(tmp_path):
        data = path.read_bytes()
        from_file = extract_by_head(path, path.name)
        in_hand = settle_by_head(data[:HEAD], len(data), path.name)
        assert (from_file is None) == (in_hand is None), path.name
        if from_file is not None and in_hand is not None:
            decided += 1
            assert (in_hand.kind, in_hand.status, in_hand.error, in_hand.text) == (
                from_file.kind,
                from_file.status,
                from_file.error,
                from_file.text,
            ), path.name
    assert decided >= 5


def test_a_download_hands_over_each_small_objects_first_bytes_once_in_place(
    s3: Any, s3_server: Any, bucket: str, tmp_path: Path
) -> None:
    bodies = {f"small/{i:02d}.bin": random.Random(i).randbytes(50 + 900 * i) for i in range(12)}
    bodies["small/empty.bin"] = b""
    bodies["large/ranged.bin"] = os.urandom(2 * MiB + 10)  # two ranges: not handed over
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    ranges = {"range_threshold": MiB, "range_size": MiB}  # 1 MiB and up: ranged
    settings = Settings(data_dir=tmp_path / "data", s3={"endpoint_url": s3_server.url, **ranges})
    root = tmp_path / "objects"
    objs = [listed(s3, bucket, k) for k in sorted(bodies)]
    first = objs[0]
    stale = S3Object(bucket, "small/stale.bin", "0" * 32, 10, first.last_modified)
    s3.put_object(Bucket=bucket, Key=stale.key, Body=b"0123456789")
    jobs = [(o, keys.local_path_for(o.key, "", root)) for o in [*objs, stale]]
    handed: dict[str, tuple[str, bytes, bytes]] = {}

    def on_landed(obj: S3Object, dest: str, head: bytes) -> None:
        # called once the file is in place, under its final name
        handed[obj.key] = (dest, head, Path(dest).read_bytes())

    with s3lib.S3Connection.open(settings.s3) as conn:
        outcomes = s3lib.BatchDownloader(conn, root).run(jobs, on_landed, 1000)
    fetched = {o.key for o, _, r in outcomes if isinstance(r, s3lib.Fetched)}
    assert fetched == set(bodies)  # the stale one failed: its etag is not the object's
    assert set(handed) == {k for k in bodies if k.startswith("small/")}
    for key, (dest, head, on_disk) in handed.items():
        assert dest == keys.local_path_for(key, "", root)
        assert on_disk == bodies[key], key
        assert head == bodies[key][:1000], key  # the first 1000 bytes, or all of a shorter one
    assert all(r.head == b"" for _, _, r in outcomes if isinstance(r, s3lib.Fetched))


def test_a_batch_takes_what_landed_instead_of_reading_those_files(tmp_path: Path) -> None:
    files = generated(tmp_path)
    landed = Landed()
    sizes, parsed = {}, 0
    for p in files:
        data = p.read_bytes()
        sizes[p.name] = len(data)
        parsed += settle_by_head(data[:HEAD], len(data), p.name) is None
        landed.land(str(p), f"incoming/{p.name}", len(data), data[:HEAD])
    # Overwritten after landing: a batch that read them again would see text, not these
    # bytes (a stand-in for "not opened": the landed outcome is the one stored).
    for name in ("random.bin", "drawing.dwg"):
        (tmp_path / name).write_bytes(b"now a plain text file\n" * 50)
    stored = [(p.name, f"etag-{i}", str(p)) for i, p in enumerate(files)]
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        docs = {
            d.key: d
            for d in extract_batch(
                Settings().extracting, "b", stored, run_id="r", pool=pool, landed=landed
            )
        }
        jobs = pool.stats.jobs
    assert docs["random.bin"].status == "unsupported"
    assert docs["random.bin"].bytes == sizes["random.bin"]  # the landed size, not the file's
    assert "DWG" in (docs["drawing.dwg"].error or "")
    assert docs["empty.docx"].status == "empty"
    assert docs["note.txt"].status == "ok"  # not decided by its head: parsed as before
    assert jobs == parsed < len(files)  # only what the heads did not decide went to a worker
    # each landed outcome is taken once
    assert all(landed.take(str(p)) is None for p in files)
    # without them the same batch reads the files as they are now
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        again = {
            d.key: d
            for d in extract_batch(Settings().extracting, "b", stored, run_id="r", pool=pool)
        }
    assert again["random.bin"].status == "ok" and again["random.bin"].kind == "txt"


def test_without_workers_a_file_its_head_does_not_decide_waits_for_its_batch(
    tmp_path: Path,
) -> None:
    landed = Landed()  # no parse: as a batch whose extraction has no pool of its own
    text = b"plain words\n" * 100
    landed.land(str(tmp_path / "a.txt"), "a.txt", len(text), text[:HEAD])
    pdf = b"%PDF-1.4\n" + hashlib.sha256(b"x").digest()
    landed.land(str(tmp_path / "b.pdf"), "b.pdf", len(pdf), pdf)
    blob = random.Random(3).randbytes(5000)
    landed.land(str(tmp_path / "c.bin"), "c.bin", len(blob), blob[:HEAD])
    for name, size in (("a.txt", len(text)), ("b.pdf", len(pdf))):
        lg = landed.take(str(tmp_path / name))
        assert lg is not None and (lg.size, lg.outcome, lg.parsing) == (size, None, None)
    hit = landed.take(str(tmp_path / "c.bin"))
    assert hit is not None and hit.size == 5000
    assert hit.outcome is not None and hit.outcome.status == "unsupported"
    assert landed.take(str(tmp_path / "c.bin")) is None  # taken once


def test_a_file_a_parser_reads_is_parsed_as_it_lands_and_not_again(tmp_path: Path) -> None:
    texts = {f"note-{i}.txt": (f"note {i}, plain words\n" * (20 + i)).encode() for i in range(4)}
    paths = []
    for name, body in texts.items():
        (tmp_path / name).write_bytes(body)
        paths.append(tmp_path / name)
    blob = tmp_path / "blob.bin"
    blob.write_bytes(random.Random(7).randbytes(3000))
    settings = Settings()
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        parse = parse_as_landed(settings.extracting, lambda: pool, lambda: None)
        started: list[Any] = []

        def parse_and_keep(path: str, key: str) -> Any:
            started.append(parse(path, key))
            return started[-1]

        landed = Landed(parse_and_keep)
        for p in [*paths, blob]:
            data = p.read_bytes()
            landed.land(str(p), p.name, len(data), data[:HEAD])
        # every text file went to the workers as it landed (the blob's head decided it):
        # their parses end with no extraction asked for yet
        assert len(started) == len(paths)
        for future in started:
            assert future.result(timeout=60).status == "ok"
        assert pool.stats.jobs == len(paths)
        stored = [(p.name, f"e{i}", str(p)) for i, p in enumerate([*paths, blob])]
        docs = {
            d.key: d
            for d in extract_batch(
                settings.extracting, "b", stored, run_id="r", pool=pool, landed=landed
            )
        }
        assert pool.stats.jobs == len(paths)  # none parsed twice, the blob by its head
    assert {docs[p.name].status for p in paths} == {"ok"}
    assert all(docs[p.name].chars > 0 for p in paths)
    assert docs["blob.bin"].status == "unsupported"


def test_once_the_budget_is_spent_nothing_starts_parsing_as_it_lands(tmp_path: Path) -> None:
    note = tmp_path / "note.txt"
    note.write_bytes(b"plain words\n" * 50)
    settings = Settings(extract={"run_budget": 1.0})
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        landed = Landed(
            parse_as_landed(settings.extracting, lambda: pool, lambda: time.monotonic() - 5)
        )
        data = note.read_bytes()
        landed.land(str(note), note.name, len(data), data[:HEAD])
        assert pool.stats.jobs == 0 and pool.pending == 0
    lg = landed.take(str(note))
    assert lg is not None and lg.parsing is None and lg.outcome is None
