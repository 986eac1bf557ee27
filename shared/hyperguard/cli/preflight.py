"""`hyperguard preflight`: is the deployment ready, and if not, what to do. Each check is a
line: pass, warn or fail, what was found, and the fix. Read-only calls with the caller's
credentials (CloudFormation, SageMaker, EKS, S3) and the service's own API (who repairs
what, as its inventory saw the cluster); on the twin the same calls reach its emulator.

Decide, then apply: each `check_*` is a pure function of what the calls answered;
`run_checks` makes the calls, one failure never stopping the other checks.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from hyperguard.cli.output import print_json, print_table

Status = Literal["pass", "warn", "fail"]

FUNCTION_GROUPS = (
    "hyperguard-api",
    "hyperguard-ingest-health",
    "hyperguard-inventory",
    "hyperguard-recovery",
    "hyperguard-scheduler",
    "hyperguard-burst",
)
"""The Kubernetes groups deploy/kubernetes/hyperguard-rbac.yaml binds, one per function."""


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    found: str
    fix: str = ""


def check_stack(stack: Mapping[str, Any]) -> Check:
    status = str(stack.get("StackStatus", "?"))
    if status.endswith("_COMPLETE") and "ROLLBACK" not in status and "DELETE" not in status:
        return Check("stack", "pass", f"{stack.get('StackName')} {status}")
    return Check(
        "stack",
        "fail",
        f"{stack.get('StackName')} {status}",
        "deploy it: make build && sam deploy (docs/operations.md, Deploy to AWS)",
    )


def check_hyperpod(cluster: Mapping[str, Any], eks_cluster: str) -> list[Check]:
    """The cluster is in service, orchestrated by the stack's EKS cluster, and provisions
    nodes on request (bursts into its groups and its cluster events need Continuous)."""
    name = cluster.get("ClusterName", "?")
    status = cluster.get("ClusterStatus", "?")
    checks = [
        Check("hyperpod-cluster", "pass", f"{name} {status}")
        if status == "InService"
        else Check(
            "hyperpod-cluster",
            "fail",
            f"{name} {status}",
            "wait until it is InService, or fix the stack's HyperPodClusterName",
        )
    ]
    arn = ((cluster.get("Orchestrator") or {}).get("Eks") or {}).get("ClusterArn", "")
    if arn.rsplit("/", 1)[-1] == eks_cluster:
        checks.append(Check("orchestrator", "pass", f"EKS cluster {eks_cluster}"))
    else:
        checks.append(
            Check(
                "orchestrator",
                "fail",
                f"orchestrated by {arn or 'no EKS cluster'}, the stack names {eks_cluster}",
                "set the stack's EksClusterName to the cluster HyperPod runs on",
            )
        )
    mode = cluster.get("NodeProvisioningMode") or "not set"
    checks.append(
        Check("node-provisioning", "pass", "Continuous")
        if mode == "Continuous"
        else Check(
            "node-provisioning",
            "warn",
            f"NodeProvisioningMode {mode}",
            "bursts into HyperPod groups and HyperPod's cluster events need Continuous; "
            "without it bursts go to Karpenter only",
        )
    )
    checks.append(check_autoscaling(cluster.get("AutoScaling") or {}))
    return checks


def check_autoscaling(scaling: Mapping[str, Any]) -> Check:
    """HyperPod's managed autoscaling (DescribeCluster `AutoScaling`, Karpenter run by
    SageMaker) adds nodes to the instance groups for pending pods, as HyperGuard's bursts
    into them do (the burst policy's `hyperpodGroups`): two systems growing one group."""
    if scaling.get("Mode") != "Enable":
        return Check("managed-autoscaling", "pass", "off: HyperGuard's bursts alone grow groups")
    kind = scaling.get("AutoScalerType", "Karpenter")
    if scaling.get("Status") == "Failed":
        return Check(
            "managed-autoscaling",
            "fail",
            f"{kind} autoscaling failed: {scaling.get('FailureMessage') or 'no message'}",
            "fix or disable it (UpdateCluster AutoScaling)",
        )
    return Check(
        "managed-autoscaling",
        "warn",
        f"{kind} autoscaling {scaling.get('Status', 'on')}: it grows the instance groups for "
        "pending pods too",
        "leave the groups it scales out of the burst policy's hyperpodGroups, or disable one",
    )


def check_access_entries(entries: Mapping[str, list[str]], create: str) -> Check:
    """Each function's role has an access entry in its group (`entries`: principal →
    Kubernetes groups)."""
    groups = {g for found in entries.values() for g in found}
    missing = [g for g in FUNCTION_GROUPS if g not in groups]
    if not missing:
        return Check("eks-access-entries", "pass", f"{len(FUNCTION_GROUPS)} function groups")
    fix = (
        "redeploy with CreateEksAccessEntries=true, or create them by hand "
        "(docs/operations.md, Cluster access)"
        if create != "true"
        else "the stack created none for these: check its events"
    )
    return Check("eks-access-entries", "fail", f"no access entry in {', '.join(missing)}", fix)


def check_repairers(answer: Mapping[str, Any]) -> list[Check]:
    """What the inventory saw of the other repairers, and who repairs where (D148): a source
    it could not read is the RBAC not applied; `own` where the other cannot be held off means
    both act."""
    seen = answer.get("seen") or {}
    if not seen.get("observedAt"):
        return [
            Check(
                "repairers",
                "warn",
                "the inventory has not looked at the cluster yet",
                "wait for its first sync (5 minutes), then run preflight again",
            )
        ]
    checks = []
    for source, why in sorted((seen.get("unread") or {}).items()):
        checks.append(
            Check(
                f"repairers:{source}",
                "fail",
                f"could not be read: {why}",
                "kubectl apply -f deploy/kubernetes/hyperguard-rbac.yaml"
                if source in ("karpenter", "nth")
                else "check the inventory function's role (template.yaml)",
            )
        )
    for row in answer.get("owners") or []:
        if row.get("source") in (seen.get("unread") or {}):
            continue
        both = bool(row.get("bothAct"))
        checks.append(
            Check(
                f"repairers:{row.get('source')}",
                "warn" if both else "pass",
                f"{row.get('scope')}: {row.get('repairs')} repairs ({row.get('note')})",
                "both act: set the policy's setting for it to defer, or turn it off on the cluster"
                if both
                else "",
            )
        )
    return checks


def check_prerequisites(answer: Mapping[str, Any]) -> list[Check]:
    """What the cluster's API server serves (GET /cluster/prerequisites): Kueue's API in the
    version HyperGuard writes, the training operator's HyperPodPyTorchJob, and the Karpenter
    NodePools bursts launch into, each bounded by limits and with its node class."""
    # Here, not at the top: hyperguard.cluster loads its gateway, which --help never needs.
    from hyperguard.cluster.prerequisites import KUEUE_VERSION, OPERATOR_VERSION

    kueue = answer.get("kueue_versions")
    checks = [
        Check("kueue", "pass", f"kueue.x-k8s.io {', '.join(kueue)} served")
        if kueue and KUEUE_VERSION in kueue
        else Check(
            "kueue",
            "fail",
            f"kueue.x-k8s.io serves {', '.join(kueue)}, not {KUEUE_VERSION}"
            if kueue
            else "Kueue is not installed (no clusterqueues.kueue.x-k8s.io)",
            "install HyperPod task governance (the amazon-sagemaker-hyperpod-taskgovernance "
            f"EKS add-on), or a Kueue serving {KUEUE_VERSION} (docs/operations.md, Versions)",
        )
    ]
    operator = answer.get("training_operator_versions")
    checks.append(
        Check("training-operator", "pass", f"HyperPodPyTorchJob {', '.join(operator)} served")
        if operator and OPERATOR_VERSION in operator
        else Check(
            "training-operator",
            "fail",
            "the HyperPod training operator is not installed (no HyperPodPyTorchJob)"
            if not operator
            else f"HyperPodPyTorchJob serves {', '.join(operator)}, not {OPERATOR_VERSION}",
            "install the amazon-sagemaker-hyperpod-training-operator EKS add-on",
        )
    )
    pools = answer.get("node_pools") or []
    if not pools:
        checks.append(
            Check(
                "nodepools",
                "warn",
                "no Karpenter NodePool: bursts go to HyperPod instance groups only",
                "kubectl apply -f deploy/kubernetes/examples/burst-nodepool.yaml (adapted)",
            )
        )
    for pool in pools:
        name = f"nodepool:{pool.get('name')}"
        limits = pool.get("limits") or {}
        if pool.get("node_class_found") is False:
            checks.append(
                Check(
                    name,
                    "fail",
                    f"its node class {pool.get('node_class')} does not exist",
                    "create the EC2NodeClass it names, or point the NodePool at one that exists",
                )
            )
        elif not limits:
            checks.append(
                Check(
                    name,
                    "warn",
                    "no limits: a burst could launch instances without bound",
                    "set spec.limits (e.g. nvidia.com/gpu) on the NodePool",
                )
            )
        else:
            bounds = ", ".join(f"{k} {v}" for k, v in sorted(limits.items()))
            ready = pool.get("node_class_ready")
            status: Status = "warn" if ready is False else "pass"
            checks.append(
                Check(
                    name,
                    status,
                    f"limits {bounds}; {pool.get('node_class')}"
                    + (" not Ready" if ready is False else ""),
                    "see the EC2NodeClass's status conditions" if ready is False else "",
                )
            )
    return checks


def check_bucket(bucket: str, error: str | None) -> Check:
    if error is None:
        return Check("checkpoint-bucket", "pass", f"s3://{bucket} exists")
    return Check(
        "checkpoint-bucket",
        "fail",
        f"s3://{bucket}: {error}",
        "create it, or deploy with the CheckpointBucketName the jobs write to",
    )


def check_admins(admins: str) -> Check:
    if admins.strip():
        count = len([a for a in admins.split(",") if a.strip()])
        return Check("admin-principals", "pass", f"{count} admin principal(s)")
    return Check(
        "admin-principals",
        "fail",
        "AdminPrincipalArns is empty: nobody can create teams, quotas or principals",
        "redeploy with AdminPrincipalArns=<your role ARN>",
    )


def check_webhook(url: str) -> Check:
    if url:
        return Check("webhook", "pass", f"escalations are posted to {url.split('/')[2]}")
    return Check(
        "webhook",
        "warn",
        "no WebhookUrl: escalations reach the EscalationTopicArn output's subscribers only",
        "subscribe an operator to the topic, or deploy with WebhookUrl",
    )


def _attempt(name: str, call: Callable[[], Check | list[Check]]) -> list[Check]:
    """A check whose calls failed fails, saying why (never a traceback)."""
    try:
        result = call()
    except Exception as exc:
        return [Check(name, "fail", f"{type(exc).__name__}: {str(exc)[:300]}", "see the error")]
    return result if isinstance(result, list) else [result]


def run_checks(service: Any, api: Any) -> list[Check]:
    stack = service.client("cloudformation").describe_stacks(StackName=service.stack_name)[
        "Stacks"
    ][0]
    params = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
    eks_cluster = params.get("EksClusterName", "")
    checks = [check_stack(stack)]

    def hyperpod() -> list[Check]:
        sagemaker = service.client("sagemaker")
        cluster = sagemaker.describe_cluster(ClusterName=params.get("HyperPodClusterName", ""))
        return check_hyperpod(cluster, eks_cluster)

    def access() -> Check:
        eks = service.client("eks")
        entries: dict[str, list[str]] = {}
        for arn in eks.list_access_entries(clusterName=eks_cluster).get("accessEntries", []):
            entry = eks.describe_access_entry(clusterName=eks_cluster, principalArn=arn)
            entries[arn] = list(entry["accessEntry"].get("kubernetesGroups") or [])
        return check_access_entries(entries, params.get("CreateEksAccessEntries", "true"))

    def bucket() -> Check:
        name = params.get("CheckpointBucketName", "")
        try:
            service.client("s3").head_bucket(Bucket=name)
        except Exception as exc:
            return check_bucket(name, str(exc)[:200])
        return check_bucket(name, None)

    checks += _attempt("hyperpod-cluster", hyperpod)
    checks += _attempt("eks-access-entries", access)
    checks += _attempt("repairers", lambda: check_repairers(api.call("GET", "/repairers")))
    checks += _attempt(
        "cluster-prerequisites",
        lambda: check_prerequisites(api.call("GET", "/cluster/prerequisites")),
    )
    checks += _attempt("checkpoint-bucket", bucket)
    checks.append(check_admins(params.get("AdminPrincipalArns", "")))
    checks.append(check_webhook(params.get("WebhookUrl", "")))
    return checks


def cmd_preflight(args: argparse.Namespace, service: Any, api: Any) -> int:
    """Exit 0 when nothing failed (warnings allowed), 1 otherwise."""
    checks = run_checks(service, api)
    if args.json:
        print_json([asdict(c) for c in checks])
    else:
        columns = [("status", "STATUS"), ("name", "CHECK"), ("found", "FOUND"), ("fix", "FIX")]
        print_table([asdict(c) for c in checks], columns)
    return 1 if any(c.status == "fail" for c in checks) else 0
