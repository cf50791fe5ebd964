"""Files settled as they land: what a download's first bytes decide, kept for the batch's
extraction so it neither opens nor reads those files again.

A download writes each small object from the bytes it receives; it hands the first
``HEAD`` of them and the size to ``Landed.land`` on the request lane that wrote them.
Where those bytes decide the outcome (zero bytes, unsupported content, a DWG drawing:
``ingest.extract.settle_by_head``), the outcome is kept by path, and the batch's
extraction takes it (``take``) instead of reading the file's head again: a bucket of
mostly unsupported files is thousands of files a run whose outcome is known the moment
each lands, while the lanes still download the rest. A file a parser must read is not
kept; its extraction goes to the run's workers as before.

One ``Landed`` per run, held by its context (``ingest.context.RunContext``): only that
run's downloads fill it, only its extraction takes from it, and what is left (a batch
whose extraction failed) goes with the context at the run's end.
"""

from __future__ import annotations

import threading
from pathlib import PurePosixPath

from ingest.extract import Extraction, settle_by_head


class Landed:
    """Outcomes settled from the first bytes of downloaded files, by local path.
    Thread-safe: the lanes put, the extraction tasks take."""

    def __init__(self) -> None:
        self._settled: dict[str, tuple[int, Extraction]] = {}
        self._lock = threading.Lock()

    def land(self, path: str, key: str, size: int, head: bytes) -> None:
        """A file written whole at ``path`` (the object ``key``, ``size`` bytes, whose
        first bytes are ``head``): keep its outcome when those bytes decide it."""
        outcome = settle_by_head(head, size, PurePosixPath(key).name)
        if outcome is not None:
            with self._lock:
                self._settled[path] = (size, outcome)

    def take(self, path: str) -> tuple[int, Extraction] | None:
        """The size and settled outcome of the file at ``path``, once (None: not settled)."""
        with self._lock:
            return self._settled.pop(path, None)
