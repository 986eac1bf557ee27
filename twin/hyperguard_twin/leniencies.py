"""Where the twin is still kinder than a real account: listed by `hyperguard twin status` and
docs/architecture.md, so a test that passes on the twin says how far it can be trusted.

Kubernetes is not on this list: the twin runs the upstream components (kube-apiserver with
RBAC, kube-scheduler, kube-controller-manager, etcd, KWOK, Kueue, Karpenter's core). What
remains is what has no open-source original, imitated by the twin's own controllers
(`hyperguard_twin.cloud`) and its IAM check (`hyperguard_twin.iam`). Each entry is (the
imitated system, what it does not refuse or do that the real one would, and why it stays).
Whoever makes the twin stricter removes the entry; whoever finds a new gap adds one.
"""

from __future__ import annotations

LENIENCIES: tuple[tuple[str, str], ...] = (
    (
        "Karpenter's AWS cloud provider",
        "the twin's provider (twin/components/karpenter/provider) launches with RunInstances "
        "instead of launch templates and CreateFleet, resolves an AMI alias by name instead "
        "of an SSM parameter, finds no AMI or subnet drift, and has no interruption queue: "
        "karpenter-provider-aws needs EC2 Fleet, SSM, pricing and IAM instance profiles the "
        "emulator does not serve, and a kubelet to register its nodes",
    ),
    (
        "nodes' kubelets (KWOK)",
        "pods run no containers: a pod's process ends when the twin's training model says "
        "so, its log is what that model prints (served by KWOK's kubelet API through "
        "pods/log), and exec and probes are not served; a deleted pod ends at once, with no "
        "termination grace period and no checkpoint saved on SIGTERM (a restart's wait for "
        "it, D210, is proven on the upstream API server with a finalizer instead)",
    ),
    (
        "HyperPod training operator",
        "written from the HyperPod CLI's model of its CRD and status and AWS's documentation "
        "(the operator and its CRD are not published); log monitoring rules "
        "(logMonitoringConfiguration) are stored, never evaluated, and a restart is a restart "
        "of every pod (no per-rank restart)",
    ),
    (
        "HyperPod automatic node recovery",
        "with NodeRecovery Automatic it reboots a GPU fault once and replaces anything else "
        "120 s (assumed) after its health agent's report, and its cluster events "
        "(ListClusterEvents) are only those of its own repairs; its real rules and delays are "
        "not published",
    ),
    (
        "HyperPod automatic patching",
        "runs once, on the NextPatchDate it is given (no next date follows); DrainFirst "
        "evicts but does not wait out a PodDisruptionBudget; no AMI ids or release versions "
        "are reported, only LastSoftwareUpdateTime and SoftwareUpdateStatus",
    ),
    (
        "EC2",
        "capacity is a count per instance type and capacity type (no zones, no capacity "
        "reservations or Capacity Blocks), and spot instances are never reclaimed by EC2 on "
        "its own (the twin injects interruption events instead)",
    ),
    (
        "API Gateway and Lambda behind it",
        "API Gateway's 29 s integration timeout is not enforced (ApiFunction's own 25 s "
        "timeout, which the twin's Lambda runtime enforces, ends a call first, D212), and a "
        "call beyond the four execution environments a function may run at once waits for "
        "one, first come first served (D211), where Lambda would start another: four worker "
        "processes are what the twin's one machine gives a function",
    ),
    (
        "nodes",
        "maxPods is the kubelet's default 110, not the EKS AMI's per-instance-type figure",
    ),
    (
        "IAM",
        "only calls signed with a function's or the forwarder's role credentials are "
        "authorized (identity-based policies of one account; no resource policies, "
        "permissions boundaries, SCPs or session policies, and credentials never expire); "
        "what Lambda, Step Functions, EventBridge and SNS do with their own roles or on the "
        "caller's behalf is not, since moto or the twin makes those calls itself (the event "
        "source mappings' SQS polling, log delivery, the state machines' and rules' roles, "
        "SNS's use of the topic's KMS key); a call whose "
        "resources the twin does not derive, a task token no running execution holds, a "
        "condition key other than a resource tag on EC2 instances or PutEvents' "
        "events:source and events:detail-type, an operator other than String, Arn, Bool and "
        "Null, and a policy variable are let through undecided and checked after the fact "
        "by action only (tests/e2e/iam.py); GetCallerIdentity's signature is not checked "
        "(the EKS token replay restates a presigned URL)",
    ),
)
