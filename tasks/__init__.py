"""Thin Prefect tasks over the plain functions of the ``ingest`` package.

Each task names a step (kebab-case), declares its retries, records its
timing (``tasks.timing.timed``) and calls into ``ingest``; the logic lives
there so it can be tested without Prefect.
"""
