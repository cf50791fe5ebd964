"""Storage tasks."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from ingest import storage
from ingest.settings import Settings


@task(name="update-warehouse", cache_policy=NO_CACHE)
def update_warehouse(settings: Settings) -> bool:
    """Create or refresh the DuckDB views over the Parquet tables."""
    return storage.ensure_warehouse(settings.data_dir)
