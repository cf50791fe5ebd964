"""Development tools, not the product: what the demo, the tests and the benchmarks run
beside it, from a checkout of the project.

* ``servers/``: local stand-ins for the services the product talks to, each a real
  server on loopback (S3 on moto, an in-memory S3 for scale, GitHub, a generic REST
  API, an S3 fault proxy, PostgreSQL, a Dask cluster of child processes);
* ``samples``: generated sample documents; ``inventory``: S3 Inventory reports;
* ``demo`` (``make demo``) and its GitHub and REST parts.

Neither the wheel nor the worker image holds this package, and nothing shipped
(``ingest``, ``flows``, ``tasks``, ``deployments``, ``cli``) imports it
(``tests/test_layout.py`` checks).
"""
