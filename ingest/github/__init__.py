"""GitHub pull requests, paged concurrently, rate-limit-aware and incremental: one
configuration of the REST paging engine (``ingest.rest``) plus what is GitHub's own
(its rate-limit headers and ``/rate_limit``, ETags, the ``updated_at`` watermark).

Modules, one concern each:

* ``client``     GitHub's headers over the shared REST client (``ingest.rest.client``:
                 adaptive window, rate-limit governor, retries, request rows)
* ``sync``       one repository's incremental sync (ETags, watermark) through the one
                 paging loop (``ingest.rest.engine``), and many repositories at once
* ``store``      stored ETags and watermarks in, rows out (Parquet parts)
* ``run``        one run for many repositories (the function under the Prefect task)
* ``records``, ``errors``
"""
