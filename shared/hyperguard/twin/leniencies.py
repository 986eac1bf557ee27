"""Where the twin is still kinder than the real cluster: listed by `hyperguard twin status`
and docs/architecture.md, so a test that passes on the twin says how far it can be trusted.

Each entry is (the emulated component, what it does not refuse or do that the real one
would). Whoever makes the twin stricter removes the entry; whoever finds a new gap adds one.
"""

from __future__ import annotations

LENIENCIES: tuple[tuple[str, str], ...] = (
    (
        "kube-scheduler",
        "no scoring: a pod goes to the node its replica was placed on when that node takes "
        "it, else to the first by name; pod (anti-)affinity, topology spread, host ports, "
        "volumes and scheduling gates are not checked; no preemption (all the twin's pods "
        "have one priority)",
    ),
    (
        "kubelet",
        "a pod created with spec.nodeName already set is not checked against the node's "
        "allocatable (no OutOf<resource> admission failure)",
    ),
    (
        "node lifecycle controller",
        "a NotReady node is not tainted node.kubernetes.io/not-ready, so the scheduler does "
        "not refuse it on that ground (a run there does not step either)",
    ),
    (
        "job controllers",
        "a Job or HyperPodPyTorchJob whose pods are not pinned to nodes gets no pods",
    ),
    (
        "nodes",
        "maxPods is the kubelet's default 110, not the EKS AMI's per-instance-type figure",
    ),
    (
        "Karpenter",
        "launches only the NodeClaims it is given (no provisioning for pending pods), checks "
        "NodePool limits only eventually, consolidates only by deleting nodes (never by a "
        "cheaper replacement; budgets with a schedule taken as inactive; PDBs not checked), "
        "and neither expires nor drifts nodes",
    ),
    (
        "HyperPod automatic patching",
        "runs once, on the NextPatchDate it is given (no next date follows); DrainFirst "
        "deletes pods without checking PDBs or DrainPolicy's timeout; no AMI ids or release "
        "versions are reported, only LastSoftwareUpdateTime and SoftwareUpdateStatus",
    ),
)
