"""Reporting: what a run and a night did, stored as rows and shown to people.

Modules, one per concern:

- ``timing``: every task attempt as a ``task_timings`` row.
- ``summary``: a run's summary (per-stage timing and throughput, counts, first failures).
- ``history``: one ``flow_runs`` row per finished run, and a run's stages compared with
  the previous run of the same deployment.
- ``freshness``: each source's last successful sync and how far behind it is.
- ``nights``: the last nights per source, the trend, the nights much slower than before.
- ``nightly``: what the ``nightly`` flow reports per child and in its summary.
- ``chart``: the nights' durations as a small SVG bar chart.
- ``status``: what ``ingest status`` prints.
- ``console``: a run or a query as text on a terminal.

The package imports none of its modules: importing one loads only what it needs.
"""
