"""Recovery benchmark on the twin: event put → node cordoned, and HyperGuard's own overhead
per incident (handler CPU time, Lambda invocations, AWS API calls).

    python bench/recovery.py [--faults 4]

Prints one JSON object. Faults are injected one after another on busy HyperPod nodes; each
runs the whole NodeRecovery workflow (replacement included) on the simulated cluster at
x60. Times are wall-clock on this machine; CPU and call counts are per incident and count
only what the functions themselves do (not the emulator or the simulator).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The functions an incident runs; the scheduler's periodic passes are not incident work.
INCIDENT_FUNCTIONS = ("IngestHealthFunction", "RecoveryFunction")
sys.path.insert(0, str(ROOT / "shared"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _count_function_calls() -> Counter[str]:
    """Counts the AWS API calls made inside function invocations."""
    from botocore.client import BaseClient

    from hyperguard.twin.telemetry import current_function

    calls: Counter[str] = Counter()
    original = BaseClient._make_api_call

    def counting(self: Any, operation: str, params: Any) -> Any:
        if current_function() in INCIDENT_FUNCTIONS:
            calls[f"{self.meta.service_model.service_name}:{operation}"] += 1
        return original(self, operation, params)

    BaseClient._make_api_call = counting  # type: ignore[method-assign]
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--faults", type=int, default=4)
    args = parser.parse_args()

    from hyperguard.store import IncidentStore
    from hyperguard.twin.runtime import Twin, TwinConfig

    calls = _count_function_calls()
    twin = Twin(TwinConfig(root=ROOT, port=_free_port(), api_port=_free_port()))
    twin.up()
    assert twin.deployment is not None
    out = twin.deployment.outputs
    incidents = IncidentStore(out["IncidentsTableName"], out["NodesTableName"])
    sfn = twin.client("stepfunctions")
    busy = [n for job in twin.cluster.jobs() for n in job.nodes]
    to_cordon, total, results = [], [], []
    cpu_before, inv_before = dict(twin.executor.cpu_s), Counter(twin.executor.invocations)
    calls.clear()
    for instance_id in busy[: args.faults]:
        started = time.perf_counter()
        twin.fault(instance_id)
        while twin.cluster.node_status(instance_id).schedulable:
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
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in twin.executor.cpu_s.items()}
    invocations = Counter(twin.executor.invocations)
    invocations.subtract(inv_before)
    twin.down()
    n = args.faults
    print(
        json.dumps(
            {
                "faults": n,
                "executions": dict(Counter(results)),
                "put_to_cordoned_ms": {
                    "median": round(statistics.median(to_cordon) * 1000, 1),
                    "max": round(max(to_cordon) * 1000, 1),
                },
                "put_to_recovered_s": {
                    "median": round(statistics.median(total), 1),
                    "max": round(max(total), 1),
                    "note": "replacement included; the simulated cluster runs x60",
                },
                "per_incident": {
                    "handler_cpu_ms": {
                        k: round(cpu.get(k, 0.0) / n * 1000, 1) for k in INCIDENT_FUNCTIONS
                    },
                    "invocations": {k: round(invocations[k] / n, 1) for k in INCIDENT_FUNCTIONS},
                    "aws_calls": round(sum(calls.values()) / n, 1),
                    "aws_calls_by_operation": {
                        k: round(v / n, 1) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])
                    },
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
