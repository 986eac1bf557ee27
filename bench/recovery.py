"""Recovery benchmark on the twin: twin start, fault → node cordoned, fault → recovered, and
what HyperGuard itself spends per incident (function CPU, invocations, AWS API calls,
Kubernetes API calls), on the deployed path: functions in their worker processes, the real
HyperPod and Kubernetes adapters against the twin's SageMaker and Kubernetes APIs.

    python bench/recovery.py [--faults 4] [--cluster-times zero|modelled]

Prints one JSON object. Faults ("persistent": only a replacement cures them) are injected one
after another on busy HyperPod nodes; the simulated health agent reports each on EventBridge
and the whole NodeRecovery workflow runs, replacement included.

With `--cluster-times zero` (the default) the simulated cluster's own durations — reboot,
replacement, health checks, job restart — are zero, so what remains is HyperGuard's own
overhead: `phases` gives, per workflow state, the median wall time from entering it to
entering the next (Step Functions' execution history), split into work (Task and Choice
states) and the policy's waits (Wait states: the poll interval, 1 s on the twin). With
`--cluster-times modelled` the cluster takes SimTimings' durations (replacement 940 s, job
restart 60 s), run 60x faster. Measured: wall-clock times on this machine, the worker
processes' CPU during invocations, AWS calls counted at the emulator by the caller's
credentials, and Kubernetes requests from the real kube-apiserver's audit log
(`ControlPlane.requests()`), each counted for the function whose EKS access entry gave the
caller its Kubernetes group (template.yaml's `AWS::EKS::AccessEntry`), with the requests RBAC
refused counted apart. Nothing here is a peer's figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The functions an incident runs; the scheduler's and the inventory's periodic passes are
# not incident work.
INCIDENT_FUNCTIONS = ("IngestHealthFunction", "RecoveryFunction")
sys.path.insert(0, str(ROOT / "shared"))


ZERO_CLUSTER_TIMES = {
    "reboot_s": 0.0,
    "replace_s": 0.0,
    "replace_shutdown_s": 0.0,
    "deep_health_check_s": 0.0,
    "job_restart_s": 0.0,
}


def to_break(busy: list[str], faults: int) -> list[str]:
    """The first `faults` busy nodes; fewer, and said on stderr, when there are not as many."""
    if faults > len(busy):
        print(f"only {len(busy)} busy nodes: {len(busy)} faults", file=sys.stderr)
    return busy[:faults]


def phase_times(histories: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Per state: median ms from entering it to entering the next state (or the end), summed
    over its visits in one execution; Wait states are the policy's waits, the rest work."""
    per_state: dict[str, list[float]] = {}
    waits: list[float] = []
    work: list[float] = []
    for events in histories:
        entered = [
            (e["stateEnteredEventDetails"]["name"], e["type"], e["timestamp"])
            for e in events
            if "stateEnteredEventDetails" in e
        ]
        end = events[-1]["timestamp"]
        mine: Counter[str] = Counter()
        wait_ms = work_ms = 0.0
        for index, (name, kind, at) in enumerate(entered):
            after = entered[index + 1][2] if index + 1 < len(entered) else end
            ms = (after - at).total_seconds() * 1000
            mine[name] += ms
            if kind == "WaitStateEntered":
                wait_ms += ms
            else:
                work_ms += ms
        for name, ms in mine.items():
            per_state.setdefault(name, []).append(ms)
        waits.append(wait_ms)
        work.append(work_ms)
    return {
        "work_total": round(statistics.median(work), 1) if work else None,
        "policy_waits_total": round(statistics.median(waits), 1) if waits else None,
        "by_state": {k: round(statistics.median(v), 1) for k, v in sorted(per_state.items())},
    }


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def workflow_to_cordoned(events: list[dict[str, Any]]) -> float | None:
    """Seconds from the execution's start to the Cordon state's exit: the workflow's own
    share of fault → cordoned (the rest is the event's way in: EventBridge, SQS, ingestion)."""
    started = events[0]["timestamp"]
    for event in events:
        details = event.get("stateExitedEventDetails") or {}
        if details.get("name") == "Cordon":
            return float((event["timestamp"] - started).total_seconds())
    return None


def times(
    to_cordon: list[float], total: list[float], histories: list[list[dict[str, Any]]], cluster: str
) -> dict[str, Any]:
    """Fault → cordoned (and the workflow's own share of it) and fault → recovered."""
    workflow = [t for t in map(workflow_to_cordoned, histories) if t is not None]
    return {
        "fault_to_cordoned_ms": {
            "median": round(statistics.median(to_cordon) * 1000, 1),
            "p99": round(_p99(to_cordon) * 1000, 1),
            "max": round(max(to_cordon) * 1000, 1),
        },
        "execution_start_to_cordoned_ms": {
            "median": round(statistics.median(workflow) * 1000, 1),
            "p99": round(_p99(workflow) * 1000, 1),
        }
        if workflow
        else None,
        "fault_to_recovered_s": {
            "median": round(statistics.median(total), 1),
            "max": round(max(total), 1),
            "note": "the cluster's own times are zero"
            if cluster == "zero"
            else "replacement included; modelled at 940 s, run 60x faster",
        },
    }


