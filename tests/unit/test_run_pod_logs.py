"""Which pod is a run's replica, and the log lines the twin's containers print, in the CRI
format the kubelet's log API (KWOK's) reads."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hyperguard.cluster.workloads import replica_index
from hyperguard_twin.cloud.logs import cri_line


def test_a_replica_is_an_indexed_jobs_completion_index_or_the_operators_name_suffix() -> None:
    batch = {"name": "ml-1-abcde", "labels": {"batch.kubernetes.io/job-completion-index": "3"}}
    assert replica_index(batch) == 3
    assert replica_index({"name": "ml-1-pods-12", "labels": {}}) == 12
    assert replica_index({"name": "ml-1-pods-x"}) is None
    assert (
        replica_index({"name": "a", "labels": {"batch.kubernetes.io/job-completion-index": "x"}})
        is None
    )


def test_a_log_line_is_written_as_containerd_writes_it() -> None:
    line = cri_line(datetime(2026, 11, 26, 12, 0, 1, 250_000, tzinfo=UTC), "step 10")
    assert line == "2026-11-26T12:00:01.250000000Z stdout F step 10\n"
    # what the kubelet's CRI log parser takes: RFC 3339 with nanoseconds, stream, tag, text
    assert re.fullmatch(r"\S+Z (stdout|stderr) [FP] .*\n", line)
