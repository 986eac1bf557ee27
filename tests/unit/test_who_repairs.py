"""Who repairs a fault (D142, D148): the pure decision, the feature-gate reading, and the
"who repairs what" rows. Exactly one system acts on a fault; HyperGuard defers only to a
repairer the inventory saw on, that acts on that fault, where the policy says `defer`."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hyperguard.models import Node
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.policies.repairers import Repairers, feature_gate, karpenter_gates, owners
from hyperguard.recovery.repairers import holds_karpenter_off, repairer

SETTINGS = (
    "hyperpod_node_recovery",
    "karpenter_node_repair",
    "eks_node_auto_repair",
    "node_termination_handler",
)
GPU = {"condition_type": "AcceleratedHardwareReady", "status": "False"}


def hyperpod_node(**labels: str) -> Node:
    return Node(
        instance_id="i-0123456789abcdef0",
        cluster="ml",
        pool="workers",
        platform="hyperpod",
        instance_type="ml.p5.48xlarge",
        labels=labels,
    )


def karpenter_node(**labels: str) -> Node:
    return Node(
        instance_id="i-0fedcba9876543210",
        cluster="eks",
        pool="gpu",
        platform="eks",
        instance_type="p5.48xlarge",
        labels={"karpenter.sh/nodepool": "gpu", **labels},
    )


def policy(setting: str = "defer") -> NodeRepairConfig:
    return NodeRepairConfig.model_validate({name: setting for name in SETTINGS})


ALL_ON = Repairers(
    hyperpod_node_recovery="Automatic",
    karpenter="kube-system/karpenter",
    karpenter_node_repair=True,
    eks_auto_mode=True,
    eks_node_groups={"system": True},
    node_termination_handler="DaemonSet kube-system/aws-node-termination-handler",
)


def test_hyperpod_repairs_what_its_own_checks_found_where_its_recovery_is_automatic() -> None:
    node = hyperpod_node()
    assert repairer("hyperpod_node_health", {}, node, ALL_ON, policy()) == "hyperpod"
    assert repairer("hyperpod_node_health", {}, node, ALL_ON, policy("own")) == "hyperguard"
    off = ALL_ON.model_copy(update={"hyperpod_node_recovery": "None"})
    assert repairer("hyperpod_node_health", {}, node, off, policy()) == "hyperguard"
    # A fault HyperPod's checks did not find (an AWS Health retirement): HyperGuard's.
    assert repairer("aws_health", {}, node, ALL_ON, policy()) == "hyperguard"
    # ... unless HyperPod's label says its recovery takes the node.
    pending = hyperpod_node(
        **{"sagemaker.amazonaws.com/node-health-status": "UnschedulablePendingReboot"}
    )
    assert repairer("node_condition", GPU, pending, ALL_ON, policy()) == "hyperpod"


def test_karpenter_repairs_its_nodes_conditions_only_with_node_repair_on() -> None:
    node = karpenter_node()
    assert repairer("node_condition", GPU, node, ALL_ON, policy()) == "karpenter"
    off = ALL_ON.model_copy(update={"karpenter_node_repair": False})
    assert repairer("node_condition", GPU, node, off, policy()) == "hyperguard"
    assert not holds_karpenter_off(node, off)
    # A condition Karpenter's repair policies do not name (node-problem-detector's).
    custom = {"condition_type": "KernelDeadlock", "status": "True"}
    assert repairer("node_condition", custom, node, ALL_ON, policy()) == "hyperguard"


def test_owning_a_karpenter_node_holds_karpenters_repair_off() -> None:
    node = karpenter_node()
    assert repairer("node_condition", GPU, node, ALL_ON, policy("own")) == "hyperguard"
    assert holds_karpenter_off(node, ALL_ON)
    assert not holds_karpenter_off(hyperpod_node(), ALL_ON)


def test_eks_auto_repair_takes_auto_mode_and_managed_group_nodes() -> None:
    auto = karpenter_node(**{"eks.amazonaws.com/compute-type": "auto"})
    assert repairer("node_condition", GPU, auto, ALL_ON, policy()) == "eks"
    assert not holds_karpenter_off(auto, ALL_ON)  # Auto Mode's Karpenter is AWS's
    grouped = karpenter_node(**{"eks.amazonaws.com/nodegroup": "system"})
    assert repairer("node_condition", GPU, grouped, ALL_ON, policy()) == "eks"
    other_group = karpenter_node(**{"eks.amazonaws.com/nodegroup": "batch"})
    assert repairer("node_condition", GPU, other_group, ALL_ON, policy()) == "karpenter"


def test_the_termination_handler_drains_interruptions_where_it_runs() -> None:
    node = karpenter_node()
    assert repairer("spot_interruption", {}, node, ALL_ON, policy()) == "nth"
    assert repairer("rebalance_recommendation", {}, node, ALL_ON, policy()) == "nth"
    assert repairer("spot_interruption", {}, node, Repairers(), policy()) == "hyperguard"
    assert repairer("spot_interruption", {}, node, ALL_ON, policy("own")) == "hyperguard"


SOURCE_OF = {
    "hyperpod": "hyperpod_node_recovery",
    "karpenter": "karpenter_node_repair",
    "eks": "eks_node_auto_repair",
    "nth": "node_termination_handler",
}
KINDS = st.sampled_from(
    ["hyperpod_node_health", "node_condition", "spot_interruption", "aws_health", "ec2_state"]
)
CONDITIONS = st.sampled_from(
    ["Ready", "AcceleratedHardwareReady", "StorageReady", "KernelDeadlock", "MemoryPressure"]
)
LABELS = st.dictionaries(
    st.sampled_from(
        [
            "karpenter.sh/nodepool",
            "eks.amazonaws.com/compute-type",
            "eks.amazonaws.com/nodegroup",
            "sagemaker.amazonaws.com/node-health-status",
        ]
    ),
    st.sampled_from(["auto", "system", "gpu", "UnschedulablePendingReplacement", "Schedulable"]),
)
SEEN = st.builds(
    Repairers,
    hyperpod_node_recovery=st.sampled_from(["Automatic", "None", None]),
    karpenter_node_repair=st.booleans(),
    eks_auto_mode=st.booleans(),
    eks_node_groups=st.dictionaries(st.sampled_from(["system", "gpu"]), st.booleans()),
    node_termination_handler=st.sampled_from([None, "DaemonSet kube-system/nth"]),
)
SETTINGS_STRATEGY = st.fixed_dictionaries({n: st.sampled_from(["defer", "own"]) for n in SETTINGS})


@given(
    kind=KINDS,
    condition=CONDITIONS,
    platform=st.sampled_from(["hyperpod", "eks"]),
    labels=LABELS,
    seen=SEEN,
    settings=SETTINGS_STRATEGY,
)
def test_hyperguard_defers_only_to_a_repairer_that_is_on_where_the_policy_says_defer(
    kind: str,
    condition: str,
    platform: str,
    labels: dict[str, str],
    seen: Repairers,
    settings: dict[str, Any],
) -> None:
    node = karpenter_node() if platform == "eks" else hyperpod_node()
    node = node.model_copy(update={"labels": {**node.labels, **labels}})
    rules = NodeRepairConfig.model_validate(settings)
    owner = repairer(kind, {"condition_type": condition}, node, seen, rules)
    if owner == "hyperguard":
        return
    assert getattr(rules, SOURCE_OF[owner]) == "defer"
    on = {
        "hyperpod": seen.hyperpod_node_recovery == "Automatic",
        "karpenter": seen.karpenter_node_repair,
        "eks": seen.eks_auto_mode or any(seen.eks_node_groups.values()),
        "nth": seen.node_termination_handler is not None,
    }
    assert on[owner]
    assert (owner == "hyperpod") == (node.platform == "hyperpod")
    # Deferring to Karpenter never also holds it off.
    assert not (owner == "karpenter" and rules.karpenter_node_repair == "own")


@given(seen=SEEN, settings=SETTINGS_STRATEGY)
def test_each_row_says_hyperguard_repairs_unless_the_source_is_on_and_deferred_to(
    seen: Repairers, settings: dict[str, Any]
) -> None:
    rules = NodeRepairConfig.model_validate(settings)
    for row in owners(seen, rules):
        if row.repairs not in ("hyperguard", "nobody") and row.setting != "-":
            assert row.active and row.setting == "defer", row
        if row.both_act:  # only where HyperGuard owns, the other is on and cannot be held off
            assert row.active and row.repairs == "hyperguard" and row.source != "karpenter", row


def test_the_gate_is_read_as_karpenter_reads_it() -> None:
    assert feature_gate("ReservedCapacity=true,NodeRepair=true", "NodeRepair") is True
    assert feature_gate("NodeRepair=false", "NodeRepair") is False
    assert feature_gate("SpotToSpotConsolidation=true", "NodeRepair") is None
    helm = {"env": [{"name": "FEATURE_GATES", "value": "NodeRepair=true"}]}
    assert karpenter_gates(helm) == "NodeRepair=true"
    flagged = {**helm, "args": ["--feature-gates=NodeRepair=false"]}  # the flag wins
    assert feature_gate(karpenter_gates(flagged), "NodeRepair") is False


def test_an_unread_source_is_said_and_left_to_hyperguard() -> None:
    seen = Repairers(unread={"karpenter": "403 Forbidden"})
    row = next(r for r in owners(seen, policy()) if r.source == "karpenter")
    assert row.repairs == "hyperguard" and "403 Forbidden" in row.note
