"""RBAC on the twin is kube-apiserver's: each function reaches the cluster with an EKS token
for its own role, its access entry maps it to its group, and deploy/kubernetes/
hyperguard-rbac.yaml (applied as on a real cluster) decides. These tests are the ones that
break RBAC on purpose; every other e2e module checks that RBAC refused nothing
(tests/e2e/iam.py)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from tests.conftest import ROOT
from tests.e2e.broken_recovery import BrokenRecovery
from tests.e2e.conftest import running_twin

from hyperguard.cluster import kueue
from hyperguard.cluster.workloads import batch_job_manifest, hyperpod_job_manifest, team_namespace
from hyperguard.models import Job
from hyperguard_twin.plane.kube import (
    HYPERPOD_PYTORCH_JOBS,
    JOBS,
    NAMESPACES,
    NODEPOOLS,
    KubeApiError,
    KubeClient,
    resource,
)
from hyperguard_twin.runtime import Twin

RBAC = ROOT / "deploy" / "kubernetes" / "hyperguard-rbac.yaml"
DRY_RUN = {"dryRun": "All"}
ROLEBINDINGS = resource("rbac.authorization.k8s.io/v1", "rolebindings")
POD_TEMPLATES = resource("v1", "podtemplates")


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with running_twin(hyperpod_nodes=10, rbac_refusals_expected=True) as running:
        yield running


def as_function(twin: Twin, logical_id: str) -> KubeClient:
    """The cluster as the function reaches it (`hyperguard twin kubeconfig --as`)."""
    assert twin.plane is not None
    config = yaml.safe_load(twin.kubeconfig_for(logical_id))
    return twin.plane.token_client(config["users"][0]["user"]["token"])


def refused(call: Any) -> KubeApiError:
    with pytest.raises(KubeApiError) as caught:
        call()
    assert caught.value.code == 403, caught.value
    return caught.value


def test_the_scheduler_grants_itself_nothing_outside_team_namespaces(twin: Twin) -> None:
    scheduler = as_function(twin, "SchedulerFunction")
    namespace = team_namespace("rbac-check")
    team = {o["kind"]: o for o in kueue.team_objects("rbac-check")}
    scheduler.create(NAMESPACES, team["Namespace"])
    own = kueue.team_role_binding("scheduler", namespace)
    scheduler.create(ROLEBINDINGS, own, namespace=namespace)  # what it does before a first run

    # The same binding anywhere else, kube-system included: the admission policy refuses it.
    elsewhere = kueue.team_role_binding("scheduler", "kube-system")
    error = refused(lambda: scheduler.create(ROLEBINDINGS, elsewhere, namespace="kube-system"))
    assert "team namespaces" in str(error)
    error = refused(
        lambda: scheduler.create(
            NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "not-a-team"}},
        )
    )
    assert "team namespaces" in str(error)
    # In a team's namespace, but for someone else: refused too.
    stranger = copy.deepcopy(own)
    stranger["metadata"]["name"] = "a-stranger"
    stranger["subjects"] = [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}
    ]
    refused(lambda: scheduler.create(ROLEBINDINGS, stranger, namespace=namespace))
    # A role it may not bind (RBAC's escalation check, before any admission).
    admin = copy.deepcopy(own)
    admin["metadata"]["name"] = "admin-for-me"
    admin["roleRef"]["name"] = "cluster-admin"
    error = refused(lambda: scheduler.create(ROLEBINDINGS, admin, namespace=namespace))
    assert "escalat" in str(error) or "bind" in str(error)
    # Recovery creates no namespaces at all.
    recovery = as_function(twin, "RecoveryFunction")
    refused(
        lambda: recovery.create(
            NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace + "-2"}},
        )
    )


def test_a_verb_removed_from_the_recovery_role_fails_recovery_with_403_until_restored(
    twin: Twin,
) -> None:
    """deploy/kubernetes/ applied without `patch` on nodes: the recovery's cordon is refused
    at run time, the incident goes to an operator; the manifest restored, a re-drive heals."""
    assert twin.plane is not None
    recovery = BrokenRecovery(twin)
    documents = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    role = next(
        d
        for d in documents
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "hyperguard-recovery"
    )
    narrowed = copy.deepcopy(role)
    for rule in narrowed["rules"]:
        if rule["resources"] == ["nodes"]:
            rule["verbs"].remove("patch")
    assert narrowed != role

    before = len(twin.plane.requests())
    twin.kube.apply(narrowed, "kubectl")  # `kubectl apply -f` of the edited file
    try:
        faulty, incident = recovery.fails()
        assert twin.cluster.schedulable(faulty)  # never cordoned
        denied = [r for r in twin.plane.requests()[before:] if not r["authorized"]]
        assert {(r["verb"], r["resource"]) for r in denied} == {("patch", "nodes")}, denied
        assert all("hyperguard-recovery" in r["groups"] and r["code"] == 403 for r in denied)
    finally:
        twin.kube.apply(role, "kubectl")
    recovery.heals(incident)


def test_the_api_sends_run_objects_as_dry_runs_only(twin: Twin) -> None:
    """The API's create in a team's namespace (hyperguard-api-in-team, bound there by the
    scheduler) is what a dry run needs; the admission policy refuses any other create."""
    scheduler = as_function(twin, "SchedulerFunction")
    namespace = team_namespace("dry-run-check")
    team = {o["kind"]: o for o in kueue.team_objects("dry-run-check")}
    scheduler.create(NAMESPACES, team["Namespace"])
    binding = kueue.team_role_binding("api", namespace)
    scheduler.create(ROLEBINDINGS, binding, namespace=namespace)

    api = as_function(twin, "ApiFunction")
    job = Job(
        job_id="dry-run-check-1",
        team="dry-run-check",
        instance_type="ml.p5.48xlarge",
        replicas=2,
        accelerators_per_replica=8,
        image="trainer:1",
        submitted_at=datetime.now(UTC),
    )
    runs = (
        (JOBS, batch_job_manifest(job, [])),
        (HYPERPOD_PYTORCH_JOBS, hyperpod_job_manifest(job, [])),
    )
    for kind, manifest in runs:
        error = refused(lambda kind=kind, manifest=manifest: api.create(kind, manifest, namespace))
        assert "only as a dry run" in str(error), error
        checked = api.request("POST", kind.path(namespace), manifest, params=DRY_RUN)
        assert checked["metadata"]["name"] == manifest["metadata"]["name"]
        assert twin.kube.get(kind, manifest["metadata"]["name"], namespace) is None
    # Elsewhere the API holds no create at all (RBAC, before admission).
    elsewhere = batch_job_manifest(job, [])
    elsewhere["metadata"]["namespace"] = "default"
    error = refused(
        lambda: api.request("POST", JOBS.path("default"), elsewhere, params={"dryRun": "All"})
    )
    assert "cannot create" in str(error), error


def test_functions_create_pod_templates_as_dry_runs_only(twin: Twin) -> None:
    """A job's own pod template is validated as pods by a PodTemplate sent as a dry run
    (D156): the in-team roles allow the create, and hyperguard-pod-templates-dry-run-only
    refuses any that would be stored, whichever HyperGuard function sends it."""
    scheduler = as_function(twin, "SchedulerFunction")
    namespace = team_namespace("pod-template-check")
    team = {o["kind"]: o for o in kueue.team_objects("pod-template-check")}
    scheduler.create(NAMESPACES, team["Namespace"])
    for function in ("scheduler", "recovery", "api"):
        binding = kueue.team_role_binding(function, namespace)
        scheduler.create(ROLEBINDINGS, binding, namespace=namespace)
    template = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "check", "namespace": namespace},
        "template": {"spec": {"containers": [{"name": "pytorch", "image": "llama:1"}]}},
    }
    for logical_id in ("SchedulerFunction", "RecoveryFunction", "ApiFunction"):
        client = as_function(twin, logical_id)
        error = refused(lambda client=client: client.create(POD_TEMPLATES, template, namespace))
        assert "only as a dry run" in str(error), (logical_id, error)
        checked = client.request("POST", POD_TEMPLATES.path(namespace), template, params=DRY_RUN)
        assert checked["metadata"]["name"] == "check", logical_id
    assert twin.kube.get(POD_TEMPLATES, "check", namespace) is None


def test_preflight_reads_what_the_cluster_serves_and_fails_a_nodepool_without_its_class(
    twin: Twin,
) -> None:
    """GET /cluster/prerequisites, read by the API function with its own RBAC: Kueue's
    v1beta2, the training operator's CRD and the twin's NodePools pass; a NodePool whose
    EC2NodeClass does not exist fails, naming it, until it is deleted."""

    def preflight() -> dict[str, dict[str, Any]]:
        env = os.environ | {"HYPERGUARD_ENDPOINT": twin.emulator.endpoint}
        env.pop("AWS_ENDPOINT_URL", None)
        done = subprocess.run(
            [sys.executable, "-m", "hyperguard.cli.main", "preflight", "--json"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert "Traceback" not in done.stderr, done.stderr
        return {c["name"]: c for c in json.loads(done.stdout)}

    checks = preflight()
    assert checks["kueue"]["status"] == "pass" and "v1beta2" in checks["kueue"]["found"]
    assert checks["training-operator"]["status"] == "pass"
    pools = [c for name, c in checks.items() if name.startswith("nodepool:")]
    assert pools and all(c["status"] == "pass" for c in pools), pools

    lost = copy.deepcopy(twin.kube.list_objects(NODEPOOLS)[0])
    lost["metadata"] = {"name": "preflight-lost-class"}
    lost["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "no-such-class"
    twin.kube.create(NODEPOOLS, lost)
    try:
        broken = preflight()["nodepool:preflight-lost-class"]
    finally:
        twin.kube.delete(NODEPOOLS, "preflight-lost-class")
    assert broken["status"] == "fail" and "no-such-class" in broken["found"], broken
