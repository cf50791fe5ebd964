"""Any paginated REST API, declared not coded, at a speed that adapts to the server.

Modules, one concern each:

* ``source``     the declarative source file (YAML, pydantic schema, errors with lines)
* ``auth``       credentials from a Prefect Secret block or an environment variable
* ``paging``     paging strategies (Link header, page number, offset, cursor in the body
                 or a header, next URL in the body)
* ``engine``     the one paging loop (planned pages concurrently, cursors in sequence,
                 repeating cursors refused) and one listing's state
* ``window``     the adaptive in-flight window (AIMD, like TCP congestion control)
* ``ratelimit``  rate-limit headers, the budget governor, the retry policy
* ``client``     the one HTTP boundary (window, governor, retries, request rows)
* ``sizing``     page sizes and requests in flight from measured latency, within the
                 host's limits and the budget
* ``dialect``    what an API does its own way, as one object handed to the engine (the
                 plain default); ``dialects`` finds a source's (``github``: GitHub's)
* ``run``        one run of a declared source (parents, children, incremental state),
                 a dialect's through its run hooks
* ``store``      state in, rows out (Delta tables via ``ingest.storage``)
* ``summary``, ``records``, ``errors``, ``aio``
"""
