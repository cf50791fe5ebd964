"""Files settled as they land: what a download's first bytes decide, and the parse of the
rest started, as each file is written, instead of when its whole batch has downloaded.

A download writes each small object from the bytes it receives; it hands the first
``HEAD`` of them and the size to ``Landed.land`` on the request lane that wrote them.
Where those bytes decide the outcome (zero bytes, unsupported content, a DWG of R12 or older:
``ingest.extract.settle_by_head``), the outcome is kept by path; a file a parser must
read is handed to the run's workers there and then (``parse``), so its parse runs
beside the downloads still in flight. The batch's extraction takes each file's landing
(``take``): the outcome without opening the file again, or the parse under way, instead
of starting one after the batch's last byte has arrived.

One ``Landed`` per run, held by its context (``ingest.context.RunContext``) or by a
batch that downloads and extracts on a worker (``ingest.s3.fetch``): only those downloads
fill it, only that extraction takes from it, and what is left (a batch whose extraction
failed) goes with it at the run's end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import PurePosixPath

from ingest.extract import Extraction, settle_by_head
from ingest.extract.pool import Outcome

log = logging.getLogger(__name__)

# A landed file a parser must read, handed to the workers: (path, key) -> the parse's
# future, or None when none is started (the run's extraction budget is spent).
Parse = Callable[[str, str], "Future[Outcome] | None"]


@dataclass(frozen=True, slots=True)
class Landing:
    """One file as it landed: its size, and what its first bytes decided (``outcome``),
    else the parse started on the run's workers (``parsing``), else neither."""

    size: int
    outcome: Extraction | None = None
    parsing: Future[Outcome] | None = None


class Landed:
    """The landings of a run's downloaded files, by local path. Thread-safe: the lanes
    put, the extraction tasks take. ``parse``: starts the parse of a file its first
    bytes do not decide (None: it waits for its batch's extraction)."""

    def __init__(self, parse: Parse | None = None) -> None:
        self._parse = parse
        self._landings: dict[str, Landing] = {}
        self._lock = threading.Lock()

    def land(self, path: str, key: str, size: int, head: bytes) -> None:
        """A file written whole at ``path`` (the object ``key``, ``size`` bytes, whose
        first bytes are ``head``)."""
        outcome = settle_by_head(head, size, PurePosixPath(key).name)
        parsing = None
        if outcome is None and self._parse is not None:
            try:
                parsing = self._parse(path, key)
            except Exception as exc:  # the pool is closing: the batch's extraction says so
                log.debug("%s: not parsed as it landed: %s", key, exc)
        with self._lock:
            self._landings[path] = Landing(size, outcome, parsing)

    def take(self, path: str) -> Landing | None:
        """The landing of the file at ``path``, once (None: it did not land here)."""
        with self._lock:
            return self._landings.pop(path, None)
