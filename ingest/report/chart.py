"""A small SVG bar chart of the nights' durations, one bar per source and night.

Hand-written SVG (a few dozen elements) rather than a plotting library: the
chart is simple and the project has no plotting dependency. Each bar carries
its figures as ``data-*`` attributes and a ``<title>`` (the tooltip), and a
slow night's bar has the class ``slow``, so what is drawn can be checked
against the data.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from ingest.report.nights import Night

WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 28, 48
COLOURS = ("#4878d0", "#ee854a", "#6acc64", "#d65f5f", "#956cb4")
SLOW_COLOUR = "#c00000"
# A failed night's bar: pale, with a dashed black outline.
FAILED_STYLE = ' fill-opacity="0.3" stroke="#000" stroke-dasharray="3 2"'


def slots(nights: Sequence[Night]) -> list[tuple[str, str]]:
    """One slot per nightly run, oldest first: (run id, label). Runs of the same date each
    get their own slot, labelled ``MM-DD #2`` and so on, instead of being drawn over one
    another."""
    order: dict[str, tuple[str, int]] = {}
    for series in dict.fromkeys(n.series for n in nights):
        mine = [n for n in nights if n.series == series]  # oldest first
        for i, n in enumerate(mine):
            key = n.nightly_run_id or n.flow_run_id
            rank = (n.night, i - len(mine))  # the newest of each source last
            order[key] = max(order.get(key, rank), rank)
    runs = sorted(order, key=lambda k: order[k])
    out: list[tuple[str, str]] = []
    for key in runs:
        day = order[key][0]
        same = [k for k in runs if order[k][0] == day]
        label = day[5:] if len(same) == 1 else f"{day[5:]} #{same.index(key) + 1}"
        out.append((key, label))
    return out


def table(nights: Sequence[Night]) -> list[dict[str, object]]:
    """The chart's figures as rows (a table artifact the UI shows): one per bar."""
    labels = dict(slots(nights))
    return [
        {
            "night": labels[n.nightly_run_id or n.flow_run_id],
            "source": n.source,
            "target": n.target,
            "seconds in Running": round(n.seconds, 2),
            "state": n.state,
            "slow": "slow" if n.slow else "",
            "flow run": n.flow_run_id,
        }
        for n in nights
    ]


def svg(nights: Sequence[Night], title: str = "Nightly duration per source (s)") -> str:
    """The chart as SVG text."""
    sources = list(dict.fromkeys(n.series for n in nights))
    columns = slots(nights)
    days = [key for key, _ in columns]
    top = max((n.seconds for n in nights), default=0.0) or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(days), 1)
    bar = slot * 0.8 / max(len(sources), 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<text x="{LEFT}" y="16" font-size="13">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}" '
        'stroke="#333"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#333"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{top:.1f}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end">0</text>',
    ]
    for i, (_key, label) in enumerate(columns):
        x = LEFT + i * slot + slot / 2
        parts.append(
            f'<text x="{x:.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">{escape(label)}</text>'
        )
    for n in nights:
        s = sources.index(n.series)
        h = plot_h * n.seconds / top
        x = LEFT + days.index(n.nightly_run_id or n.flow_run_id) * slot + slot * 0.1 + s * bar
        failed = n.state != "completed"
        colour = SLOW_COLOUR if n.slow else COLOURS[s % len(COLOURS)]
        tip = f"{n.series} {n.night}: {n.seconds:.2f} s, {n.state}"
        if n.slow and n.grown_stage:
            tip += f", slow ({n.grown_stage} grew)"
        parts.append(
            f'<rect class="bar{" slow" if n.slow else ""}{" failed" if failed else ""}" '
            f'x="{x:.1f}" y="{TOP + plot_h - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
            f'fill="{colour}"{FAILED_STYLE if failed else ""} '
            f"data-source={quoteattr(n.source)} data-night={quoteattr(n.night)} "
            f'data-seconds="{n.seconds:.3f}"><title>{escape(tip)}</title></rect>'
        )
    # The legend: (fill, style, label, room it takes) of each entry, left to right.
    legend = [(COLOURS[s % len(COLOURS)], "", source, 150) for s, source in enumerate(sources)]
    legend += [(SLOW_COLOUR, "", "slow night", 90), ("#ffffff", FAILED_STYLE, "failed night", 0)]
    x = LEFT + 10
    for fill, style, label, room in legend:
        parts.append(
            f'<rect x="{x}" y="{HEIGHT - 16}" width="10" height="10" fill="{fill}"{style}/>'
            f'<text x="{x + 14}" y="{HEIGHT - 7}">{escape(label)}</text>'
        )
        x += room
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write(data_dir: Path, nights: Sequence[Night], name: str = "nightly-durations.svg") -> Path:
    """Write the chart under ``data_dir/reports`` (beside the lake), atomically."""
    folder = data_dir / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    tmp = folder / f".{name}.tmp"
    tmp.write_text(svg(nights), encoding="utf-8")
    os.replace(tmp, path)
    return path
