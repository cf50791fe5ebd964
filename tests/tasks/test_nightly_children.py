"""The nightly's children, as it hooks them, still go to Dask: a task submitted there is
pickled with its flow run's context, the child flow and its hooks included."""

from __future__ import annotations

import cloudpickle

from flows.github_pulls import github_pulls
from flows.s3_ingest import s3_ingest
from tasks.nightly import _Started


def test_a_hooked_child_flow_pickles_as_dask_needs() -> None:
    first, second = _Started(), _Started()
    first.next = second
    for child, mark in ((s3_ingest, first), (github_pulls, second)):
        hooked = child.with_options(on_running=[*child.on_running_hooks, mark])
        copy = cloudpickle.loads(cloudpickle.dumps(hooked))
        assert copy.name == child.name
        [copied] = [h for h in copy.on_running_hooks if isinstance(h, _Started)]
        assert copied.next is None and not copied.event.is_set()
    # the marks in this process keep their link
    assert first.next is second
