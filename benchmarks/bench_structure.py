"""Structured outputs benchmark: extraction with pages, chunks, markdown, drawing data and
metadata against the text-only extraction of an earlier revision, in one run.

The text-only side is the project's own code at ``--baseline`` (a git revision from
before the structured outputs; its ``ingest`` package is exported with ``git archive``
into a temporary folder), the structured side this checkout's. Each side runs in a child
process of its own (one core, one file at a time, the files read from disk), so their
CPU time and peak memory are their own: the same corpus as ``bench_extract`` (the shared
fixtures, the demo samples and generated Korean documents, ``--copies`` times), the sides
alternating for ``--rounds`` rounds.

* text-only: ``extract_stored`` of the baseline (text, page count, metadata);
* structured: ``extract_stored`` of this checkout (the same plus pages, markdown, chunks,
  drawing attributes and header data, common metadata), with the batch's bound on text,
  pages and markdown (``extract_max_chars``), then the rows of the structured tables
  built from it, as the batch does (``ingest.extract.structure.rows``).

Each child reports wall and CPU seconds, its peak resident memory (``VmHWM`` of
``/proc/self/status``, its own: ``ru_maxrss`` would also count the parent's memory at the
fork, which Linux carries over the exec) and the pickled size of what a worker sends back
per document. ``python -m
benchmarks.bench_structure`` writes ``benchmarks/structure.md`` and
``benchmarks/.work/structure.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.bench_extract import ROOT, WORK, build_corpus
from benchmarks.measure import cpu_model
from ingest.settings import ExtractSettings

OUT = Path(__file__).resolve().parent / "structure.md"
# The batch's default bound (Settings.extract.max_chars), handed to the structured child
# on its command line: importing the settings there would add their memory to its peak.
MAX_CHARS = ExtractSettings.model_fields["max_chars"].default

CHILD = r"""
import json, pickle, resource, sys, time
from ingest.extract import extract_stored

def peak_mb():
    # This process's own high-water mark (VmHWM, reset by exec); ru_maxrss would also
    # count the parent's memory at the fork that started this child (Linux keeps it).
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

structured = sys.argv[1] == "structured"
extra = {}
if structured:
    from ingest.extract.structure import rows
    from ingest.records import Document
    # The bound the batch passes (extract_max_chars): text, pages and markdown are cut.
    extra = {"max_chars": int(sys.argv[2])}
files = json.loads(sys.stdin.read())
for path in files[:5]:  # warm the imports and caches, as a warm worker is
    extract_stored(path, path.rsplit("/", 1)[-1], 5000, 32 << 20, **extra)
before = peak_mb()
wall, cpu = time.perf_counter(), time.process_time()
payload = 0
outputs = {}
for path in files:
    x = extract_stored(path, path.rsplit("/", 1)[-1], 5000, 32 << 20, **extra)
    payload += len(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL))
    if structured:
        doc = Document(bucket="b", key=path, etag="e", kind=x.kind, status=x.status,
                       text=x.text, extractor=x.extractor, structure=x.structure)
        for table, found in rows([doc]).items():
            outputs[table] = outputs.get(table, 0) + len(found)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
peak = peak_mb()
print(json.dumps({"wall": wall, "cpu": cpu, "peak_mb": peak, "grew_mb": peak - before,
                  "payload": payload,
                  "rows": outputs}))
