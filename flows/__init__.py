"""Prefect flows: each composes tasks from ``tasks/`` and nothing else."""
