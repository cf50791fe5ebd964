"""Unit tests: key -> local path mapping, filters, redaction."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ingest.errors import UnsafeKeyError
from ingest.redact import redact, register_secret
from ingest.s3 import keys


@pytest.mark.parametrize(
    ("key", "prefix", "expected"),
    [
        ("docs/a/b.pdf", "docs/", "a/b.pdf"),
        ("docs/a/b.pdf", "docs", "a/b.pdf"),
        ("docs/a/b.pdf", "", "docs/a/b.pdf"),
        ("docs/report.pdf", "docs/rep", "docs/report.pdf"),  # not under the folder docs/rep/
        ("docsa.txt", "docs", "docsa.txt"),
    ],
)
def test_relative_key_strips_the_prefix_like_aws_cp(key: str, prefix: str, expected: str) -> None:
    assert keys.relative_key(key, prefix) == expected


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("p/../escape.txt", "'..' path segment"),
        ("p/./dot.txt", "'.' path segment"),
        ("p/a//double.txt", "empty path segment"),
        ("p//double.txt", "absolute path"),
        ("p/back\\slash.txt", "backslash in key"),
        ("p/ctl\x01.txt", "control character in key"),
        ("p/nul\x00.txt", "control character in key"),
        ("p/" + "x" * 256, "path segment longer than 255 bytes"),
        ("p/.ingest-tmp/x", "reserved"),
    ],
)
def test_hostile_keys_are_refused(tmp_path: Path, key: str, reason: str) -> None:
    with pytest.raises(UnsafeKeyError, match=reason.replace("'", ".").replace(".", ".")):
        keys.local_path_for(key, "p/", tmp_path)


def test_absolute_key_is_refused_without_a_prefix(tmp_path: Path) -> None:
    with pytest.raises(UnsafeKeyError, match="absolute path"):
        keys.local_path_for("/etc/passwd", "", tmp_path)


def test_safe_keys_stay_inside_the_root(tmp_path: Path) -> None:
    path = Path(keys.local_path_for("p/a b/ünï 도면.pdf", "p/", tmp_path))
    assert path == tmp_path / "a b" / "ünï 도면.pdf"
    assert path.resolve().is_relative_to(tmp_path.resolve())


def test_filters_include_then_exclude() -> None:
    assert keys.matches_filters("a/b.pdf", ["*.pdf"], [])
    assert not keys.matches_filters("a/b.txt", ["*.pdf"], [])
    assert not keys.matches_filters("tmp/b.pdf", ["*.pdf"], ["tmp/*"])
    assert keys.matches_filters("anything", [], [])


def test_redact_masks_tokens_signatures_and_registered_secrets() -> None:
    register_secret("s3cr3t-value-123")
    text = (
        "GET https://api.github.com/x?access_token=abc&page=2 "
        "Authorization: token " + "ghp_" + "0123456789abcdefghijABCDEFGHIJ "
        "https://user:pw@host/p X-Amz-Signature=deadbeef s3cr3t-value-123"
    )
    out = redact(text)
    for secret in ("abc&", "ghp_0123456789", "user:pw", "deadbeef", "s3cr3t-value-123"):
        assert secret not in out
    assert "page=2" in out


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("GET /tickets?api-key=Kq7zW0x1&page=2", "Kq7zW0x1"),
        ("token request: client_secret=cs-88172 grant_type=x", "cs-88172"),
        ("POST /oauth access-token=at.9912.zz", "at.9912.zz"),
        ("headers: X-API-Key: xk-3141592 Accept: */*", "xk-3141592"),
        ('{"refresh_token": "rt-271828", "scope": "read"}', "rt-271828"),
        ("private_key=pk-161803;next", "pk-161803"),
        ("password: pw-112358, next", "pw-112358"),
        # never registered with this process: a child's environment in an error message
        ("env: AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG AWS_REGION=x", "wJalrXUtnFEMI/K7MDENG"),
        ("PREFECT_API_AUTH_STRING=admin:s3cret-pass ok", "admin:s3cret-pass"),
        ("PGPASSWORD=pg-pass-4411 psql -h db", "pg-pass-4411"),
        (
            "upstream said: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOjF9.c2ln end",
            "eyJhbGciOiJIUzI1NiJ9",
        ),
        ("cloning https://ghs_T0kenInUrl0123@git.example.com/o/r.git", "ghs_T0kenInUrl0123"),
    ],
)
def test_redact_masks_credentials_by_their_name(text: str, secret: str) -> None:
    out = redact(text)
    assert redact("max_tokens=5 broken=1 tokens: 3") == "max_tokens=5 broken=1 tokens: 3"
    assert secret not in out and "***" in out
    assert out.split("***")[0] == text.split(secret)[0]  # what came before is kept


@pytest.mark.parametrize(
    "text",
    [
        "no credential: the environment variable TICKETS_API_KEY is empty or missing",
        "no credential: the Prefect Secret block 'tickets-key' is empty or missing",
        "token: not set, see docs/security.md",
        "credentials: none found in the chain",
    ],
)
def test_redact_leaves_a_sentence_after_a_credentials_name(text: str) -> None:
    assert redact(text) == text


def test_redact_still_masks_a_value_after_a_name_that_a_word_follows() -> None:
    # a value that only begins like one of the sentence's words is masked all the same
    assert redact("password: theseus7 next") == "password: *** next"
    assert redact("api-key: nothing-to-see") == "api-key: ***"
    assert redact("token: a1b2c3") == "token: ***"


def test_redact_masks_short_registered_values_where_they_stand_alone() -> None:
    register_secret("q7Z")
    assert redact("user q7Z, (q7Z) 'q7Z'") == "user ***, (***) '***'"
    assert redact("q7Zq and aq7Z stay") == "q7Zq and aq7Z stay"  # not a part of a word


def test_redact_while_another_thread_registers_secrets() -> None:
    """``redact`` may run in one thread while another registers a token (a GitHub sync
    starting beside a download): no "set changed size during iteration", every secret
    registered before the call is masked."""
    import sys
    import threading

    first = [f"early-secret-{i:05d}" for i in range(2000)]
    for s in first:
        register_secret(s)
    stop = threading.Event()
    errors: list[BaseException] = []

    def grow() -> None:
        i = 0
        while not stop.is_set():
            register_secret(f"late-secret-{i:07d}")
            i += 1

    def read() -> None:
        try:
            for _ in range(200):
                assert redact(f"x {first[-1]} y") == "x *** y"
        except BaseException as exc:  # the failure is reported by the main thread
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        writer = threading.Thread(target=grow)
        readers = [threading.Thread(target=read) for _ in range(4)]
        writer.start()
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        stop.set()
        writer.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


def test_the_quick_check_never_passes_a_key_the_full_check_refuses() -> None:
    """``local_path_for`` skips ``unsafe_reason`` for keys ``_plainly_safe`` passes."""
    rng = random.Random(7)
    alphabet = "ab./\\\x00\x1f\x7f é+"
    candidates = ["a" * 255, "a" * 256, f"{keys.TMP_DIR_NAME}/x", "a/.../b", "a./b", "...", "é/x"]
    candidates += [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(50_000)
    ]
    passed = [k for k in candidates if keys._plainly_safe(k)]
    assert len(passed) > 2_000  # the quick path is taken for plain keys
    assert [k for k in passed if keys.unsafe_reason(k) is not None] == []


def test_the_missing_credentials_message_reads_whole_after_redaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ingest.rest.auth import AuthError, resolve
    from ingest.rest.spec import SecretRef

    monkeypatch.delenv("TICKETS_API_KEY", raising=False)
    with pytest.raises(AuthError) as caught:
        resolve(SecretRef(env="TICKETS_API_KEY"), None)
    assert redact(str(caught.value)) == (
        "no credential: the environment variable TICKETS_API_KEY is empty or missing"
    )
