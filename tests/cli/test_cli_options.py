"""The ``ingest`` command's options: their help shows the defaults the runs use (read from
``Settings``), and every option out of bounds is refused at once, before Prefect is
imported or a server starts: exit code 2, one line of error, no traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from prefect.utilities.callables import parameter_schema
from typer.testing import CliRunner

from cli.main import BUCKET_LENGTH, app
from flows.s3_ingest import s3_ingest
from ingest.settings import S3Settings, Settings
from tests.helpers import ROOT

ENV_NOTE = re.compile(r"\[env INGEST_([A-Z0-9_]+)(?:, default ([^\]]+))?\]")


def options() -> list[tuple[str, Any]]:
    group: Any = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="ingest")
    out = []
    for name in group.list_commands(ctx):
        for p in group.get_command(ctx, name).params:
            if p.param_type_name == "option":  # typer's own click, not the click package
                out.append((name, p))
    return out


def shown(value: Any) -> str | None:
    if value in (None, "", []):
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_help_defaults_and_bounds_are_the_settings() -> None:
    checked = 0
    for command, option in options():
        note = ENV_NOTE.search(option.help or "")
        if note is None:
            continue
        variable, default = note.groups()
        field = Settings.field_of(variable)
        assert field is not None, (command, option.name, variable)
        expected = shown(field.get_default(call_default_factory=True))
        if expected is not None:  # a setting without a default may say what happens then
            assert default == expected, (command, option.name, default, expected)
        bounds = {k: getattr(m, k) for m in field.metadata for k in ("ge", "le") if hasattr(m, k)}
        assert (option.min, option.max) == (bounds.get("ge"), bounds.get("le")), option.name
        checked += 1
    assert checked >= 12


def test_list_shards_help_shows_the_planned_shards() -> None:
    """``--help`` said 1 while runs planned 4 shards; it now reads the setting."""
    out = " ".join(CliRunner().invoke(app, ["s3", "--help"]).output.split())
    default = S3Settings.model_fields["list_shards"].default
    assert f"INGEST_S3_LIST_SHARDS, default {default}]" in out


def test_bucket_bounds_are_the_flows() -> None:
    schema = parameter_schema(s3_ingest).model_dump()["properties"]["bucket"]
    assert (schema["minLength"], schema["maxLength"]) == BUCKET_LENGTH


REFUSED = [
    (["s3", "--bucket", "some-bucket", "--concurrency", "0"], "--concurrency"),
    (["s3", "--bucket", "some-bucket", "--concurrency", "513"], "--concurrency"),
    (["s3", "--bucket", "some-bucket", "--list-shards", "0"], "--list-shards"),
    (["s3", "--bucket", "ab"], "--bucket"),
    (["s3", "--bucket", "b" * 64], "--bucket"),
    (["s3", "--bucket", "some-bucket", "--listing", "ls"], "--listing"),
    (["s3", "--bucket", "some-bucket", "--task-runner", "cpu"], "--task-runner"),
    (["s3", "--bucket", "some-bucket", "--listing", "inventory"], "--inventory"),
    (["s3", "--bucket", "some-bucket", "--concurrency", "many"], "--concurrency"),
    (["github", "--repo", "octo/a", "--concurrency", "0"], "--concurrency"),
    (["github", "--repo", "octo/a", "--per-page", "101"], "--per-page"),
    (["github", "--repo", "octo/a", "--state", "merged"], "--state"),
    (["github", "--repo", "no-slash"], "--repo"),
    (["rest", "sources/tickets.yaml", "--concurrency", "0"], "--concurrency"),
    (["rest", "no/such/source.yaml"], "no/such/source.yaml"),
    (["status", "--nights", "0"], "--nights"),
    (["search", "x", "--limit", "0"], "--limit"),
]


def refused(args: list[str], env: dict[str, str], named: str) -> str:
    """What a command printed when it exited 2 naming ``named``, with no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out and named in out, out
    return out


@pytest.mark.parametrize(("args", "named"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_bad_option_is_refused_before_anything_starts(
    args: list[str], named: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
    out = refused([*args, "--data-dir", str(tmp_path / "data")], env, named)
    errors = [ln for ln in out.splitlines() if ln.lower().startswith("error")]
    assert len(errors) == 1, out
    assert "Prefect server" not in out and not (home / ".prefect" / "prefect.db").exists()
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("INGEST_GITHUB_LATENCY_BASE", "0.1", "gone: the page plan measures"),
        ("INGEST_GITHUB_CONCURRENCY", "8", "moved to the GitHub source: client.concurrency"),
        ("INGEST_S3_CONCURRENCY", "many", "s3.concurrency"),
    ],
    ids=["retired", "moved", "not a number"],
)
def test_a_bad_setting_is_one_line_of_error(
    variable: str, value: str, named: str, tmp_path: Path
) -> None:
    """A setting's value the settings refuse (a variable, .env) is one line naming it,
    exit code 2, as a bad option is; a retired setting says where its job went."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({"HOME": str(tmp_path), variable: value})
    out = refused(["github", "--repo", "octo/engine"], env, named)
    assert [ln for ln in out.splitlines() if ln.strip()] == [
        ln for ln in out.splitlines() if ln.startswith("error: setting ")
    ], out


def test_a_command_keeps_openblas_to_one_thread_unless_told() -> None:
    """numpy (pyarrow's) starts OpenBLAS threads that spin after the import; a command's
    process, and what it starts, runs with one unless the user set a number."""
    probe = "import cli, os, numpy; print(os.environ['OPENBLAS_NUM_THREADS'], numpy.__name__)"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    for given, expected in ((None, "1 numpy"), ("3", "3 numpy")):
        run_env = env if given is None else {**env, "OPENBLAS_NUM_THREADS": given}
        out = subprocess.run(
            [sys.executable, "-c", probe], env=run_env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == expected, out.stderr


def test_the_help_is_plain_text_and_usage_names_arguments_plainly() -> None:
    shown = CliRunner().invoke(app, ["--help"]).output
    assert "``" not in shown and ":class:" not in shown
    assert "Exit codes: 0 done; 2 a mistake to fix" in " ".join(shown.split())
    for args, usage in [
        (["search"], "Usage: ingest search [OPTIONS] WORDS"),
        (["query"], "Usage: ingest query [OPTIONS] SQL"),
        (["rest"], "Usage: ingest rest [OPTIONS] SOURCE"),
        (["schema"], "Usage: ingest schema [OPTIONS] SOURCE [RESOURCE]"),
    ]:
        first = (
            CliRunner().invoke(app, [*args, "--help"], prog_name="ingest").output.splitlines()[0]
        )
        assert first == usage


def test_a_new_database_is_said_only_on_its_first_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deployments import local_api

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL", raising=False)
    monkeypatch.delenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", raising=False)
    assert local_api.database_is_new()
    (tmp_path / "prefect.db").write_bytes(b"")
    assert not local_api.database_is_new()
