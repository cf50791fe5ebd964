"""The loop each extraction worker process runs.

Imported by the pool's fork server (``ingest.extract.forkserver``) before it
forks any worker, so what every run's documents need is imported once, and every
worker, and every replacement of a crashed one, starts warm: the dispatcher, the
text, HTML and PDF parsers (charset-normalizer, selectolax, pypdfium2), ~0.1 s.

The parsers of the rarer kinds are imported by a worker the first time one of its
files needs them: ezdxf (DXF, ~0.3 s compiled), python-docx (DOCX, ~0.1 s) and
pdfminer.six (a PDF pdfium cannot open, ~0.1 s). Preloaded, they made every pool's
start cost ~0.5 s of CPU more, most of a first run's extraction when few of its
files need a parser at all; imported on demand, a pool costs that only where its
files are of those kinds (once per worker, inside the first such file's time).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import signal
import traceback
from collections.abc import Callable
from typing import Any

# Preloaded here, not per file: the fork server imports this module once (the parsers of
# the rarer kinds are imported where they are used, see above).
import charset_normalizer  # noqa: F401
import pypdfium2  # noqa: F401
import selectolax.lexbor  # noqa: F401

import ingest.extract
import ingest.extract.docx
import ingest.extract.dxf
import ingest.extract.html
import ingest.extract.pdf
import ingest.extract.text  # noqa: F401
from ingest.extract.fence import restrict, rules_for

_FUNCS: dict[str, Callable[..., Any]] = {}


def resolve(ref: str) -> Callable[..., Any]:
    """``"package.module:function"`` -> the function (cached)."""
    func = _FUNCS.get(ref)
    if func is None:
        module, _, name = ref.partition(":")
        func = getattr(importlib.import_module(module), name)
        _FUNCS[ref] = func
    return func


def limit_memory(megabytes: int) -> None:
    """Cap the address space: a parser that balloons gets MemoryError (or dies), not the host."""
    if megabytes <= 0:
        return
    limit = megabytes * 1024 * 1024
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def fence_plan(fence: str) -> tuple[tuple[str, ...], str | None]:
    """The folders to read and the scratch folder of a fence argument (JSON), with the
    rules worked out (``ingest.extract.fence.rules_for``, kept for every later fork)."""
    plan = json.loads(fence)
    roots, scratch = tuple(plan["read"]), plan["scratch"]
    rules_for(roots, scratch)
    return roots, scratch


def serve(conn: Any, memory_limit_mb: int, preload: tuple[str, ...] = (), fence: str = "-") -> None:
    """Import ``preload``, fence this process (``fence``: JSON of the folders it may read
    and its scratch folder, or ``-``), say ``ready``, then answer ``(job_id, func_ref,
    args, kwargs)`` messages until ``None`` arrives.

    The parent starts a job's clock only after ``ready``, so a worker's start-up (and the
    imports of its job functions) never counts against one file's time limit. A fence that
    cannot be set ends the worker (``FenceError``): it never runs as fenced without it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    limit_memory(memory_limit_mb)
    for ref in preload:
        resolve(ref)
    if fence != "-":
        restrict(*fence_plan(fence))
    conn.send("ready")
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the parent went away
        if message is None:
            return
        job_id, ref, args, kwargs = message
        pid = os.getpid()
        reply: tuple[Any, ...]
        try:
            reply = (job_id, True, resolve(ref)(*args, **kwargs), None, pid)
        except MemoryError:
            reply = (job_id, False, None, "MemoryError: over the worker's memory limit", pid)
        except BaseException as exc:
            tb = traceback.format_exc(limit=-3)
            reply = (job_id, False, None, f"{type(exc).__name__}: {exc}\n{tb}"[:4000], pid)
        try:
            conn.send(reply)
        except Exception as exc:  # an unpicklable result
            conn.send((job_id, False, None, f"result could not be sent: {exc}", pid))


# The fork server forks every worker from this state: freeze the objects imported so far out
# of the garbage collector, so collections in the workers do not touch (and copy) their pages.
gc.freeze()
