"""Local servers on loopback that behave like the services the product talks to: S3
(``s3`` on moto, ``memory_s3`` for scale, ``faultproxy`` in front of either), GitHub
(``github``), a declared REST API (``rest``), PostgreSQL (``postgres``) and a Dask cluster
of child processes (``dask_cluster``)."""
