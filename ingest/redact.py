"""Keep secrets out of logs, errors, artifacts and outputs."""

from __future__ import annotations

import re
import threading

_QUERY_SECRET = re.compile(
    r"(?i)((?:^|[?&;\s])(?:access_token|token|api_key|apikey|key|secret|password|sig|signature|"
    r"x-amz-signature|x-amz-credential|x-amz-security-token)=)[^&#\s]+"
)
_AUTH_HEADER = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(\w+\s+)?[^\s'\",}]+")
_TOKENS = re.compile(
    r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16})\b"
)
_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/@\s:]+:[^/@\s]+@")

# Registered secrets, longest first (a secret containing another is masked whole). Replaced,
# never changed in place, under the lock: ``redact`` in any thread reads one snapshot while
# another thread registers a token.
_extra: tuple[str, ...] = ()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember a secret value (a token from settings) so it is always masked."""
    global _extra
    if value and len(value) >= 6:
        with _lock:
            if value not in _extra:
                _extra = tuple(sorted((*_extra, value), key=len, reverse=True))


def redact(text: str) -> str:
    """Mask tokens, signatures, credentials in URLs and registered secrets (thread-safe)."""
    for secret in _extra:
        text = text.replace(secret, "***")
    text = _QUERY_SECRET.sub(r"\1***", text)
    text = _AUTH_HEADER.sub(r"\1\2***", text)
    text = _TOKENS.sub("***", text)
    return _USERINFO.sub(r"\1***@", text)
