"""What a REST run reads of the settings: its groups, where the tables are, and the
hosts a page may lead to. Built once where a run starts (``RestConfig.of``), so that
each function below takes the group it uses (``RestSettings`` for retries and the
budget share, ``HttpSettings`` for the window and the body limits, ``SharedSettings``
for the limits shared across workers) and none takes the whole ``Settings``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import SecretStr

    from ingest.settings import (
        GitHubSettings,
        HttpSettings,
        RestSettings,
        Settings,
        SharedSettings,
    )
    from ingest.storage.location import LakeLocation


@dataclass(frozen=True)
class RestConfig:
    """The settings of one REST run, by concern."""

    rest: RestSettings
    http: HttpSettings
    shared: SharedSettings
    github: GitHubSettings
    location: LakeLocation  # the tables, bound to the run's lake session
    allowed_hosts: tuple[str, ...]
    task_runner: str
    # a secret field of these settings, else of this process's own environment (a task's
    # settings come without secrets: the worker's INGEST_GITHUB_TOKEN); read only when needed
    own_secret: Callable[[str], SecretStr | None]

    @classmethod
    def of(cls, settings: Settings, lake: LakeLocation | None = None) -> RestConfig:
        """The run's view of ``settings`` (the one place a REST run reads them whole);
        ``lake``: the run's tables, bound to its lake session
        (``ingest.context.RunContext.lake``); None: the settings' own, unbound."""
        return cls(
            rest=settings.rest,
            http=settings.http,
            shared=settings.shared,
            github=settings.github,
            location=lake if lake is not None else settings.location,
            allowed_hosts=tuple(settings.allowed_hosts),
            task_runner=settings.task_runner,
            own_secret=settings.own_secret,
        )
