"""A training job's own pod template (docs/examples/pod-template.yaml, as AWS's
HyperPodPyTorchJob example and the FSx for Lustre CSI driver's static provisioning write one),
and the objects a team keeps beside it: a service account (Pod Identity or IRSA credentials)
and an FSx claim bound to its volume."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from tests.conftest import ROOT

from hyperguard.cluster import kueue
from hyperguard.cluster.workloads import team_namespace
from hyperguard_twin.plane.kube import NAMESPACES, KubeApiError, KubeClient, resource

SERVICE_ACCOUNTS = resource("v1", "serviceaccounts")
PERSISTENT_VOLUMES = resource("v1", "persistentvolumes", namespaced=False)
CLAIMS = resource("v1", "persistentvolumeclaims")
TEMPLATE: dict[str, Any] = yaml.safe_load(
    (ROOT / "docs" / "examples" / "pod-template.yaml").read_text()
)
"""docs/examples/pod-template.yaml, the template teams start from, run as written."""
SERVICE_ACCOUNT = str(TEMPLATE["spec"]["serviceAccountName"])
CLAIM = str(TEMPLATE["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"])


def prepare_team(kube: KubeClient, team: str) -> None:
    """The team's namespace (as the scheduler creates it, if no run made it yet), its
    training service account, and an FSx for Lustre claim bound to a static volume."""
    namespace = team_namespace(team)
    try:
        kube.create(NAMESPACES, kueue.team_objects(team)[0])
    except KubeApiError as error:
        # A pass ensures a team's namespace once the team has a quota (D98): one did between
        # a check and this create in a full run.
        if error.code != 409:
            raise
    kube.create(
        SERVICE_ACCOUNTS,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT}},
        namespace,
    )
    volume = f"fsx-{team}"
    kube.create(
        PERSISTENT_VOLUMES,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1200Gi"},
                "volumeMode": "Filesystem",
                "accessModes": ["ReadWriteMany"],
                "mountOptions": ["flock"],
                "persistentVolumeReclaimPolicy": "Retain",
                "csi": {
                    "driver": "fsx.csi.aws.com",
                    "volumeHandle": "fs-0123456789abcdef0",
                    "volumeAttributes": {
                        "dnsname": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
                        "mountname": "abcdefgh",
                    },
                },
            },
        },
    )
    kube.create(
        CLAIMS,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1200Gi"}},
            },
        },
        namespace,
    )


def assert_carries_the_template(pod_spec: dict[str, Any], job_id: str) -> None:
    """A pod spec on the API server (a run's template or a pod) has every field of TEMPLATE,
    as given, and HyperGuard's additions beside them."""
    given = copy.deepcopy(TEMPLATE["spec"])
    assert pod_spec["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod_spec["volumes"][0] == given["volumes"][0]
    shm = pod_spec["volumes"][1]
    assert (shm["name"], shm["emptyDir"]["medium"]) == ("shm", "Memory")
    assert shm["emptyDir"]["sizeLimit"] == "64Gi"
    container = pod_spec["containers"][0]
    mine = given["containers"][0]
    for key in ("name", "image", "command", "args"):
        assert container[key] == mine[key], key
    # (A pod also has the service account's token volume, which kube-apiserver's
    # ServiceAccount admission adds after the template's.)
    assert [(m["name"], m["mountPath"]) for m in container["volumeMounts"][:2]] == [
        ("fsx", "/fsx"),
        ("shm", "/dev/shm"),
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["NCCL_DEBUG"], env["FI_PROVIDER"], env["HYPERGUARD_JOB_ID"]) == (
        "INFO",
        "efa",
        job_id,
    )
    # what the trainer kit reads: the team's API URL as given, HyperGuard's run, node, grace
    given_env = {e["name"]: e.get("value") for e in mine["env"]}
    assert env["HYPERGUARD_API_URL"] == given_env["HYPERGUARD_API_URL"]
    assert env["HYPERGUARD_RUN"].isdigit() and env["HYPERGUARD_GRACE_S"] == "30"
    (node,) = [e for e in container["env"] if e["name"] == "HYPERGUARD_NODE_NAME"]
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # (kube-apiserver writes a pod's quantities as strings; a custom resource keeps them.)
    resources = {
        part: {name: str(value) for name, value in asked.items()}
        for part, asked in container["resources"].items()
    }
    assert resources == {
        "requests": {"vpc.amazonaws.com/efa": "32", "memory": "32000Mi", "nvidia.com/gpu": "8"},
        "limits": {"vpc.amazonaws.com/efa": "32", "nvidia.com/gpu": "8"},
    }
