"""What a scheduling pass reads of the cluster's nodes and burst claims
(`SnapshotReader.nodes_and_claims`): one read of both when it may burst, and the nodes
alone when the claims cannot be read. Which waiting jobs' stopped runs it asks about
(`SnapshotReader.winding_down`, D210)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from tests.unit.governance.pass_builders import NOW, eks_node, hyperpod_node, job_with, pending
from tests.unit.governance.test_pass_decide import claim

from hyperguard.cluster import ClusterError, ClusterGateway
from hyperguard.governance.reader import SnapshotReader
from hyperguard.models import Job, JobStatus, Node
from hyperguard.models.cluster import BurstClaim
from hyperguard.store.checkpoints import CheckpointStore
from hyperguard.store.jobs import JobStore
from hyperguard.store.teams import TeamStore

NODES = [hyperpod_node(0), eks_node(1)]
CLAIM = claim("hg-a", "i-eks00")


class Cluster:
    """The gateway's two node reads, recorded."""

    def __init__(self, claims: list[BurstClaim] | ClusterError) -> None:
        self.claims = claims
        self.calls: list[str] = []

    def list_nodes(self) -> list[Node]:
        self.calls.append("list_nodes")
        return list(NODES)

    def nodes_and_claims(self) -> tuple[list[Node], list[BurstClaim] | ClusterError]:
        self.calls.append("nodes_and_claims")
        return list(NODES), self.claims

    def winding_down(self, jobs: list[Job]) -> set[str]:
        self.calls.append(f"winding_down {sorted(j.job_id for j in jobs)}")
        if isinstance(self.claims, ClusterError):
            raise self.claims
        return {j.job_id for j in jobs}


def reader(cluster: Cluster) -> SnapshotReader:
    """A reader whose only collaborator these reads use is the gateway."""
    nothing: Any = None
    return SnapshotReader(
        jobs=cast(JobStore, nothing),
        teams=cast(TeamStore, nothing),
        gateway=cast(ClusterGateway, cluster),
        checkpoints=cast(CheckpointStore, nothing),
    )


def test_a_pass_that_may_burst_reads_nodes_and_claims_together() -> None:
    cluster = Cluster([CLAIM])
    assert reader(cluster).nodes_and_claims(bursting=True) == (tuple(NODES), (CLAIM,))
    assert cluster.calls == ["nodes_and_claims"]


def test_a_pass_that_may_not_burst_reads_no_claims() -> None:
    cluster = Cluster([CLAIM])
    assert reader(cluster).nodes_and_claims(bursting=False) == (tuple(NODES), None)
    assert cluster.calls == ["list_nodes"]


def test_unreadable_claims_keep_the_nodes_and_say_why(caplog: pytest.LogCaptureFixture) -> None:
    """The pass then neither bursts nor scales in (claims None), and still places on the
    nodes it read."""
    cluster = Cluster(ClusterError("Kubernetes API on gpu-eks: 503"))
    assert reader(cluster).nodes_and_claims(bursting=True) == (tuple(NODES), None)
    (warning,) = [r for r in caplog.records if r.getMessage() == "burst claims unreadable"]
    assert getattr(warning, "error", None) == "Kubernetes API on gpu-eks: 503"


def test_only_waiting_restarts_that_write_checkpoints_are_asked_about_their_pods(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A job never admitted has no pods; one without a checkpoint location has nothing to
    resume from; a suspended one is not admitted; a running one is not waiting. A cluster
    that cannot say holds no restart back."""
    ran = {"first_admitted_at": NOW}
    location = "s3://bucket/run/"
    jobs = [
        job_with(pending("restart", "a").model_copy(update=ran), checkpoint_location=location),
        job_with(
            pending("preempted", "a").model_copy(update=ran),
            status=JobStatus.PREEMPTED,
            checkpoint_location=location,
        ),
        job_with(pending("new", "a"), checkpoint_location=location),
        pending("no-checkpoints", "a").model_copy(update=ran),
        job_with(
            pending("suspended", "a").model_copy(update=ran),
            status=JobStatus.SUSPENDED,
            checkpoint_location=location,
        ),
        job_with(
            pending("running", "a").model_copy(update=ran),
            status=JobStatus.RUNNING,
            checkpoint_location=location,
        ),
    ]
    cluster = Cluster([CLAIM])
    assert reader(cluster).winding_down(jobs) == {"preempted", "restart"}
    assert cluster.calls == ["winding_down ['preempted', 'restart']"]
    assert reader(Cluster([CLAIM])).winding_down(jobs[2:]) == frozenset()
    failing = Cluster(ClusterError("Kubernetes API on gpu-eks: 503"))
    assert reader(failing).winding_down(jobs) == frozenset()
    assert any(r.getMessage() == "stopped runs' pods unreadable" for r in caplog.records)