def kubernetes_groups(template: dict[str, Any]) -> dict[str, str]:
    """The Kubernetes group each function's EKS access entry gives it, by function: the
    entry's principal is the function's role (`<Function>Role`)."""
    groups = {}
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::EKS::AccessEntry":
            props = resource["Properties"]
            role = props["PrincipalArn"]["Fn::GetAtt"][0]
            (groups[role.removesuffix("Role")],) = props["KubernetesGroups"]
    return groups


def kubernetes_calls(
    requests: list[dict[str, Any]], groups: dict[str, str]
) -> tuple[Counter[tuple[str, str]], Counter[str]]:
    """The audit log's requests of the functions' groups, as (function, "verb resource")
    counts, and those RBAC refused, by function."""
    function_of = {group: function for function, group in groups.items()}
    calls: Counter[tuple[str, str]] = Counter()
    refused: Counter[str] = Counter()
    for request in requests:
        function = next((function_of[g] for g in request["groups"] if g in function_of), None)
        if function is None:
            continue
        calls[(function, f"{request['verb']} {request['resource']}")] += 1
        refused[function] += not request["authorized"]
    return calls, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--faults", type=int, default=4)
    parser.add_argument("--cluster-times", choices=("zero", "modelled"), default="zero")
    args = parser.parse_args()

    from hyperguard.store import IncidentStore
    from hyperguard_twin.cluster import SimTimings
    from hyperguard_twin.config import TwinConfig
    from hyperguard_twin.deploy import load_template
    from hyperguard_twin.runtime import Twin

    groups = kubernetes_groups(load_template(ROOT / "template.yaml"))

    timings = ZERO_CLUSTER_TIMES if args.cluster_times == "zero" else {}
    twin = Twin(
        TwinConfig(
            root=ROOT,
            port=0,
            api_port=0,
            timings=SimTimings(**timings),
            node_recovery="None",  # HyperGuard's own recovery is what is measured
        )
    )
    started = time.perf_counter()
    twin.up()
    twin_start_s = time.perf_counter() - started
    runtime, plane = twin.runtime, twin.plane
    assert runtime is not None and plane is not None
    incidents = IncidentStore(twin.outputs["IncidentsTableName"], twin.outputs["NodesTableName"])
    sfn = twin.client("stepfunctions")
    busy = [i for job_id in twin.seeded_jobs.values() for i in twin.cluster.job_instances(job_id)]
    cpu_before = dict(runtime.cpu_s)
    invocations_before = Counter(runtime.invocations)
    aws_before = twin.function_calls()
    requests_before = len(plane.requests())
    to_cordon, total, results, histories = [], [], [], []
    for instance_id in to_break(busy, args.faults):
        started = time.perf_counter()
        twin.fault(instance_id, "persistent")
        while twin.cluster.schedulable(instance_id):
            time.sleep(0.002)
        to_cordon.append(time.perf_counter() - started)
        incident = None
        while incident is None or incident.execution_arn is None:
            incident = incidents.open_incident_for(instance_id)
            time.sleep(0.05)
        while (
            status := sfn.describe_execution(executionArn=incident.execution_arn)["status"]
        ) == "RUNNING":
            time.sleep(0.1)
        total.append(time.perf_counter() - started)
        results.append(status)
        histories.append(
            sfn.get_execution_history(executionArn=incident.execution_arn, maxResults=1000)[
                "events"
            ]
        )
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in runtime.cpu_s.items()}
    invocations = Counter(runtime.invocations)
    invocations.subtract(invocations_before)
    aws = twin.function_calls()
    aws.subtract(aws_before)
    aws_calls = Counter(
        {op: n for (fn, op), n in aws.items() if fn in INCIDENT_FUNCTIONS and n > 0}
    )
    kube, refused = kubernetes_calls(plane.requests()[requests_before:], groups)
    kube_calls: Counter[str] = Counter()
    kube_by_function: Counter[str] = Counter()
    for (function, call), count in kube.items():
        if function in INCIDENT_FUNCTIONS:
            kube_calls[call] += count
            kube_by_function[function] += count
    init_ms = {k: [round(v, 1) for v in runtime.init_ms[k]] for k in sorted(runtime.init_ms)}
    phases = phase_times(histories)
    twin.down()
    n = len(results)  # the faults injected: the per-incident figures divide by it
    print(
        json.dumps(
            {
                "faults": n,
                "cluster_times": args.cluster_times,
                "executions": dict(Counter(results)),
                "twin_start_s": round(twin_start_s, 1),
                "cold_start_init_ms": init_ms,
                **times(to_cordon, total, histories, args.cluster_times),
                "phases_ms": phases,
                "per_incident": {
                    "function_cpu_ms": {
                        k: round(cpu.get(k, 0.0) / n * 1000, 1) for k in INCIDENT_FUNCTIONS
                    },
                    "invocations": {k: round(invocations[k] / n, 1) for k in INCIDENT_FUNCTIONS},
                    "aws_calls": round(aws_calls.total() / n, 1),
                    "aws_calls_by_operation": {
                        k: round(v / n, 1) for k, v in aws_calls.most_common()
                    },
                    "kubernetes_calls": round(kube_calls.total() / n, 1),
                    "kubernetes_calls_by_function": {
                        k: round(kube_by_function[k] / n, 1) for k in INCIDENT_FUNCTIONS
                    },
                    "kubernetes_calls_by_request": {
                        k: round(v / n, 1) for k, v in kube_calls.most_common()
                    },
                    "kubernetes_calls_refused": sum(refused[k] for k in INCIDENT_FUNCTIONS),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
