"""Where the Prefect API of a running ``ingest serve`` is, for the commands of this machine.

Without ``PREFECT_API_URL`` (in the environment or the active Prefect profile),
every Prefect command starts a temporary server of its own for the length of
the command: ~14 s before the first line of work. While ``ingest serve`` runs,
it says where its API is in ``$PREFECT_HOME/ingest-serve.json`` (address and
process id), and the ``ingest`` commands use that API instead: their runs then
show up in the same UI, and the start-up is gone. A configured API always wins;
a file left by a process that is gone, or an API that does not answer within
half a second, is ignored.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

FILE_NAME = "ingest-serve.json"


def advert_path() -> Path:
    """``$PREFECT_HOME/ingest-serve.json`` (Prefect's default home: ``~/.prefect``)."""
    return Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser() / FILE_NAME


@contextmanager
def advertise(api_url: str) -> Iterator[Path]:
    """Name ``api_url`` as this machine's running API while the block runs."""
    path = advert_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"api_url": api_url, "pid": os.getpid()}))
    tmp.replace(path)
    try:
        yield path
    finally:
        with suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def find(timeout: float = 0.5) -> str | None:
    """The API a running ``ingest serve`` advertises, if its process lives and it answers."""
    try:
        advert = json.loads(advert_path().read_text())
        api_url = str(advert["api_url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not api_url.startswith(("http://", "https://")) or not _alive(advert.get("pid")):
        return None
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout) as r:
            return api_url if r.status == 200 else None
    except (OSError, ValueError):
        return None


def use_running_serve() -> str | None:
    """Point this process's Prefect at a running ``ingest serve`` when nothing else is
    configured; returns the address used, or None (Prefect's own choice stands)."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    found = find()
    if found is None:
        return None
    from prefect.context import refresh_global_settings_context
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:  # the active profile names an API: it wins
        return None
    os.environ["PREFECT_API_URL"] = found
    refresh_global_settings_context()
    return found
