"""One settings object for endpoints, paths and defaults.

Every field can come from an environment variable with the ``INGEST_`` prefix
(``INGEST_DATA_DIR``, ``INGEST_S3_CONCURRENCY`` ...) or a ``.env`` file; the
CLI options and the flow parameters override them. Settings are built at the
boundary (the CLI command or the flow run), never at import time.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024


class Settings(BaseSettings):
    """Defaults for every run; see the field descriptions."""

    model_config = SettingsConfigDict(
        env_prefix="INGEST_", env_file=".env", extra="ignore", validate_default=True
    )

    data_dir: Path = Field(
        Path("data"),
        description="Folder holding the Parquet tables, warehouse.duckdb and downloaded objects.",
    )

    # --- S3 -----------------------------------------------------------------
    s3_bucket: str | None = Field(None, description="Bucket to ingest.")
    s3_prefix: str = Field("", description="Only keys under this prefix.")
    s3_endpoint_url: str | None = Field(
        None, description="S3-compatible endpoint (MinIO, Ceph, moto); None means AWS."
    )
    s3_region: str | None = Field(None, description="AWS region; None uses the standard chain.")
    s3_download_dir: Path | None = Field(
        None,
        description="Where objects land, at DIR/<key relative to prefix>; "
        "default DATA_DIR/objects/<bucket>.",
    )
    s3_concurrency: int = Field(
        64,
        ge=1,
        le=512,
        description="Requests in flight. Sized for latency (in flight = rate x latency), "
        "not for CPU cores.",
    )
    s3_batch_size: int = Field(
        250, ge=1, le=10_000, description="Objects per Prefect task run (one task per batch)."
    )
    s3_range_threshold: int = Field(
        16 * MiB, ge=MiB, description="Objects at least this large are fetched as byte ranges."
    )
    s3_range_size: int = Field(8 * MiB, ge=MiB, description="Size of one byte range.")
    s3_max_attempts: int = Field(
        5, ge=1, le=20, description="botocore attempts per request (throttling, 5xx)."
    )
    s3_stream_retries: int = Field(
        3, ge=0, le=20, description="Resumptions of a body stream broken mid-transfer."
    )
    s3_connect_timeout: float = Field(10.0, gt=0, description="Seconds to open a connection.")
    s3_read_timeout: float = Field(60.0, gt=0, description="Seconds without a byte read.")
    s3_credentials_block: str | None = Field(
        None, description="Name of a Prefect AwsCredentials block; None uses the AWS chain."
    )
    max_failed_ratio: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="A run fails when more than this share of its objects failed.",
    )

    # --- GitHub ---------------------------------------------------------------
    github_token: SecretStr | None = Field(None, description="GitHub token (never logged).")

    @property
    def warehouse_path(self) -> Path:
        """The DuckDB database file people open."""
        return self.data_dir / "warehouse.duckdb"

    def download_root(self, bucket: str) -> Path:
        """Folder that mirrors ``bucket/prefix``."""
        return self.s3_download_dir or (self.data_dir / "objects" / bucket)
