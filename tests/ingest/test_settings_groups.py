"""A concern's settings grouped in a sub-model keep their variable names: the environment,
a ``.env`` file and keyword arguments all reach the group, and the reference page lists
each of its variables."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from ingest.settings import AlertSettings, Settings


def test_the_alert_group_reads_its_flat_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_ALERT_BLOCK", "custom-webhook/nightly-alerts")
    monkeypatch.setenv("INGEST_ALERT_LATE_AFTER", "60")
    monkeypatch.setenv("INGEST_DATA_DIR", "elsewhere")  # a flat field beside it is untouched
    settings = Settings()
    assert settings.alert == AlertSettings(
        block="custom-webhook/nightly-alerts", late_after=60.0, stale_after=26 * 3600.0
    )
    assert settings.data_dir == Path("elsewhere")
    # A keyword argument for one field of the group keeps the others from the environment.
    assert Settings(alert={"stale_after": 100}).alert.late_after == 60.0
    # A value out of the field's bounds names the variable's field.
    monkeypatch.setenv("INGEST_ALERT_LATE_AFTER", "5")
    with pytest.raises(ValueError, match=r"alert\.late_after"):
        Settings()


def test_the_http_group_reads_its_flat_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_HTTP_MAX_PAGE_BYTES", "2048")
    monkeypatch.setenv("INGEST_HTTP_ADAPTIVE", "false")
    http = Settings().http
    assert (http.max_page_bytes, http.adaptive, http.initial_window) == (2048, False, 4)


def test_a_dotenv_file_reaches_the_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("INGEST_ALERT_STALE_AFTER=7200\n", encoding="utf-8")
    assert Settings().alert.stale_after == 7200.0


def test_the_reference_lists_the_groups_variables() -> None:
    from tools.gen_reference import render_settings

    page = render_settings()
    for name in (
        "INGEST_ALERT_BLOCK",
        "INGEST_ALERT_LATE_AFTER",
        "INGEST_ALERT_STALE_AFTER",
        "INGEST_HTTP_ADAPTIVE",
        "INGEST_HTTP_MAX_PAGE_BYTES",
        *VARIABLES,
    ):
        assert f"| `{name}` |" in page
    assert "INGEST_ALERT |" not in page and "INGEST_HTTP |" not in page


def test_a_groups_secret_never_leaves_with_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve.database_url`` is a secret like ``github.token``: a task's copy holds neither
    (not in its pickled bytes), the rest of the group stays, and the process that has the
    secret in its environment reads it back (``own_secret``)."""
    import pickle

    url = "postgresql+asyncpg://ingest:pw-9f3a7c@db:5432/prefect"
    monkeypatch.setenv("INGEST_SERVE_DATABASE_URL", url)
    monkeypatch.setenv("INGEST_GITHUB_TOKEN", "ghp_" + "x" * 36)
    settings = Settings(serve={"database_url_file": "/run/secrets/db"})
    assert {"github.token", "serve.database_url"} <= set(Settings.secret_fields())
    assert settings.serve.database_url is not None
    assert settings.serve.database_url.get_secret_value() == url
    sent = settings.without_secrets()
    wire = pickle.dumps(sent)
    assert b"pw-9f3a7c" not in wire and b"x" * 36 not in wire
    assert sent.serve.database_url is None and sent.github.token is None
    assert sent.serve.database_url_file == Path("/run/secrets/db")
    own = sent.own_secret("serve.database_url")
    assert own is not None and own.get_secret_value() == url
    assert settings.serve.database_url is not None  # the original keeps its secret


# One variable of each group, as users' deployments set it, and the field it sets.
VARIABLES = {
    "INGEST_S3_BUCKET": ("s3.bucket", "docs-bucket", "docs-bucket"),
    "INGEST_S3_LIST_CHUNK_PAGES": ("s3.list_chunk_pages", "7", 7),
    "INGEST_S3_CREDENTIALS_BLOCK": ("s3.credentials_block", "source-keys", "source-keys"),
    "INGEST_GITHUB_BASE_URL": (
        "github.base_url",
        "https://ghe.corp/api/v3",
        "https://ghe.corp/api/v3",
    ),
    "INGEST_REST_EXPECTED_ROWS": ("rest.expected_rows", "42", 42),
    "INGEST_EXTRACT_MEMORY_LIMIT_MB": ("extract.memory_limit_mb", "512", 512),
    "INGEST_EXTRACT_TIME_LIMIT": ("extract.time_limit", "30", 30.0),
    "INGEST_CHUNK_OVERLAP": ("chunk.overlap", "50", 50),
    "INGEST_OCR_ENABLED": ("ocr.enabled", "true", True),
    "INGEST_OCR_QUEUE_SIZE": ("ocr.queue_size", "3", 3),
    "INGEST_LAKE_CREDENTIALS_BLOCK": ("lake.credentials_block", "lake-keys", "lake-keys"),
    "INGEST_SHARED_LIMITS": ("shared.limits", "on", "on"),
    "INGEST_SHARED_LIMIT_NAME": ("shared.limit_name", "corp-api", "corp-api"),
    # Flat fields beside the groups keep their place.
    "INGEST_KEEP_FILES": ("keep_files", "false", False),
    "INGEST_RETENTION_DAYS": ("retention_days", "30", 30),
}


