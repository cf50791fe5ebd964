"""Nightly ingestion of S3 documents and REST APIs into Parquet and DuckDB.

The package holds the plain, typed logic (listing, downloading, storing,
timing); ``tasks/`` wraps it in thin Prefect tasks and ``flows/`` composes
those tasks. Imports flow one way: cli -> flows -> tasks -> ingest; the
library never imports flows, tasks, deployments, cli or devservers
(tests/test_layout.py checks).
"""

__version__ = "0.1.0"
