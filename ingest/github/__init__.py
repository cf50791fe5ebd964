"""GitHub pull requests, paged concurrently, rate-limit-aware and incremental.

Modules, one concern each:

* ``paging``     paging strategies (Link header, page number, offset, body cursor)
                 and the generic paging loop
* ``ratelimit``  the rate-limit governor (primary budget, reserve, secondary limits)
                 and the retry policy for 5xx and timeouts
* ``client``     the one HTTP boundary: shared ``httpx.AsyncClient``, global in-flight
                 limit, status handling, request rows, sanitised URLs
* ``sync``       one repository's incremental sync (ETags, watermark) and many at once;
                 the automatic ``per_page``
* ``store``      stored ETags and watermarks in, rows out (Parquet parts)
* ``run``        one run for many repositories (the function under the Prefect task)
* ``records``, ``errors``
"""
