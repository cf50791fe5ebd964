"""Development tools, not the library: local S3- and GitHub-compatible servers,
generated sample documents and the ``ingest demo``. Used by the demo, the tests
and the benchmarks; ``ingest/`` never imports them.
"""
