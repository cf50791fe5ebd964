"""A REST run reads the settings by concern: ``RestConfig.of`` is the one place that takes
the whole ``Settings``; every other function of ``ingest/rest`` takes the group it uses."""

from __future__ import annotations

import ast
from pathlib import Path

from ingest.rest.config import RestConfig
from ingest.rest.github import github_token
from ingest.rest.source import Source
from ingest.settings import GitHubSettings, HttpSettings, RestSettings, Settings

REST = Path(__file__).resolve().parents[3] / "ingest" / "rest"


def whole_settings_takers(folder: Path) -> list[str]:
    """``module:function`` of each function with a parameter annotated ``Settings``."""
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            if any(
                a.annotation is not None and ast.unparse(a.annotation) == "Settings" for a in args
            ):
                found.append(f"{path.stem}:{node.name}")
    return found


def test_only_the_config_takes_the_whole_settings() -> None:
    assert whole_settings_takers(REST) == ["config:of"]


def test_the_check_sees_a_function_taking_the_whole_settings(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "def f(settings: Settings) -> None: ...\ndef g(rest: RestSettings) -> None: ...\n"
    )
    assert whole_settings_takers(tmp_path) == ["m:f"]


def test_the_config_holds_the_runs_groups_and_the_workers_own_token() -> None:
    settings = Settings(
        rest=RestSettings(timeout=7.0),
        http=HttpSettings(initial_window=3),
        github=GitHubSettings(base_url="https://ghe.test/api/v3"),
        allowed_hosts=["mirror.test"],
    )
    config = RestConfig.of(settings)
    assert config.rest.timeout == 7.0 and config.http.initial_window == 3
    assert config.github.base_url == "https://ghe.test/api/v3"
    assert config.allowed_hosts == ("mirror.test",) and config.task_runner == "thread"
    assert config.location.root == str(settings.data_dir)
    # a source naming no token of its own: the worker's INGEST_GITHUB_TOKEN, read when needed
    source = Source.model_validate(
        {
            "client": {"dialect": "github", "base_url": "https://ghe.test/api/v3"},
            "repos": ["octo/a"],
            "resources": [{"name": "pulls", "endpoint": {"path": "repos/{repo}/pulls"}}],
        }
    )
    with_token = RestConfig.of(settings.model_copy(update={"github": GitHubSettings(token="t0k")}))
    assert github_token(source, with_token) == "t0k"
