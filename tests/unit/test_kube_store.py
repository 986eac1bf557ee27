"""The twin's Kubernetes object store, without HTTP: the API semantics the service relies on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from hyperguard.twin.clock import ManualClock
from hyperguard.twin.kube.schema import admit
from hyperguard.twin.kube.store import (
    EVENTS,
    JOBS,
    NAMESPACES,
    NODECLAIMS,
    NODES,
    PDBS,
    PODS,
    KubeError,
    ObjectStore,
    resource_for,
)

NS = "hyperpod-ns-ml"


def pod(name: str, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}, **extra},
        "spec": {"nodeName": "node-a", "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


def names(objects: list[dict[str, Any]]) -> list[str]:
    return [obj["metadata"]["name"] for obj in objects]


@contextmanager
def raises(code: int, reason: str) -> Iterator[None]:
    with pytest.raises(KubeError) as caught:
        yield
    assert (caught.value.code, caught.value.reason) == (code, reason), caught.value.message


@pytest.fixture
def store() -> ObjectStore:
    store = ObjectStore()
    for namespace in (NS, "other"):
        store.create(NAMESPACES, {"metadata": {"name": namespace}})
    return store


def test_registry_lookup() -> None:
    assert resource_for("batch", "v1", "jobs") is JOBS
    assert resource_for("", "v1", "nodes").api_version == "v1"
    assert JOBS.api_version == "batch/v1"
    with raises(404, "NotFound"):
        resource_for("batch", "v2", "jobs")


def test_create_assigns_server_metadata(store: ObjectStore) -> None:
    created = store.create(PODS, pod("web"), NS)
    meta = created["metadata"]
    assert (created["apiVersion"], created["kind"]) == ("v1", "Pod")
    assert meta["namespace"] == NS and meta["generation"] == 1 and meta["uid"]
    assert meta["creationTimestamp"].endswith("Z")
    assert meta["resourceVersion"] == store.current_resource_version
    second = store.create(PODS, {"metadata": {"generateName": "web-"}, "spec": {}}, NS)
    assert second["metadata"]["name"].startswith("web-") and len(second["metadata"]["name"]) == 9
    assert int(second["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    with raises(409, "AlreadyExists"):
        store.create(PODS, pod("web"), NS)
    with raises(422, "Invalid"):
        store.create(NODES, {"metadata": {"name": "Not_A_Name"}})


def test_reads_are_copies(store: ObjectStore) -> None:
    created = store.create(NODES, {"metadata": {"name": "n1", "labels": {"a": "1"}}})
    created["metadata"]["labels"]["a"] = "changed"
    store.get(NODES, "n1")["metadata"]["labels"]["a"] = "changed"
    store.list(NODES)[0]["metadata"]["labels"]["a"] = "changed"
    assert store.get(NODES, "n1")["metadata"]["labels"] == {"a": "1"}
    assert store.find(NODES, "absent") is None
    with raises(404, "NotFound"):
        store.get(NODES, "absent")


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=gpu", ["a", "b"]),
        ("tier==gpu", ["a", "b"]),
        ("tier!=gpu", ["c", "d"]),
        ("team", ["a", "c"]),
        ("!team", ["b", "d"]),
        ("tier in (gpu, cpu)", ["a", "b", "c"]),
        ("tier notin (gpu)", ["c", "d"]),
        ("tier=gpu,team", ["a"]),
        ("tier in (gpu,cpu),!team", ["b"]),
    ],
)
def test_label_selectors(store: ObjectStore, selector: str, expected: list[str]) -> None:
    for name, labels in {
        "a": {"tier": "gpu", "team": "ml"},
        "b": {"tier": "gpu"},
        "c": {"tier": "cpu", "team": "ml"},
        "d": {},
    }.items():
        store.create(NODES, {"metadata": {"name": name, "labels": labels}})
    assert names(store.list(NODES, label_selector=selector)) == expected


def test_bad_label_selector_is_400(store: ObjectStore) -> None:
    with raises(400, "BadRequest"):
        store.list(NODES, label_selector="a in b")


def test_field_selectors(store: ObjectStore) -> None:
    store.create(PODS, pod("p1"), NS)
    on_b = pod("p2")
    on_b["spec"]["nodeName"] = "node-b"
    store.create(PODS, on_b, "other")
    store.create(PODS, {**pod("p3"), "status": {"phase": "Succeeded"}}, NS)
    assert names(store.list(PODS, field_selector="spec.nodeName=node-a")) == ["p1", "p3"]
    assert names(store.list(PODS, field_selector="spec.nodeName!=node-a")) == ["p2"]
    assert names(store.list(PODS, NS, field_selector="status.phase==Running")) == ["p1"]
    assert names(store.list(PODS, field_selector="metadata.namespace=other")) == ["p2"]
    assert names(store.list(PODS, field_selector="metadata.name=p3,spec.nodeName=node-a")) == ["p3"]
    with raises(400, "BadRequest"):
        store.list(PODS, field_selector="spec.hostname=x")


def test_merge_patch_semantics(store: ObjectStore) -> None:
    store.create(
        NODES,
        {
            "metadata": {"name": "n1", "labels": {"keep": "1", "drop": "2"}},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}], "podCIDR": "10.0.0.0/24"},
        },
    )
    patched = store.patch(
        NODES,
        "n1",
        {
            "metadata": {"labels": {"drop": None, "new": "3"}, "uid": "forged"},
            "spec": {"taints": [{"key": "b", "effect": "NoExecute"}], "unschedulable": True},
        },
    )
    assert patched["metadata"]["labels"] == {"keep": "1", "new": "3"}
    assert patched["metadata"]["uid"] != "forged"
    # Lists are replaced, not merged; untouched keys stay.
    assert patched["spec"] == {
        "taints": [{"key": "b", "effect": "NoExecute"}],
        "podCIDR": "10.0.0.0/24",
        "unschedulable": True,
    }
    strategic = store.patch(NODES, "n1", {"spec": {"taints": []}}, patch_type="strategic")
    assert strategic["spec"]["taints"] == []
    with raises(415, "UnsupportedMediaType"):
        store.patch(NODES, "n1", [{"op": "remove", "path": "/spec"}], patch_type="json")


def test_resource_version_precondition(store: ObjectStore) -> None:
    rv = store.create(NODES, {"metadata": {"name": "n1"}})["metadata"]["resourceVersion"]
    moved = store.patch(NODES, "n1", {"metadata": {"labels": {"a": "1"}, "resourceVersion": rv}})
    assert int(moved["metadata"]["resourceVersion"]) > int(rv)
    with raises(409, "Conflict"):
        store.patch(NODES, "n1", {"metadata": {"labels": {"a": "2"}, "resourceVersion": rv}})
    with raises(409, "Conflict"):
        store.replace(NODES, "n1", {"metadata": {"name": "n1", "resourceVersion": rv}})
    assert store.get(NODES, "n1")["metadata"]["labels"] == {"a": "1"}
    unconditional = store.replace(NODES, "n1", {"metadata": {"name": "n1"}, "spec": {}})
    assert "labels" not in unconditional["metadata"]


def test_no_op_write_keeps_resource_version(store: ObjectStore) -> None:
    rv = store.create(NODES, {"metadata": {"name": "n1", "labels": {"a": "1"}}})["metadata"][
        "resourceVersion"
    ]
    assert (
        store.patch(NODES, "n1", {"metadata": {"labels": {"a": "1"}}})["metadata"][
            "resourceVersion"
        ]
        == rv
    )


def test_status_subresource(store: ObjectStore) -> None:
    store.create(NODES, {"metadata": {"name": "n1"}, "spec": {}, "status": {"phase": "Ready"}})
    main = store.patch(NODES, "n1", {"spec": {"unschedulable": True}, "status": {"phase": "X"}})
    assert main["status"] == {"phase": "Ready"} and main["spec"] == {"unschedulable": True}
    status = store.patch(
        NODES,
        "n1",
        {"metadata": {"labels": {"a": "1"}}, "spec": {"unschedulable": False}, "status": {"p": 1}},
        subresource="status",
    )
    assert status["status"] == {"phase": "Ready", "p": 1}
    assert status["spec"] == {"unschedulable": True} and "labels" not in status["metadata"]
    replaced = store.replace(
        NODES, "n1", {"metadata": {"name": "n1"}, "status": {"only": "this"}}, subresource="status"
    )
    assert replaced["status"] == {"only": "this"} and replaced["spec"] == {"unschedulable": True}
    # Without a status subresource, status is an ordinary field.
    store.create(EVENTS, {"metadata": {"name": "e1"}, "status": "old"}, NS)
    assert store.patch(EVENTS, "e1", {"status": "new"}, NS)["status"] == "new"
    with raises(404, "NotFound"):
        store.patch(EVENTS, "e1", {"status": "x"}, NS, subresource="status")


def test_generation_counts_spec_changes_only(store: ObjectStore) -> None:
    store.create(JOBS, {"metadata": {"name": "j"}, "spec": {"suspend": True}}, NS)
    assert (
        store.patch(JOBS, "j", {"metadata": {"labels": {"a": "b"}}}, NS)["metadata"]["generation"]
        == 1
    )
    status = store.patch(JOBS, "j", {"status": {"active": 1}}, NS, subresource="status")
    assert status["metadata"]["generation"] == 1
    assert store.patch(JOBS, "j", {"spec": {"suspend": False}}, NS)["metadata"]["generation"] == 2


def test_finalizers_hold_deletion(store: ObjectStore) -> None:
    store.create(
        NODECLAIMS, {"metadata": {"name": "claim", "finalizers": ["karpenter.sh/termination"]}}
    )
    marked = store.delete(NODECLAIMS, "claim", grace_period_s=30)
    assert marked["metadata"]["deletionTimestamp"].endswith("Z")
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    kept = store.get(NODECLAIMS, "claim")
    assert kept["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]
    # A second delete changes nothing; a patch cannot clear the timestamp.
    assert store.delete(NODECLAIMS, "claim") == kept
    store.patch(NODECLAIMS, "claim", {"metadata": {"deletionTimestamp": None, "labels": {"a": ""}}})
    assert store.get(NODECLAIMS, "claim")["metadata"]["deletionTimestamp"]
    store.patch(NODECLAIMS, "claim", {"metadata": {"finalizers": None}})
    assert store.find(NODECLAIMS, "claim") is None


def _owned_pod(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    ref = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    return pod(name, ownerReferences=[ref])


@pytest.mark.parametrize(
    ("propagation", "pods_left"),
    [("Background", []), ("Foreground", []), ("Orphan", ["j-0", "j-1"]), (None, ["j-0", "j-1"])],
)
def test_owner_reference_cascade(
    store: ObjectStore, propagation: str | None, pods_left: list[str]
) -> None:
    job = store.create(JOBS, {"metadata": {"name": "j"}, "spec": {}}, NS)
    for name in ("j-0", "j-1"):
        store.create(PODS, _owned_pod(name, job), NS)
    store.create(PODS, pod("unrelated"), NS)
    store.delete(JOBS, "j", NS, propagation=propagation)
    assert store.find(JOBS, "j", NS) is None
    assert names(store.list(PODS, NS)) == sorted([*pods_left, "unrelated"])
    for left in store.list(PODS, NS):
        assert "ownerReferences" not in left["metadata"]


def test_cascade_waits_for_the_owner_finalizers(store: ObjectStore) -> None:
    owner = store.create(
        NODECLAIMS, {"metadata": {"name": "claim", "finalizers": ["karpenter.sh/termination"]}}
    )
    store.create(PODS, _owned_pod("dependent", owner), NS)
    store.delete(NODECLAIMS, "claim")
    assert store.find(PODS, "dependent", NS) is not None
    store.patch(NODECLAIMS, "claim", {"metadata": {"finalizers": []}})
    assert store.find(PODS, "dependent", NS) is None


def test_unknown_propagation_is_invalid(store: ObjectStore) -> None:
    store.create(NODES, {"metadata": {"name": "n1"}})
    with raises(422, "Invalid"):
        store.delete(NODES, "n1", propagation="Sideways")
    assert store.find(NODES, "n1") is not None


def _budget(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "pdb"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }


@pytest.mark.parametrize(
    ("spec", "pods", "evictable"),
    [
        ({"minAvailable": 1}, 1, False),
        ({"minAvailable": 1}, 2, True),
        ({"minAvailable": "50%"}, 2, True),
        ({"minAvailable": "100%"}, 2, False),
        ({"maxUnavailable": 1}, 2, True),
        ({"maxUnavailable": 1}, 1, True),
        ({"maxUnavailable": 0}, 2, False),
    ],
)
def test_eviction_respects_disruption_budgets(
    store: ObjectStore, spec: dict[str, Any], pods: int, evictable: bool
) -> None:
    store.create(PDBS, _budget(**spec), NS)
    store.create(PODS, pod("web-0", {"app": "web"}), NS)
    if pods == 2:
        store.create(PODS, pod("web-1", {"app": "web"}), NS)
    if evictable:
        store.evict(NS, "web-0")
        assert store.find(PODS, "web-0", NS) is None
    else:
        with raises(429, "TooManyRequests"):
            store.evict(NS, "web-0")
        assert store.find(PODS, "web-0", NS) is not None


def test_eviction_counts_unhealthy_pods_as_expected(store: ObjectStore) -> None:
    store.create(PDBS, _budget(maxUnavailable=1), NS)
    store.create(PODS, pod("web-0", {"app": "web"}), NS)
    store.create(PODS, {**pod("web-1", {"app": "web"}), "status": {"phase": "Unknown"}}, NS)
    with raises(429, "TooManyRequests"):
        store.evict(NS, "web-0")


def test_eviction_without_budget_or_of_pending_pod(store: ObjectStore) -> None:
    store.create(PDBS, _budget(minAvailable="100%"), NS)
    store.create(PODS, {**pod("web-0", {"app": "web"}), "status": {"phase": "Pending"}}, NS)
    store.create(PODS, pod("batch", {"app": "batch"}), NS)
    store.evict(NS, "web-0")
    store.evict(NS, "batch")
    assert store.list(PODS, NS) == []
    with raises(404, "NotFound"):
        store.evict(NS, "batch")


def test_eviction_matches_expressions(store: ObjectStore) -> None:
    selector = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}
    store.create(
        PDBS, {"metadata": {"name": "pdb"}, "spec": {"selector": selector, "minAvailable": 1}}, NS
    )
    store.create(PODS, pod("web-0", {"app": "web"}), NS)
    with raises(429, "TooManyRequests"):
        store.evict(NS, "web-0")


def test_listeners_see_committed_changes(store: ObjectStore) -> None:
    seen: list[tuple[str, str, str | None, str | None]] = []

    def listener(event: str, rt: Any, obj: dict[str, Any], old: Any, user: str | None) -> None:
        seen.append((event, obj["metadata"]["name"], old and old["metadata"]["name"], user))
        obj["metadata"]["name"] = "mutated by listener"

    def failing(*_: Any) -> None:
        raise RuntimeError("listener bug")

    store.add_listener(failing)
    store.add_listener(listener)
    store.create(NODES, {"metadata": {"name": "n1"}})
    store.patch(NODES, "n1", {"spec": {"unschedulable": True}})
    store.delete(NODES, "n1")
    assert seen == [
        ("ADDED", "n1", None, None),
        ("MODIFIED", "n1", "n1", None),
        ("DELETED", "n1", "n1", None),
    ]
    assert store.find(NODES, "n1") is None


def test_listener_may_write_back(store: ObjectStore) -> None:
    def kubelet(event: str, rt: Any, obj: dict[str, Any], old: Any, user: str | None) -> None:
        if event == "ADDED" and rt is PODS:
            store.patch(
                PODS,
                obj["metadata"]["name"],
                {"status": {"phase": "Running"}},
                obj["metadata"]["namespace"],
                subresource="status",
            )

    store.add_listener(kubelet)
    store.create(PODS, {**pod("p"), "status": {}}, NS)
    assert store.get(PODS, "p", NS)["status"] == {"phase": "Running"}


def test_eviction_refuses_a_pod_two_budgets_select(store: ObjectStore) -> None:
    store.create(PDBS, _budget(maxUnavailable=5), NS)
    store.create(PDBS, {**_budget(maxUnavailable=5), "metadata": {"name": "pdb-2"}}, NS)
    store.create(PODS, pod("web-0", {"app": "web"}), NS)
    with raises(500, "InternalError"):
        store.evict(NS, "web-0")


def test_timestamps_come_from_the_clock() -> None:
    clock = ManualClock(datetime(2025, 3, 1, 12, 0, tzinfo=UTC))
    store = ObjectStore(clock=clock)
    created = store.create(
        NODECLAIMS, {"metadata": {"name": "claim", "finalizers": ["karpenter.sh/termination"]}}
    )
    clock.advance(90)
    marked = store.delete(NODECLAIMS, "claim")
    assert created["metadata"]["creationTimestamp"] == "2025-03-01T12:00:00Z"
    assert marked["metadata"]["deletionTimestamp"] == "2025-03-01T12:01:30Z"


def test_the_system_namespaces_exist_from_the_start() -> None:
    found = ObjectStore().list(NAMESPACES)
    assert names(found) == ["default", "kube-node-lease", "kube-public", "kube-system"]
    assert all(n["status"]["phase"] == "Active" for n in found)


def test_nothing_is_created_in_a_namespace_that_does_not_exist(store: ObjectStore) -> None:
    with pytest.raises(KubeError) as caught:
        store.create(PODS, pod("p1"), "absent")
    error = caught.value
    assert (error.code, error.reason, error.message) == (
        404,
        "NotFound",
        'namespaces "absent" not found',
    )
    assert error.details == {"name": "absent", "kind": "namespaces"}
    assert store.list(PODS) == []


def test_a_namespace_is_labelled_with_its_name(store: ObjectStore) -> None:
    created = store.create(NAMESPACES, {"metadata": {"name": "team", "labels": {"a": "b"}}})
    labels = created["metadata"]["labels"]
    assert labels == {"a": "b", "kubernetes.io/metadata.name": "team"}


def test_deleting_a_namespace_deletes_what_is_in_it(store: ObjectStore) -> None:
    store.create(PODS, pod("p1"), NS)
    store.create(PODS, pod("p2"), "other")
    store.delete(NAMESPACES, NS)
    assert names(store.list(PODS)) == ["p2"]
    with raises(404, "NotFound"):
        store.create(PODS, pod("p3"), NS)


def test_an_event_must_name_its_object_and_a_known_type() -> None:
    """kube-apiserver's ValidateEvent: an Event names the object it is about (kind, name);
    a legacy event's type is Normal or Warning."""
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "node-a.1", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
        "reason": "HyperGuardCordoned",
        "type": "Warning",
    }
    assert admit(EVENTS, event)["involvedObject"]["name"] == "node-a"
    for broken in (
        {k: v for k, v in event.items() if k != "involvedObject"},
        {**event, "involvedObject": {"kind": "Node"}},
        {**event, "type": "Critical"},
    ):
        with pytest.raises(KubeError) as caught:
            admit(EVENTS, broken)
        assert caught.value.code == 422
    with pytest.raises(KubeError) as caught:
        admit(EVENTS, {**event, "severity": "high"}, strict=True)
    assert caught.value.code == 400
