"""The twin's kube-scheduler filters: each rule refuses what a lenient binder would bind."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from hyperguard.twin.kube.scheduling import (
    AFFINITY_MISMATCH,
    UNSCHEDULABLE,
    bound_by_node,
    choose_node,
    fits,
    pod_requests,
    quantity,
    unschedulable_message,
)

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def node(name: str = "n1", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"node.kubernetes.io/instance-type": "p5.48xlarge", "zone": "a"},
        },
        "spec": spec,
        "status": {
            "allocatable": {
                "cpu": "191450m",
                "memory": "2063937Mi",
                "nvidia.com/gpu": "8",
                "pods": "110",
            }
        },
    }


def pod(gpus: int = 8, **spec: Any) -> dict[str, Any]:
    resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    return {"containers": [{"name": "main", "image": "x", "resources": resources}], **spec}


def bound(gpus: int, phase: str = "Running") -> dict[str, Any]:
    return {"spec": pod(gpus), "status": {"phase": phase}}


def test_a_pod_that_asks_for_what_the_node_has_fits() -> None:
    assert fits(pod(), node(), []) == []


def test_node_selector_must_match_the_nodes_labels() -> None:
    wrong = pod(nodeSelector={"node.kubernetes.io/instance-type": "ml.p5.48xlarge"})
    assert fits(wrong, node(), []) == [AFFINITY_MISMATCH]


@pytest.mark.parametrize(
    ("expression", "ok"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "In", "values": ["b"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "missing", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, False),
        ({"key": "missing", "operator": "Exists"}, False),
    ],
)
def test_required_node_affinity_match_expressions(expression: dict[str, Any], ok: bool) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    }
    assert fits(pod(affinity=affinity), node(), []) == ([] if ok else [AFFINITY_MISMATCH])


def test_gt_and_lt_compare_integers() -> None:
    n = node()
    n["metadata"]["labels"]["karpenter.k8s.aws/instance-generation"] = "5"

    def term(operator: str, value: str) -> dict[str, Any]:
        expression = {"key": "karpenter.k8s.aws/instance-generation", "operator": operator}
        return {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{**expression, "values": [value]}]}]
                }
            }
        }

    assert fits(pod(affinity=term("Gt", "4")), n, []) == []
    assert fits(pod(affinity=term("Gt", "5")), n, []) == [AFFINITY_MISMATCH]
    assert fits(pod(affinity=term("Lt", "6")), n, []) == []


def test_match_fields_pin_a_pod_to_named_nodes_and_terms_are_ored() -> None:
    pinned = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
                ]
            }
        }
    }
    assert fits(pod(affinity=pinned), node("n1"), []) == [AFFINITY_MISMATCH]
    assert fits(pod(affinity=pinned), node("n2"), []) == []


def test_an_untolerated_no_schedule_taint_refuses_the_pod() -> None:
    tainted = node(taints=[GPU_TAINT])
    assert fits(pod(), tainted, []) == ["node(s) had untolerated taint {nvidia.com/gpu: true}"]
    equal = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    assert fits(pod(tolerations=[equal]), tainted, []) == []
    exists = {"key": "nvidia.com/gpu", "operator": "Exists"}
    assert fits(pod(tolerations=[exists]), tainted, []) == []
    other_value = {**equal, "value": "false"}
    assert fits(pod(tolerations=[other_value]), tainted, []) != []
    other_effect = {**equal, "effect": "NoExecute"}
    assert fits(pod(tolerations=[other_effect]), tainted, []) != []


def test_no_execute_taints_refuse_and_prefer_no_schedule_does_not() -> None:
    assert fits(pod(), node(taints=[{"key": "k", "effect": "NoExecute"}]), []) == [
        "node(s) had untolerated taint {k: }"
    ]
    assert fits(pod(), node(taints=[{"key": "k", "effect": "PreferNoSchedule"}]), []) == []


def test_an_unschedulable_node_takes_only_pods_tolerating_it() -> None:
    cordoned = node(unschedulable=True)
    assert fits(pod(), cordoned, []) == [UNSCHEDULABLE]
    toleration = {
        "key": "node.kubernetes.io/unschedulable",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    assert fits(pod(tolerations=[toleration]), cordoned, []) == []


def test_requests_must_fit_allocatable_less_the_pods_bound_there() -> None:
    assert fits(pod(4), node(), [bound(4)]) == []
    assert fits(pod(8), node(), [bound(4)]) == ["Insufficient nvidia.com/gpu"]
    assert fits(pod(8), node(), [bound(8, phase="Succeeded")]) == []  # finished: frees its GPUs


def test_cpu_and_memory_count_as_well_and_a_missing_resource_is_insufficient() -> None:
    big = pod(0)
    big["containers"][0]["resources"] = {
        "requests": {"cpu": "200", "memory": "3000Gi", "vpc.amazonaws.com/efa": "1"}
    }
    assert fits(big, node(), []) == [
        "Insufficient cpu",
        "Insufficient memory",
        "Insufficient vpc.amazonaws.com/efa",
    ]


def test_a_limit_stands_for_a_missing_request_and_init_containers_take_their_maximum() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"limits": {"cpu": "2"}}},
            {"name": "b", "resources": {"requests": {"cpu": "500m"}}},
        ],
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
    }
    assert pod_requests(spec) == {"cpu": Decimal("4")}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1Gi", Decimal(2**30)),
        ("1k", Decimal(1000)),
        ("1e3", Decimal(1000)),
    ],
)
def test_quantities(text: str, value: Decimal) -> None:
    assert quantity(text) == value


def test_the_message_is_kube_schedulers() -> None:
    """FitError.Error(): the reasons' histogram sorted, then the preemption verdicts."""
    message = unschedulable_message(
        {
            "a": [AFFINITY_MISMATCH],
            "b": ["node(s) had untolerated taint {nvidia.com/gpu: true}"],
            "c": ["node(s) had untolerated taint {nvidia.com/gpu: true}"],
            "d": ["Insufficient nvidia.com/gpu"],
            "e": ["Insufficient nvidia.com/gpu"],
            "f": ["Insufficient nvidia.com/gpu"],
        }
    )
    assert message == (
        "0/6 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 node(s) had untolerated taint {nvidia.com/gpu: true}, 3 Insufficient nvidia.com/gpu. "
        "preemption: 0/6 nodes are available: 3 No preemption victims found for incoming pod, "
        "3 Preemption is not helpful for scheduling."
    )
    assert unschedulable_message({}) == "no nodes available to schedule pods"


def test_choose_node_prefers_the_named_node_when_it_fits_and_else_says_why() -> None:
    nodes = [node("n1"), node("n2")]
    full = bound_by_node([{**bound(8), "spec": {**pod(8), "nodeName": "n2"}}])
    assert choose_node(pod(), nodes, {}, prefer="n2") == ("n2", "")
    assert choose_node(pod(), nodes, full, prefer="n2") == ("n1", "")
    both_full = {**full, "n1": full["n2"]}
    name, why = choose_node(pod(), nodes, both_full, prefer=None)
    assert name is None
    assert why.startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
