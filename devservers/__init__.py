"""Development servers for benchmarks at scale (``memory_s3``: an in-memory S3 endpoint)."""
