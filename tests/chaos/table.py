"""Turn the suite's results (``chaos-results.json``) into the table of "Faults it survives".

``python -m tests.chaos.table chaos-results.json [docs/reliability.md]`` prints the
table and, given a page, replaces the part between ``<!-- chaos-table -->`` and
``<!-- /chaos-table -->`` with it (machine and date included). A page without both
markers is left as it is and the command fails, so a moved table is never lost silently.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

START, END = "<!-- chaos-table -->", "<!-- /chaos-table -->"


def render(data: dict[str, Any]) -> str:
    by_fault: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in data["trials"]:
        by_fault[t["fault"]].append(t)
    lines = [
        "| fault | trials | ended as they should | lost (target 0) | duplicates (target 0) "
        "| partial files / versions seen (target 0) | time to recover (median, max) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for fault, ts in by_fault.items():
        times = sorted(t["recover_seconds"] for t in ts)
        median = times[len(times) // 2]
        name = fault
        lines.append(
            f"| {name} | {len(ts)} | {sum(t['ended_as_expected'] for t in ts)} "
            f"| {sum(t['lost'] for t in ts)} | {sum(t['duplicates'] for t in ts)} "
            f"| {sum(t['partial'] for t in ts)} | {median:.1f} s, {times[-1]:.1f} s |"
        )
    landed = [
        f"- {fault}: "
        + ", ".join(f"{stage} {n}" for stage, n in Counter(t["stage"] for t in ts).items())
        for fault, ts in by_fault.items()
        if any(t.get("stage") for t in ts)
    ]
    if landed:
        lines += ["", "Where the faults landed (stage read from the run's log at the fault):", ""]
        lines += landed
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    lines.append("")
    lines.append(f"Measured {day} on {machine} (`make chaos`, seed {data.get('seed')}).")
    return "\n".join(lines)


PAGE = Path("docs/reliability.md")  # where `make chaos` writes the table


def write_table(page: Path, table: str) -> None:
    """Replace the part of ``page`` between the markers with ``table``."""
    text = page.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{page}: no {START} ... {END} markers to write the table between")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{START}\n{table}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str]) -> None:
    data = json.loads(Path(argv[0]).read_text())
    table = render(data)
    print(table)
    if len(argv) > 1:
        write_table(Path(argv[1]), table)


if __name__ == "__main__":
    main(sys.argv[1:])
