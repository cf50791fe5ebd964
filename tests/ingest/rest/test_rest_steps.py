"""A source file names functions, it never chooses code (``ingest.rest.steps``).

The probes of the security review, against a real API server on loopback: a file whose
``convert`` is ``os:getenv`` (with ``initial_value: AWS_SECRET_ACCESS_KEY``, which sent
the secret as ``?since=``) or whose ``map`` is ``builtins:eval`` is refused when it loads,
before any request; the server sees none. A function the project ships works by name,
and one the worker registers by import path.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from dev.servers.shop import ShopServer, order
from ingest import storage
from ingest.rest import steps
from ingest.rest.config import RestConfig
from ingest.rest.errors import SourceError
from ingest.rest.run import fetch_source
from ingest.rest.source import load_source, parse_source
from ingest.settings import Settings

SECRET = "aws-secret-from-the-worker-0123456789"  # fake

SOURCE = """name: shop
client:
  base_url: {url}
  paginator: {{type: cursor, cursor_path: next_cursor, cursor_param: cursor}}
resource_defaults:
  primary_key: id
  endpoint: {{data_selector: data}}
resources:
  - name: orders
    endpoint:
      path: orders
      params:
        since: "{{incremental.start_value}}"
      incremental:
        cursor_path: updated_at
        initial_value: "{initial}"
{extra}"""


def source_text(url: str, *, initial: str = "2025-05-01T00:00:00Z", convert: str = "") -> str:
    extra = f"        convert: {convert}\n" if convert else ""
    return SOURCE.format(url=url, initial=initial, extra=extra)


@pytest.mark.parametrize(
    ("initial", "convert", "step"),
    [
        ("AWS_SECRET_ACCESS_KEY", "os:getenv", ""),
        ("2025-05-01T00:00:00Z", "", "map: builtins:eval"),
        ("2025-05-01T00:00:00Z", "", "filter: subprocess:getoutput"),
        ("2025-05-01T00:00:00Z", "os.path:expandvars", ""),
    ],
)
def test_a_file_naming_any_importable_function_is_refused_before_any_request(
    initial: str,
    convert: str,
    step: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.delenv("INGEST_SOURCE_FUNCTIONS", raising=False)
    with ShopServer([order(1, updated_at="2025-05-02T00:00:00Z")]) as shop:
        text = source_text(shop.url, initial=initial, convert=convert)
        if step:
            text += f"    processing_steps:\n      - {step}\n"
        path = tmp_path / "hostile.yaml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(SourceError, match=r"hostile.yaml:\d+: .*is not a registered function"):
            load_source(path)
        result = CliRunner().invoke(app, ["rest", str(path), "--data-dir", str(tmp_path / "data")])
        assert result.exit_code == 2, result.output
        assert "is not a registered function" in result.output
        assert shop.requests == []  # refused at load: nothing was sent, the secret least of all
    assert SECRET not in result.output
    assert not (tmp_path / "data").exists()


def test_a_module_registered_whole_gives_only_the_functions_it_defines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``module:*`` registers what the module defines, not what it imports: a registered
    module that does ``from os import getenv`` does not register ``getenv``."""
    monkeypatch.setenv("INGEST_SOURCE_FUNCTIONS", '["tests.rest_steps:*", "ingest.rest.steps:*"]')
    assert steps.resolve("tests.rest_steps:epoch")("1970-01-01T00:01:00Z") == 60
    for imported in ("ingest.rest.steps:re.compile", "ingest.rest.steps:datetime"):
        with pytest.raises(ValueError, match="is not one"):
            steps.resolve(imported)
    with pytest.raises(ValueError, match="is not one"):
        steps.resolve("ingest.rest.steps:_instant")  # private
    monkeypatch.setenv("INGEST_SOURCE_FUNCTIONS", '["tests.rest_steps:paid_only"]')
    assert steps.resolve("tests.rest_steps:paid_only")({"paid": True}) is True
    with pytest.raises(ValueError, match="not a registered function"):
        steps.resolve("tests.rest_steps:epoch")  # the registration changed: read again


def test_the_shipped_functions_convert_by_name(data_dir: Path) -> None:
    """``convert: unix_seconds``, a function the project ships, named by a bare name: sent
    as the start value, then the watermark."""
    stamps = ["2025-05-01T00:05:00Z", "2025-05-01T00:10:00Z"]
    text = source_text("{url}", convert="unix_seconds").replace("since:", "since_epoch:")
    with ShopServer([order(n, updated_at=s) for n, s in enumerate(stamps, 1)]) as shop:
        source = parse_source(text.replace("{url}", shop.url), "shop.yaml")
        settings = Settings(data_dir=data_dir)
        assert fetch_source(RestConfig.of(settings), source, run_id="run-1").complete
        storage.commit_run(data_dir, "run-1")
        fetch_source(RestConfig.of(settings), source, run_id="run-2")
    start = int(datetime(2025, 5, 1, tzinfo=UTC).timestamp())
    sent = [r for r in shop.requests if r.startswith("/orders")]
    assert sent == [f"/orders?since_epoch={start}", f"/orders?since_epoch={start + 600}"]
    assert steps.iso_date("2025-05-01T23:30:00-02:00") == "2025-05-02"
    assert steps.utc_iso("2025-05-01T09:00:00+09:00") == "2025-05-01T00:00:00Z"
    assert steps.unix_millis("1970-01-01T00:00:01Z") == 1000


@pytest.mark.parametrize("where", ["top", "params"])
def test_a_source_nested_20000_deep_is_refused_in_one_line(tmp_path: Path, where: str) -> None:
    deep = "[" * 20_000 + "]" * 20_000
    text = deep if where == "top" else source_text("http://127.0.0.1:9/") + f"      x: {deep}\n"
    path = tmp_path / "deep.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SourceError, match=r"deep\.yaml: nested too deep to read") as refused:
        load_source(path)
    assert "\n" not in str(refused.value)
    result = CliRunner().invoke(app, ["rest", str(path), "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1, result.output[:2000]


@pytest.mark.parametrize(
    "header", ["X-Auth-Token", "Private-Token", "Proxy-Authorization", "X-Session-Id", "Cookie"]
)
def test_a_literal_credential_header_is_refused_at_load(tmp_path: Path, header: str) -> None:
    """A header is sent to every host a listing reaches; a credential belongs under auth
    (its own origin only, from a secret or a variable, never written in the file)."""
    text = source_text("http://127.0.0.1:9/").replace(
        "  base_url:", f"  headers: {{{header}: literal-secret-value}}\n  base_url:"
    )
    with pytest.raises(SourceError, match=f"header '{header}' carries a credential"):
        parse_source(text, "headers.yaml")
    plain = source_text("http://127.0.0.1:9/").replace(
        "  base_url:",
        "  headers: {Accept: application/json, X-GitHub-Api-Version: '2022'}\n  base_url:",
    )
    assert parse_source(plain, "headers.yaml").client.headers["Accept"] == "application/json"
