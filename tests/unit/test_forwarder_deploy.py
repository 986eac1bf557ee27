"""The in-cluster forwarder's deployment holds together: its image (deploy/forwarder/
Dockerfile) installs what the package needs and runs the forwarder as the user the
Deployment demands; its manifest (deploy/kubernetes/hyperguard-forwarder.yaml) names the
service account the stack's Pod Identity association binds, grants what the forwarder's
watch needs, and sets every variable the forwarder reads. No Docker here: the Dockerfile is
read, not built."""

from __future__ import annotations

import importlib
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import yaml
from tests.conftest import ROOT, template

DOCKERFILE = ROOT / "deploy" / "forwarder" / "Dockerfile"
MANIFEST = ROOT / "deploy" / "kubernetes" / "hyperguard-forwarder.yaml"


def instructions() -> list[tuple[str, str]]:
    lines = [line for line in DOCKERFILE.read_text().splitlines() if line and line[0] != "#"]
    return [(word.upper(), rest.strip()) for word, _, rest in (x.partition(" ") for x in lines)]


def documents() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}


def test_the_image_copies_what_pyproject_needs_and_pins_from_the_lock() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = {
        source
        for word, rest in instructions()
        if word == "COPY"
        for source in shlex.split(rest)[:-1]
    }
    where = pyproject["tool"]["setuptools"]["packages"]["find"]["where"][0]
    needed = {"pyproject.toml", pyproject["project"]["readme"], f"{where}/hyperguard"}
    needed |= {"shared/requirements.txt", "requirements/dev.lock"}
    assert needed <= copied, sorted(needed - copied)
    assert all((ROOT / path).exists() for path in copied)
    runs = [rest for word, rest in instructions() if word == "RUN"]
    assert any("-r shared/requirements.txt -c requirements/dev.lock boto3" in r for r in runs)


def test_the_image_runs_the_forwarder_as_the_user_the_deployment_demands() -> None:
    found = dict(instructions())
    module = re.fullmatch(r'\["python", "-m", "([\w.]+)"\]', found["ENTRYPOINT"])
    assert module is not None
    assert callable(importlib.import_module(module.group(1)).main)
    deployment = documents()["Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", module.group(1)]
    context = container["securityContext"]
    assert context["runAsNonRoot"] and context["readOnlyRootFilesystem"]
    assert found["USER"] == f"{context['runAsUser']}:{context['runAsUser']}"


def test_the_manifest_matches_the_stacks_pod_identity_and_the_forwarders_needs() -> None:
    docs = documents()
    account = docs["ServiceAccount"]["metadata"]
    association = template()["Resources"]["ForwarderPodIdentity"]["Properties"]
    assert (account["namespace"], account["name"]) == (
        association["Namespace"],
        association["ServiceAccount"],
    )
    spec = docs["Deployment"]["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == account["name"]
    (subject,) = docs["ClusterRoleBinding"]["subjects"]
    assert (subject["namespace"], subject["name"]) == (account["namespace"], account["name"])
    nodes, workloads, jobs, hyperpod_jobs = docs["ClusterRole"]["rules"]
    assert (nodes["apiGroups"], nodes["resources"], sorted(nodes["verbs"])) == (
        [""],
        ["nodes"],
        ["get", "list", "watch"],
    )
    # The held jobs' Workloads (D170): watched, never written.
    assert (workloads["apiGroups"], workloads["resources"], sorted(workloads["verbs"])) == (
        ["kueue.x-k8s.io"],
        ["workloads"],
        ["list", "watch"],
    )
    # HyperGuard's runs, whose ends it forwards (D182): watched, never written.
    assert [
        (r["apiGroups"], r["resources"], sorted(r["verbs"])) for r in (jobs, hyperpod_jobs)
    ] == [
        (["batch"], ["jobs"], ["list", "watch"]),
        (["sagemaker.amazonaws.com"], ["hyperpodpytorchjobs"], ["list", "watch"]),
    ]
    source = Path(ROOT / "shared" / "hyperguard" / "forwarder.py").read_text()
    read = set(re.findall(r'os\.environ\["(\w+)"\]', source))
    (container,) = spec["containers"]
    assert read and read <= {e["name"] for e in container["env"]}
