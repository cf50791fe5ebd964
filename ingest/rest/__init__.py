"""Any paginated REST API, declared not coded, at a speed that adapts to the server.

Modules, one concern each:

* ``source``     the declarative source file (YAML, its resources, errors with lines)
* ``spec``       its ``client`` section: auth, paginator, rate limit; dlt forms refused
* ``config``     what a run reads of the settings, by group
* ``auth``       credentials from a Prefect Secret block or an environment variable
* ``paging``     paging strategies (Link header, page number, offset, cursor in the body
                 or a header, next URL in the body)
* ``engine``     the one paging loop (planned pages concurrently, cursors in sequence,
                 repeating cursors refused) and one listing's state
* ``window``     the adaptive in-flight window (AIMD, like TCP congestion control)
* ``ratelimit``  rate-limit headers, the budget governor, the retry policy
* ``client``     the one HTTP boundary (window, governor, retries, request rows)
* ``transport``  its httpx client (TLS, pools in shards, credentials to one origin)
* ``sizing``     page sizes and requests in flight from measured latency, within the
                 host's limits and the budget
* ``dialect``    what an API does its own way, as one object handed to the engine (the
                 plain default); ``dialects`` finds a source's (``github``: GitHub's,
                 whose run hooks, one listing per repository, are ``pulls``)
* ``run``        one run of a declared source (parents, children, the listing loop),
                 a dialect's through its run hooks; ``plain`` the engine's own hooks
                 (watermarks, page sizes, records read into rows)
* ``store``      state in, rows out (Delta tables via ``ingest.storage``)
* ``summary``, ``records``, ``errors``, ``aio``
"""