"""


def export_baseline(revision: str, folder: Path) -> Path:
    """The ``ingest`` package as it was at ``revision``, in ``folder``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "ingest"],
        check=True,
        capture_output=True,
    ).stdout
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def run_side(side: str, tree: Path, files: list[Path]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-P", "-c", CHILD, side, str(MAX_CHARS)],
        input=json.dumps([str(f) for f in files]),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(r: dict[str, Any]) -> str:
    t, s = r["text_only"], r["structured"]
    lines = [
        "# Structured outputs benchmark",
        "",
        f"Run {r['when']} on {r['cpu']} ({r['cores']} cores), Python {r['python']}, load "
        "average at start "
        f"{r['load']:.1f} (a machine shared with other runs); `{r['command']}`.",
        "",
        f"Corpus: {r['files']} files, {r['mb']:.1f} MB ({r['distinct']} distinct documents x "
        f"{r['copies']} copies: the shared fixtures, the demo samples and generated Korean "
        "PDF/DXF/DOCX). Text-only: this project's extractor at "
        f"`{r['baseline']}` (before the structured outputs); structured: this checkout, "
        "including the rows of the structured tables. One child process per side and "
        f"round, one core, sides alternating; medians of {r['rounds']} rounds.",
        "",
        "| side | wall s | CPU s | peak RSS MB | worker reply per document, KB |",
        "|---|---:|---:|---:|---:|",
        f"| text-only | {t['wall']:.2f} | {t['cpu']:.2f} | {t['peak_mb']:.0f} | "
        f"{t['payload'] / r['files'] / 1024:.1f} |",
        f"| structured | {s['wall']:.2f} | {s['cpu']:.2f} | {s['peak_mb']:.0f} | "
        f"{s['payload'] / r['files'] / 1024:.1f} |",
        "",
        f"- Structured / text-only time: **{r['ratio_wall']:.2f}x** wall, "
        f"**{r['ratio_cpu']:.2f}x** CPU (target <= 1.3x); per round (CPU): "
        f"{', '.join(f'{x:.2f}' for x in r['ratios_cpu'])}.",
        f"- Peak memory of the process (its own VmHWM): {t['peak_mb']:.0f} MB text-only, "
        f"{s['peak_mb']:.0f} MB structured (the structured side also imports the lake's "
        "libraries, pyarrow and deltalake, for the rows; a pool worker does not); growth "
        f"over the corpus, after the imports and a warm-up: {t['grew_mb']:.0f} MB "
        f"text-only, {s['grew_mb']:.0f} MB structured.",
        f"- Rows of the structured tables per run over the corpus: {s['rows']}.",
        "",
        "The worker sends back the pages, chunk spans (page, start, end, heading: not their "
        "text), markdown and drawing data with the text, so a reply is about the text's "
        "size times the share that pages and markdown repeat.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="main", help="git revision of the text-only side")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-structure-") as tmp:
        files = build_corpus(Path(tmp) / "corpus", args.copies)
        baseline = export_baseline(args.baseline, Path(tmp) / "baseline")
        rounds: list[dict[str, Any]] = []
        for i in range(args.rounds):
            order = ["text_only", "structured"] if i % 2 == 0 else ["structured", "text_only"]
            got = {}
            for side in order:
                tree = baseline if side == "text_only" else ROOT
                got[side] = run_side("structured" if side == "structured" else "text", tree, files)
            rounds.append(got)
        mb = sum(f.stat().st_size for f in files) / 1e6

    def med(side: str, key: str) -> float:
        return statistics.median(r[side][key] for r in rounds)

    result: dict[str, Any] = {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "load": os.getloadavg()[0],
        "command": "python -m benchmarks.bench_structure " + " ".join(argv or sys.argv[1:]),
        "files": len(files),
        "distinct": len(files) // args.copies,
        "copies": args.copies,
        "mb": mb,
        "rounds": args.rounds,
        "baseline": args.baseline,
        "text_only": {
            k: med("text_only", k) for k in ("wall", "cpu", "peak_mb", "grew_mb", "payload")
        },
        "structured": {
            **{k: med("structured", k) for k in ("wall", "cpu", "peak_mb", "grew_mb", "payload")},
            "rows": rounds[-1]["structured"]["rows"],
        },
        "ratios_cpu": [r["structured"]["cpu"] / r["text_only"]["cpu"] for r in rounds],
    }
    result["ratio_cpu"] = statistics.median(result["ratios_cpu"])
    result["ratio_wall"] = statistics.median(
        r["structured"]["wall"] / r["text_only"]["wall"] for r in rounds
    )
    (WORK / "structure.json").write_text(json.dumps({"result": result, "rounds": rounds}))
    text = markdown(result)
    print(text)
    if not args.no_write:
        OUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
