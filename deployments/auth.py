"""The auth string of the Prefect API that ``ingest serve`` starts.

Prefect 3's server checks every API request (``/health`` and ``/ready`` excepted)
for ``Authorization: Basic <base64 of the auth string>`` when it runs with
``PREFECT_SERVER_API_AUTH_STRING``, and answers 401 otherwise; its clients (the
``prefect`` command, workers, flow runs, Dask workers' task runs, the UI's login
form) send it when they have ``PREFECT_API_AUTH_STRING``. Whoever can create a flow
run can make the workers run it with their credentials, so the server that
``ingest serve`` starts always has one:

* the operator's, when ``PREFECT_SERVER_API_AUTH_STRING`` (or the client's
  ``PREFECT_API_AUTH_STRING``) is set in the environment or the Prefect profile;
* else the one stored in ``$PREFECT_HOME/ingest-api-auth`` by an earlier start;
* else a new random one (256 bits), stored there.

The file is the user's alone (mode 0600; a file that others can read, or that
another user owns, is refused, not used), and the advert of a running ``ingest
serve`` names it, so the ``ingest`` commands of the same user on the same machine
read it themselves (``deployments.local_api``). The secret is never printed: the
path and the variable's name are.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import stat
from pathlib import Path

from ingest.errors import IngestError

SERVER_VARIABLE = "PREFECT_SERVER_API_AUTH_STRING"
CLIENT_VARIABLE = "PREFECT_API_AUTH_STRING"
FILE_NAME = "ingest-api-auth"
LOOPBACK = "127.0.0.1"


class ServeAuthError(IngestError, RuntimeError):
    """The API cannot be served safely as asked (the message says what to change)."""


def prefect_home() -> Path:
    """``PREFECT_HOME`` (Prefect's default: ``~/.prefect``)."""
    return Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser()


def auth_file(home: Path | None = None) -> Path:
    """Where the auth string of the server of ``home`` (else ``PREFECT_HOME``) is kept."""
    return (home or prefect_home()) / FILE_NAME


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and the loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def connect_host(host: str) -> str:
    """The address this machine's clients use for a server bound to ``host``: loopback
    for the wildcard addresses, else ``host`` itself."""
    bare = host.strip("[]")
    if bare in ("0.0.0.0", "::", ""):
        return LOOPBACK
    return f"[{bare}]" if ":" in bare else bare


def read_auth_file(path: Path) -> str | None:
    """The auth string stored at ``path``, or None when there is no such file.

    Raises ``ServeAuthError`` for a file that another user owns or that others can read
    or write: a secret that may be known or planted is not one to use.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    if info.st_uid != os.getuid():
        raise ServeAuthError(f"the auth file {path} belongs to another user; remove it")
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ServeAuthError(
            f"the auth file {path} can be read or written by other users "
            f"(mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it, or remove it to get a new one"
        )
    value = path.read_text(encoding="utf-8").strip()
    return value or None


def write_auth_file(path: Path, value: str) -> None:
    """Store ``value`` at ``path``, readable by this user only, atomically (a reader sees
    the old content or the new, never a part)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value + "\n")
    os.replace(tmp, path)


def configured() -> str | None:
    """The auth string the operator configured: ``PREFECT_SERVER_API_AUTH_STRING``, else
    ``PREFECT_API_AUTH_STRING`` (environment or Prefect profile), else None."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    for secret in (settings.server.api.auth_string, settings.api.auth_string):
        if secret is not None and secret.get_secret_value():
            return secret.get_secret_value()
    return None


def ensure_auth_string(path: Path, given: str | None = None) -> tuple[str, str]:
    """The auth string for the server, and where it came from (``configured``, ``stored``
    or ``generated``); see the module's docstring. A configured one is stored at ``path``
    too, so that the commands on this machine find it."""
    stored = read_auth_file(path)
    if given:
        if stored != given:
            write_auth_file(path, given)
        return given, "configured"
    if stored:
        return stored, "stored"
    value = secrets.token_urlsafe(32)
    write_auth_file(path, value)
    return value, "generated"


def check_exposure(host: str, auth: bool) -> None:
    """Refuse a server bound beyond loopback without an auth string."""
    if not auth and not is_loopback(host):
        raise ServeAuthError(
            f"refusing to serve the Prefect API on {host} without an auth string: anyone "
            "who reaches it could run flows with the workers' credentials; drop --no-auth "
            "(and put TLS in front of it, docs/security.md), or bind it to 127.0.0.1"
        )


def how_to_join(path: Path) -> str:
    """What the operator reads at start: where the string is, and who needs it (never the
    string itself)."""
    return (
        f"API auth: on; the auth string is in {path} (this user only). `ingest` commands "
        f"of this user on this machine read it themselves; workers, Dask workers and "
        f"commands elsewhere set {CLIENT_VARIABLE} to its content (the UI asks for it)"
    )
