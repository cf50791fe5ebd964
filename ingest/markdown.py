"""Text from outside (S3 keys, error messages, API answers) made safe for the markdown
artifacts: it reads as the text it is, never as markup. A key with a backtick, a ``|``,
a newline or ``<img src=x onerror=...>`` can neither break a table row, end a code span
early, nor become HTML in the Prefect UI."""

from __future__ import annotations

import html
import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PUNCTUATION = re.compile(r"([\\`*_\[\]|~])")


def _visible(text: str) -> str:
    """Control characters (a newline in a key) as ``\\xNN``: a cell stays one line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def cell(text: object) -> str:
    """Plain text for a table cell or a line: markdown punctuation escaped, HTML inert."""
    escaped = html.escape(_visible(str(text)), quote=False)
    return _PUNCTUATION.sub(r"\\\1", escaped)


def code(text: object) -> str:
    """Text as a code span in a table cell: fenced with more backticks than it holds in a
    row, ``|`` escaped (GFM splits cells on it even inside code)."""
    raw = _visible(str(text))
    longest = max((len(run) for run in re.findall(r"`+", raw)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if raw.startswith("`") or raw.endswith("`") or not raw else ""
    return f"{fence}{pad}{raw}{pad}{fence}".replace("|", "\\|")
