"""`hyperguard preflight`'s checks, as pure functions of what the read-only calls answered:
each says pass, warn or fail, what it found and the fix."""

from __future__ import annotations

from typing import Any

from hyperguard.cli.preflight import (
    FUNCTION_GROUPS,
    check_access_entries,
    check_admins,
    check_autoscaling,
    check_bucket,
    check_hyperpod,
    check_prerequisites,
    check_repairers,
    check_stack,
    check_webhook,
)
from hyperguard.cluster.prerequisites import summarize
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.policies.repairers import Repairers, owners

CLUSTER = {
    "ClusterName": "ml",
    "ClusterStatus": "InService",
    "Orchestrator": {"Eks": {"ClusterArn": "arn:aws:eks:us-east-1:123456789012:cluster/eks"}},
    "NodeProvisioningMode": "Continuous",
}


def test_a_ready_hyperpod_cluster_on_the_stacks_eks_cluster_passes() -> None:
    assert [c.status for c in check_hyperpod(CLUSTER, "eks")] == ["pass"] * 4
    creating = check_hyperpod(CLUSTER | {"ClusterStatus": "Creating"}, "other")
    assert [(c.name, c.status) for c in creating] == [
        ("hyperpod-cluster", "fail"),
        ("orchestrator", "fail"),
        ("node-provisioning", "pass"),
        ("managed-autoscaling", "pass"),
    ]
    assert "EksClusterName" in creating[1].fix
    on_demand = check_hyperpod(
        {k: v for k, v in CLUSTER.items() if k != "NodeProvisioningMode"}, "eks"
    )
    assert on_demand[2].status == "warn" and "Continuous" in on_demand[2].fix


def test_every_function_needs_its_access_entry() -> None:
    every = {f"arn:aws:iam::1:role/{g}": [g] for g in FUNCTION_GROUPS}
    assert check_access_entries(every, "true").status == "pass"
    without = {k: v for k, v in every.items() if "inventory" not in k}
    missing = check_access_entries(without, "false")
    assert missing.status == "fail" and "hyperguard-inventory" in missing.found
    assert "CreateEksAccessEntries=true" in missing.fix


def test_who_repairs_what_is_checked_from_the_services_answer() -> None:
    assert check_repairers({"seen": {}, "owners": []})[0].status == "warn"  # no sync yet
    seen = Repairers.model_validate(
        {"observedAt": "2026-11-26T09:00:00+00:00", "hyperpodNodeRecovery": "Automatic",
         "unread": {"karpenter": "403 Forbidden"}}
    )  # fmt: skip
    own = NodeRepairConfig.model_validate({"hyperpodNodeRecovery": "own"})
    answer = {
        "seen": seen.model_dump(mode="json", by_alias=True),
        "owners": [o.model_dump(mode="json", by_alias=True) for o in owners(seen, own)],
    }
    checks = {c.name: c for c in check_repairers(answer)}
    assert checks["repairers:karpenter"].status == "fail"
    assert "hyperguard-rbac.yaml" in checks["repairers:karpenter"].fix
    assert checks["repairers:hyperpod"].status == "warn"  # HyperGuard owns, HyperPod acts too
    assert checks["repairers:nth"].status == "pass"
    deferring = [o.model_dump(mode="json", by_alias=True) for o in owners(seen, NodeRepairConfig())]
    checks = {c.name: c for c in check_repairers(answer | {"owners": deferring})}
    assert checks["repairers:hyperpod"].status == "pass"


def test_the_stack_bucket_admins_and_webhook() -> None:
    assert check_stack({"StackName": "hg", "StackStatus": "UPDATE_COMPLETE"}).status == "pass"
    assert check_stack({"StackName": "hg", "StackStatus": "ROLLBACK_COMPLETE"}).status == "fail"
    assert check_bucket("b", None).status == "pass"
    assert check_bucket("b", "Not Found").status == "fail"
    assert check_admins("arn:aws:iam::1:role/a, arn:aws:iam::1:role/b").found.startswith("2 ")
    assert check_admins(" ").status == "fail"
    assert check_webhook("https://hooks.example.com/x").found.endswith("hooks.example.com")
    assert check_webhook("").status == "warn"


def nodepool(
    name: str, node_class: tuple[str, str, str], limits: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Karpenter v1 NodePool naming `node_class` (group, kind, name), with `limits`."""
    group, kind, class_name = node_class
    ref = {"group": group, "kind": kind, "name": class_name}
    spec: dict[str, Any] = {"template": {"spec": {"nodeClassRef": ref}}}
    if limits is not None:
        spec["limits"] = limits
    return {"metadata": {"name": name}, "spec": spec}


def test_kueue_the_training_operator_and_the_nodepools_from_the_api_servers_answer() -> None:
    """GET /cluster/prerequisites, as `summarize` builds it from what the API server serves."""
    gpu_pool = nodepool(
        "gpu", ("karpenter.k8s.aws", "EC2NodeClass", "gpu"), {"nvidia.com/gpu": "64"}
    )
    unbounded = nodepool("open", ("eks.amazonaws.com", "NodeClass", "default"))
    dangling = nodepool("lost", ("karpenter.k8s.aws", "EC2NodeClass", "gone"), {"cpu": "1000"})
    ready = {
        "metadata": {"name": "gpu"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    answer = summarize(["v1beta2"], ["v1"], [gpu_pool, unbounded, dangling], [ready])
    assert answer.node_pools[1].node_class_found is None  # EKS Auto Mode's: not checked
    checks = {c.name: c for c in check_prerequisites(answer.model_dump())}
    assert checks["kueue"].status == checks["training-operator"].status == "pass"
    assert (
        checks["nodepool:gpu"].status == "pass"
        and "nvidia.com/gpu 64" in checks["nodepool:gpu"].found
    )
    assert (
        checks["nodepool:open"].status == "warn"
        and "without bound" in checks["nodepool:open"].found
    )
    assert checks["nodepool:lost"].status == "fail" and "gone" in checks["nodepool:lost"].found

    # A Kueue older than v1beta2, no training operator, no NodePool.
    bare = summarize(["v1beta1"], None, [], None).model_dump()
    checks = {c.name: c for c in check_prerequisites(bare)}
    assert checks["kueue"].status == "fail" and "not v1beta2" in checks["kueue"].found
    assert checks["training-operator"].status == "fail"
    assert "training-operator" in checks["training-operator"].fix
    assert checks["nodepools"].status == "warn"
    missing = {
        c.name: c for c in check_prerequisites(summarize(None, ["v1"], [], None).model_dump())
    }
    assert missing["kueue"].status == "fail" and "not installed" in missing["kueue"].found


def test_hyperpods_managed_autoscaling_beside_bursts_is_named() -> None:
    """DescribeCluster's AutoScaling (botocore: Mode Enable|Disable, AutoScalerType
    Karpenter, Status InService|Failed|Creating|Deleting, FailureMessage)."""
    off = {c.name: c for c in check_hyperpod(CLUSTER, "eks")}["managed-autoscaling"]
    assert off.status == "pass"
    on = check_autoscaling({"Mode": "Enable", "AutoScalerType": "Karpenter", "Status": "InService"})
    assert on.status == "warn" and "hyperpodGroups" in on.fix
    failed = check_autoscaling(
        {
            "Mode": "Enable",
            "AutoScalerType": "Karpenter",
            "Status": "Failed",
            "FailureMessage": "no role",
        }
    )
    assert failed.status == "fail" and "no role" in failed.found