def _read(settings: Settings, dotted: str) -> object:
    value: object = settings
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("variable", VARIABLES)
def test_each_groups_variable_sets_its_field(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dotted, text, value = VARIABLES[variable]
    default = _read(Settings(), dotted)
    assert default != value  # the variable, not the default, gives the value read
    monkeypatch.setenv(variable, text)
    assert _read(Settings(), dotted) == value
    assert Settings.field_of(variable) is not None


def test_the_variables_of_a_dotenv_file_reach_the_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    lines = [f"{variable}={text}" for variable, (_, text, _) in VARIABLES.items()]
    (tmp_path / ".env").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv("INGEST_S3_BUCKET", "from-the-environment")  # over the file's
    settings = Settings()
    for variable, (dotted, _, value) in VARIABLES.items():
        expected = "from-the-environment" if variable == "INGEST_S3_BUCKET" else value
        assert _read(settings, dotted) == expected, variable


def test_a_groups_keyword_sets_its_fields_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Settings(s3={"bucket": ...})`` sets the group's fields it names, over the
    environment; the group's other fields keep the environment's values."""
    monkeypatch.setenv("INGEST_S3_BUCKET", "env-bucket")
    monkeypatch.setenv("INGEST_S3_CONCURRENCY", "9")
    settings = Settings(
        s3={"bucket": "kw-bucket"},
        github={"base_url": "http://h:1"},
        lake={"endpoint_url": "http://127.0.0.1:9000"},
        ocr={"enabled": True},
        shared={"limit_block": 4},
    )
    assert (settings.s3.bucket, settings.s3.concurrency) == ("kw-bucket", 9)
    assert settings.github.base_url == "http://h:1" and settings.ocr.enabled is True
    assert (settings.lake.endpoint_url, settings.lake.region) == ("http://127.0.0.1:9000", None)
    assert settings.shared.limit_block == 4
    # A group's field is checked as its field: out of bounds names it.
    with pytest.raises(ValueError, match=r"s3\.concurrency"):
        Settings(s3={"concurrency": 0})


def test_a_flat_name_is_refused_not_ignored() -> None:
    """There is no flat-name layer: a keyword by a variable's flat name (``s3_bucket=``)
    is an error that names the grouped form, never a value silently dropped; and the
    flat attribute does not exist."""
    with pytest.raises(ValueError, match=r"s3_bucket: set through its group, s3=\{'bucket'"):
        Settings(s3_bucket="b")  # type: ignore[call-arg]
    settings = Settings(s3={"bucket": "b"})
    assert not hasattr(settings, "s3_bucket") and not hasattr(settings, "github_token")
    assert settings.s3.bucket == "b"


def test_updated_replaces_a_groups_field_in_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_S3_PREFIX", "reports/")
    worker = Settings(s3={"bucket": "b"})
    run = worker.updated(
        s3={"concurrency": 3}, github={"base_url": "http://h:1"}, task_runner="dask"
    )
    assert (run.s3.concurrency, run.s3.prefix, run.s3.bucket) == (3, "reports/", "b")
    assert (run.task_runner, run.github.base_url) == ("dask", "http://h:1")
    # The worker's own settings, and its groups, are untouched.
    assert (worker.s3.concurrency, worker.task_runner) == (128, "thread")
    assert worker.github.base_url == "https://api.github.com"
    assert run.http is worker.http  # a group not updated is shared, as model_copy does
    with pytest.raises(KeyError, match=r"s3\.bukket"):
        worker.updated(s3={"bukket": "x"})
    with pytest.raises(KeyError, match="s3_concurrency"):
        worker.updated(s3_concurrency=3)


def test_the_lake_group_gives_the_location_of_an_s3_data_dir() -> None:
    settings = Settings(
        data_dir="s3://lake-bucket/tables",
        local_dir="scratch",
        lake={
            "endpoint_url": "http://127.0.0.1:9000",
            "region": "eu-west-1",
            "credentials_block": "lake-keys",
        },
    )
    location = settings.location
    assert (location.root, location.local_dir) == ("s3://lake-bucket/tables", Path("scratch"))
    assert (location.endpoint_url, location.region, location.credentials_block) == (
        "http://127.0.0.1:9000",
        "eu-west-1",
        "lake-keys",
    )
    # A local lake has no endpoint, whatever the lake group says.
    local = settings.with_data_dir("here").location
    assert (local.root, local.endpoint_url, local.credentials_block) == ("here", None, None)


def test_the_github_token_never_goes_with_a_tasks_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """github.token, now in its group: a task's pickled copy has neither the token nor its
    group's copy of it, the group's other fields travel, the task's process finds its own."""
    import pickle

    token = "ghp_" + "k7" * 18
    monkeypatch.setenv("INGEST_GITHUB_TOKEN", token)
    settings = Settings(github={"base_url": "http://127.0.0.1:1"})
    assert settings.github.token is not None
    assert settings.github.token.get_secret_value() == token
    sent = settings.without_secrets()
    assert token.encode() not in pickle.dumps(sent)
    assert token.encode() not in pickle.dumps(sent.github)
    assert sent.github.token is None
    assert sent.github.base_url == "http://127.0.0.1:1"
    assert settings.github.token is not None  # the original keeps it
    own = sent.own_secret("github.token")
    assert own is not None and own.get_secret_value() == token
    monkeypatch.delenv("INGEST_GITHUB_TOKEN")
    assert sent.own_secret("github.token") is None  # a process without it has none


def group_fields() -> dict[str, str]:
    """Each group's field by the name its variable has without the prefix
    (``{"s3_bucket": "s3.bucket", ...}``)."""
    return {
        f"{name}_{sub}": f"{name}.{sub}"
        for name, field in Settings.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        for sub in field.annotation.model_fields
    }


def list_settings() -> list[str]:
    """Every list setting, by its name without the prefix, found in the model itself."""
    names = [n for n, f in Settings.model_fields.items() if typing.get_origin(f.annotation) is list]
    for flat, dotted in group_fields().items():
        group, _, sub = dotted.partition(".")
        kind = Settings.model_fields[group].annotation
        if typing.get_origin(kind.model_fields[sub].annotation) is list:  # type: ignore[union-attr]
            names.append(flat)
    return names


def test_every_list_setting_takes_a_plain_value_commas_or_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    names = list_settings()
    assert {"allowed_roots", "allowed_hosts", "s3_include", "s3_exclude"} <= set(names)
    for name in names:
        variable = f"INGEST_{name.upper()}"
        for given, meant in [
            ("/srv/data", ["/srv/data"]),
            ("/srv/a, /srv/b,", ["/srv/a", "/srv/b"]),
            ('["/srv/a,b", "c"]', ["/srv/a,b", "c"]),
            ("", []),
        ]:
            monkeypatch.setenv(variable, given)
            value = Settings()
            for part in group_fields().get(name, name).split("."):
                value = getattr(value, part)
            assert value == meant, (variable, given)
        monkeypatch.setenv(variable, '["unclosed"')
        with pytest.raises(ValueError, match="not a JSON list"):
            Settings()
        monkeypatch.delenv(variable)
    # A .env file's plain value too.
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("INGEST_ALLOWED_ROOTS=/srv/data\n", encoding="utf-8")
    assert Settings().allowed_roots == ["/srv/data"]


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("latency_base", "gone: the page plan measures the host's latency"),
        ("latency_per_item", "gone: the page plan measures the host's latency"),
        ("per_page", "moved to the GitHub source: client.paginator.page_size in sources/"),
        ("concurrency", "`ingest github --concurrency`, or the github-pulls flow's concurrency"),
        ("rate_limit_reserve", "client.rate_limit.reserve in sources/github.yaml or the"),
        ("secondary_retries", "moved to client.rate_limit.retries of the GitHub source"),
        ("timeout", "moved to INGEST_REST_TIMEOUT, which every REST source"),
        ("expected_pulls", "moved to INGEST_REST_EXPECTED_ROWS"),
    ],
)
def test_a_retired_github_setting_says_where_its_job_went(
    name: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub's knobs moved into its source (the file, the command's options, the flow's
    parameters) or to every REST source's settings; the latency model's settings are gone.
    Setting one is one error naming where its job went, by its variable or its group's keyword,
    never a value ignored."""
    variable = f"INGEST_GITHUB_{name.upper()}"
    monkeypatch.setenv(variable, "7")
    with pytest.raises(ValueError, match=f"{variable}: .*{re.escape(said)}"):
        Settings()
    monkeypatch.delenv(variable)
    with pytest.raises(ValueError, match=f"{variable}: .*{re.escape(said)}"):
        Settings(github={name: 7})
    assert Settings().github.base_url == "https://api.github.com"  # what stays is read


def test_every_github_setting_left_is_the_workers_own() -> None:
    """What stays under INGEST_GITHUB_ is the worker's: its token and its API root (which
    the worker trusts for deployed runs); every knob of how a source pages is declared."""
    fields = Settings.model_fields["github"].annotation.model_fields  # type: ignore[union-attr]
    assert set(fields) == {"token", "base_url"}
