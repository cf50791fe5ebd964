"""What the parameters of a deployment's run may point at.

Whoever can create a flow run (the UI's Custom run, a call to the Prefect API)
chooses its parameters, and the run executes on a worker with the worker's
credentials. These checks keep a run's parameters from sending those credentials
elsewhere or writing where they should not:

* ``check_base_url``: an API root (GitHub's ``base_url``, a REST source's
  ``base_url`` or its file's ``client.base_url``) names an allowed host:port, the
  one place a token or API key goes. Allowed: the hosts of the deployments' defaults
  as this worker's own ``prefect.yaml`` declares them (``project_defaults``; never the
  copy the Prefect server holds, which anyone with the API's auth string can change),
  the API roots the worker's settings name
  (``INGEST_GITHUB_BASE_URL``, GitHub's own by default), the host of the source
  file, and ``INGEST_ALLOWED_HOSTS``.
* ``check_under_roots``: ``data_dir`` and ``download_dir`` (a folder, or
  ``s3://bucket/prefix``) lie under a root: the worker's own data folder and
  download folder, the defaults of the worker's own ``prefect.yaml``, and
  ``INGEST_ALLOWED_ROOTS``; a REST ``source`` lies under the project's ``sources/`` or
  ``INGEST_SOURCE_ROOTS``. Not the working folder: the project's code lives there.
* ``check_env_names``: a source file's ``env:`` names a variable starting with one of
  ``INGEST_SOURCE_ENV_PREFIXES`` (``INGEST_SOURCE_``) or listed in
  ``INGEST_SOURCE_ENV_NAMES``. ``AWS_*``, ``PREFECT_*`` and the project's own
  ``INGEST_*`` settings are refused always, whatever the lists say.

The host, root and list checks apply to runs of a deployment (``deployed`` given):
a flow called in a process of its own (an ``ingest`` command, a test) takes its
arguments from whoever started that process, who holds its environment already.
Every function is plain and raises ``ParameterRefusedError``, a terminal error that
says which parameter, what it named and what is allowed; the flows call them first,
before anything is read or written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ingest.errors import TerminalError

if TYPE_CHECKING:
    from ingest.settings import Settings

# Variables a source file never reads, whatever the allow-list says: cloud and Prefect
# credentials, and the project's own settings (INGEST_GITHUB_TOKEN, the serve database).
REFUSED_ENV_PREFIXES = ("AWS_", "PREFECT_", "INGEST_")
SOURCE_ENV_PREFIX = "INGEST_SOURCE_"
DEFAULT_PORTS = {"http": 80, "https": 443}


class ParameterRefusedError(TerminalError):
    """A run parameter points somewhere this worker does not send credentials or write."""


# --- hosts ------------------------------------------------------------------------


def endpoint_of(url: str) -> str:
    """``host:port`` of an http(s) URL, the port filled in from the scheme (so that
    ``http://`` and ``https://`` of one host are two endpoints); ValueError otherwise."""
    parts = urlsplit(url.strip())
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL with a host")
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    host = parts.hostname.lower()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def allowed_endpoints(configured: Iterable[str], *urls: str | None) -> set[str]:
    """The endpoints of ``urls`` (empty ones skipped) and the configured entries: a
    ``host:port``, a bare ``host`` (any port of it), or a URL."""
    found: set[str] = set()
    for entry in configured:
        entry = entry.strip().lower()
        if not entry:
            continue
        found.add(endpoint_of(entry) if "://" in entry else entry)
    for url in urls:
        if url:
            found.add(endpoint_of(url))
    return found


def check_base_url(url: str | None, allowed: set[str], parameter: str) -> None:
    """Refuse ``url`` unless its host:port (or its bare host) is in ``allowed``."""
    if not url:
        return
    try:
        endpoint = endpoint_of(url)
    except ValueError as exc:
        raise ParameterRefusedError(f"{parameter}: {exc}") from None
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    if endpoint in allowed or host in allowed:
        return
    raise ParameterRefusedError(
        f"{parameter} {url!r} names {endpoint}, which this worker sends no credentials to; "
        f"allowed: {', '.join(sorted(allowed)) or 'none'} (the project's prefect.yaml, the "
        "worker's settings, INGEST_ALLOWED_HOSTS)"
    )


# --- roots ------------------------------------------------------------------------


def _local(path: str | Path) -> Path:
    """An absolute path with symlinks and ``..`` resolved (the folder need not exist)."""
    return Path(os.path.abspath(Path(path).expanduser())).resolve()


def _uri(value: str) -> str:
    return value.rstrip("/")


def is_under(path: str | Path, root: str | Path) -> bool:
    """True when ``path`` is ``root`` or inside it: folders after resolving symlinks and
    ``..``; ``s3://bucket/prefix`` URIs by whole path segments (never ``..``)."""
    p, r = str(path), str(root)
    if "://" in p or "://" in r:
        if "://" not in p or "://" not in r or "/../" in f"{p}/" or "/./" in f"{p}/":
            return False
        p, r = _uri(p), _uri(r)
        return p == r or p.startswith(r + "/")
    lp, lr = _local(p), _local(r)
    return lp == lr or lr in lp.parents


def check_under_roots(
    path: str | Path | None, roots: Iterable[str | Path | None], parameter: str
) -> None:
    """Refuse ``path`` unless it lies under one of ``roots`` (empty ones skipped)."""
    if path is None or str(path) == "":
        return
    kept = [r for r in roots if r is not None and str(r) != ""]
    if any(is_under(path, r) for r in kept):
        return
    shown = ", ".join(sorted({str(r) for r in kept})) or "none"
    raise ParameterRefusedError(
        f"{parameter} {str(path)!r} is outside the folders this worker writes or reads "
        f"from: {shown} (the worker's own, the project's prefect.yaml, INGEST_ALLOWED_ROOTS "
        "or INGEST_SOURCE_ROOTS)"
    )


# --- variables a source file reads ------------------------------------------------------


def check_env_names(
    names: Iterable[str | None],
    *,
    prefixes: Iterable[str] = (SOURCE_ENV_PREFIX,),
    allowed: Iterable[str] = (),
    restricted: bool = True,
) -> None:
    """Refuse variables a source file may not read: the always-refused ones (cloud,
    Prefect and the project's own settings); with ``restricted``, also every name that
    neither starts with one of ``prefixes`` nor is in ``allowed``."""
    prefixes, allowed = tuple(prefixes), set(allowed)
    for name in names:
        if not name:
            continue
        own_source = name.startswith(SOURCE_ENV_PREFIX)
        if name.upper().startswith(REFUSED_ENV_PREFIXES) and not own_source:
            raise ParameterRefusedError(
                f"env: {name} is refused: a source file never reads AWS_*, PREFECT_* or the "
                "project's INGEST_* settings; give the API's credential a name of its own "
                f"({SOURCE_ENV_PREFIX}..., or a Prefect Secret block with secret:)"
            )
        if restricted and not (name in allowed or name.startswith(prefixes)):
            raise ParameterRefusedError(
                f"env: {name} is not a variable source files may read in a deployment's run: "
                f"name it {SOURCE_ENV_PREFIX}..., or list it in INGEST_SOURCE_ENV_NAMES "
                "on the worker"
            )


# --- what a flow calls ----------------------------------------------------------------


def project_defaults(prefect_yaml: Path) -> dict[str, Any]:
    """The default parameters of every deployment the project's own ``prefect.yaml``
    declares (this worker's checkout), keyed ``<deployment>.<parameter>``: what the checks
    allow besides the worker's settings. A missing file declares nothing."""
    import yaml

    try:
        text = prefect_yaml.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    config = yaml.safe_load(text) or {}
    found: dict[str, Any] = {}
    for entry in config.get("deployments") or []:
        for key, value in (entry.get("parameters") or {}).items():
            found[f"{entry.get('name')}.{key}"] = value
    return found


def deployed_values(deployed: Mapping[str, Any] | None, suffix: str) -> list[str]:
    """The default parameters (``project_defaults``) whose names end with ``suffix``
    (``base_url``, ``_dir``), as strings: what the operator declared in the project."""
    if not deployed:
        return []
    return [str(v) for k, v in deployed.items() if k.endswith(suffix) and v]


def api_endpoints(
    configured: Iterable[str], deployed: Mapping[str, Any] | None, *urls: str | None
) -> set[str]:
    """Where a run may send credentials: ``configured`` (``INGEST_ALLOWED_HOSTS``), the
    project's default ``*base_url`` parameters and ``urls`` (the worker's settings,
    the source file's own root)."""
    return allowed_endpoints(configured, *deployed_values(deployed, "base_url"), *urls)


def data_roots(
    configured: Iterable[str], deployed: Mapping[str, Any] | None, *own: str | Path | None
) -> list[str | Path | None]:
    """Where a run may write: ``configured`` (``INGEST_ALLOWED_ROOTS``), the deployment's
    default ``*_dir`` parameters and the worker's own folders ``own``."""
    return [*configured, *deployed_values(deployed, "_dir"), *own]


def check_data_dirs(worker: Settings, run: Settings, deployed: Mapping[str, Any] | None) -> None:
    """A deployment's run writes its lake and its downloads under the worker's roots."""
    if deployed is None:
        return
    roots = data_roots(
        worker.allowed_roots,
        deployed,
        str(worker.data_dir),
        worker.local_path,
        worker.s3.download_dir,
    )
    check_under_roots(str(run.data_dir), roots, "data_dir")
    check_under_roots(run.s3.download_dir, roots, "download_dir")


def check_github_run(worker: Settings, run: Settings, deployed: Mapping[str, Any] | None) -> None:
    """github-pulls: the token goes only to an allowed API root; the lake under the roots."""
    if deployed is None:
        return
    hosts = api_endpoints(worker.allowed_hosts, deployed, worker.github.base_url)
    check_base_url(run.github.base_url, hosts, "base_url")
    check_data_dirs(worker, run, deployed)


def check_source_file(
    worker: Settings, deployed: Mapping[str, Any] | None, source_file: Path, project_sources: Path
) -> None:
    """rest-ingest: a deployment's run reads its source file from a source root only (the
    project's ``sources/`` or ``source_roots``), checked before the file is read."""
    if deployed is not None:
        check_under_roots(source_file, [*worker.source_roots, project_sources], "source")


def check_rest_run(
    worker: Settings,
    run: Settings,
    deployed: Mapping[str, Any] | None,
    *,
    file_base_url: str,
    base_url: str | None,
    env_names: Iterable[str | None],
) -> None:
    """rest-ingest: the file's ``env:`` a variable it may read, its credential only to the
    file's own host (or another allowed one), the lake under the roots. The always-refused
    variables are refused outside deployments too."""
    check_env_names(
        env_names,
        prefixes=worker.source_env_prefixes,
        allowed=worker.source_env_names,
        restricted=deployed is not None,
    )
    if deployed is None:
        return
    hosts = api_endpoints(worker.allowed_hosts, deployed, file_base_url)
    check_base_url(base_url, hosts, "base_url")
    check_data_dirs(worker, run, deployed)


# --- the process that holds the secrets -----------------------------------------------

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def keep_memory_private() -> bool:
    """Make this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, Linux): its
    ``/proc/<pid>/environ``, ``mem``, ``maps`` and ``fd`` become readable by root only
    (``CAP_SYS_PTRACE``), and no core file is written. The flow's process holds the
    credentials (its environment, the tokens it read) while a malicious document is
    parsed by a worker it started; a worker of the same user could otherwise read them
    there. Root is not held back (a worker running as root reads anything): run the
    workers as a user of their own (the image's ``ingest``). Children started with
    ``exec`` (the parsers' fork server) are dumpable again, and hold an allow-listed
    environment only. Returns whether the process is now non-dumpable (False elsewhere
    than on Linux)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        return int(libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
