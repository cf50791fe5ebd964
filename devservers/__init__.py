"""Development tools, not the library: local S3- and GitHub-compatible servers
(moto-based ``s3`` for tests and the demo, ``memory_s3`` for benchmarks at scale),
generated sample documents, S3 Inventory reports (``inventory``) and the
``ingest demo``. Used by the demo, the tests
and the benchmarks; ``ingest/`` never imports them.
"""
