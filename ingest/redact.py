"""Keep secrets out of logs, errors, artifacts and outputs."""

from __future__ import annotations

import re
import threading

_QUERY_SECRET = re.compile(
    r"(?i)((?:^|[?&;\s])(?:access_token|token|api_key|apikey|key|secret|password|sig|signature|"
    r"x-amz-signature|x-amz-credential|x-amz-security-token)=)[^&#\s]+"
)
# A credential by its name, in a query, a header, JSON or a message: api-key=, client_secret=,
# access-token=, X-API-Key: ..., "refresh_token": "..." (names ending in token, secret,
# password, api key or credential, with any prefix joined by - or _).
# What follows such a name in a sentence rather than as its value ("no credential: the
# environment variable ...", "token: not set"): English words no credential is, left readable.
PROSE_WORDS = (
    "a", "an", "the", "no", "not", "none", "is", "are", "was", "were", "be", "has", "have",
    "set", "unset", "missing", "empty", "required", "invalid", "expired", "rejected", "given",
    "found", "needed", "see", "use", "check", "from", "in", "of", "for", "to", "with",
    "without", "either", "neither", "its", "their", "this", "that", "which", "when", "if",
)  # fmt: skip
_NAMED_SECRET = re.compile(
    r"(?i)((?:^|(?<=[?&;\s,{(\[\"']))(?:[a-z0-9]+[-_])*[a-z0-9]*?"
    r"(?:token|secret|password|passwd|api[-_]?key|apikey|(?:private|secret|signing)[-_]?key"
    r"|(?:access|auth)[-_]?key|auth[-_]?string|credentials?)"
    r"['\"]?\s*[:=]\s*['\"]?)(?!\*\*\*)"
    rf"(?!(?:{'|'.join(PROSE_WORDS)})(?:\s|$))"
    r"[^&#\s'\",;}]+"
)
# A bearer token standing alone ("Bearer eyJ..." in a message, not an Authorization header).
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/-]{8,}=*")
# A token as the whole user part of a URL (https://TOKEN@host), as git remotes carry them.
_USER_TOKEN = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/@\s:]+@")
_AUTH_HEADER = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(\w+\s+)?[^\s'\",}]+")
_TOKENS = re.compile(
    r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16})\b"
)
_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/@\s:]+:[^/@\s]+@")

# Registered secrets, longest first (a secret containing another is masked whole). The
# process's, not a run's: a secret seen once is masked in every later line the process
# writes, whichever run writes it (a run's end must not unmask it for another). Replaced,
# never changed in place, under the lock: ``redact`` in any thread reads one snapshot while
# another thread registers a token.
_extra: tuple[str, ...] = ()
# Shorter ones (under 6 characters) are masked only where they stand alone, between
# characters that are not letters or digits: "abc" is hidden in "key abc," but "abcdef"
# and "tabc" stay readable.
_short: re.Pattern[str] | None = None
_short_values: frozenset[str] = frozenset()
_lock = threading.Lock()
_SHORT = 6


def register_secret(value: str | None) -> None:
    """Remember a secret value (a token from settings) so it is always masked."""
    global _extra, _short, _short_values
    if not value:
        return
    with _lock:
        if len(value) >= _SHORT:
            if value not in _extra:
                _extra = tuple(sorted((*_extra, value), key=len, reverse=True))
        elif value not in _short_values:
            _short_values = _short_values | {value}
            alternatives = "|".join(
                re.escape(v) for v in sorted(_short_values, key=len, reverse=True)
            )
            _short = re.compile(f"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])")


def redact(text: str) -> str:
    """Mask tokens, signatures, credentials in URLs and registered secrets (thread-safe)."""
    for secret in _extra:
        text = text.replace(secret, "***")
    short = _short
    if short is not None:
        text = short.sub("***", text)
    text = _QUERY_SECRET.sub(r"\1***", text)
    text = _NAMED_SECRET.sub(r"\1***", text)
    text = _AUTH_HEADER.sub(r"\1\2***", text)
    text = _BEARER.sub(r"\1***", text)
    text = _TOKENS.sub("***", text)
    text = _USERINFO.sub(r"\1***@", text)
    return _USER_TOKEN.sub(r"\1***@", text)
