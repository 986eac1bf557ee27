"""What CloudWatch does with a Lambda's output, for the twin.

Each invocation's log text (its worker process's output, with Lambda's START/END/REPORT
lines) goes to the function's CloudWatch Logs group, and the Embedded Metric Format lines
that powertools prints become CloudWatch metrics, all in the emulator.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

STREAM = "twin"
"""The log stream of every function's group (Lambda names one per execution environment)."""


def emf_metrics(line: str) -> list[dict[str, Any]]:
    """The metric data points of one EMF log line (empty for any other line)."""
    try:
        doc = json.loads(line)
    except json.JSONDecodeError:
        return []
    if not isinstance(doc, dict) or "_aws" not in doc:
        return []
    points = []
    for directive in doc["_aws"].get("CloudWatchMetrics", []):
        dims = directive.get("Dimensions", [[]])[0]
        for metric in directive.get("Metrics", []):
            values = doc.get(metric["Name"])
            values = values if isinstance(values, list) else [values]
            for value in values:
                points.append(
                    {
                        "Namespace": directive["Namespace"],
                        "MetricName": metric["Name"],
                        "Dimensions": [{"Name": d, "Value": str(doc[d])} for d in dims if d in doc],
                        "Value": float(value),
                        "Unit": metric.get("Unit", "None"),
                    }
                )
    return points


class CloudWatchSink:
    """Delivers captured output into the emulator's CloudWatch Logs and Metrics as Lambda's
    own log delivery does: inside the cloud, not as a call the function makes. So it writes
    moto's backends directly, with no round trip through the emulator's HTTP server and
    botocore (two calls an invocation: about a tenth of an idle twin's own process's CPU,
    BENCHMARKS.md, "An idle twin's cost", D199). What a user reads back goes through the real
    APIs (FilterLogEvents, GetMetricStatistics)."""

    def __init__(self, account: str, region: str) -> None:
        self.account = account
        self.region = region
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Deliver nothing more; waits for a delivery under way. The backends are
        process-global and outlive the twin: an invocation that ends after its twin went
        down must not write into whatever the process mocks next."""
        with self._lock:
            self._closed = True

    def ship(self, function_name: str, output: str) -> None:
        from moto.cloudwatch.models import cloudwatch_backends
        from moto.logs.models import logs_backends

        lines = [line for line in output.splitlines() if line.strip()]
        if not lines:
            return
        group = f"/aws/lambda/{function_name}"
        logs = logs_backends[self.account][self.region]
        now = int(time.time() * 1000)
        by_namespace: dict[str, list[dict[str, Any]]] = {}
        for line in lines:
            for point in emf_metrics(line):
                by_namespace.setdefault(point.pop("Namespace"), []).append(point)
        with self._lock:  # moto's log streams are not thread-safe
            if self._closed:
                return
            if group not in logs.groups:
                # The stack creates the function's log group (with its retention).
                logs.create_log_group(group, tags={})
            logs.ensure_log_stream(group, STREAM)
            logs.put_log_events(group, STREAM, [{"timestamp": now, "message": m} for m in lines])
            metrics = cloudwatch_backends[self.account][self.region]
            for namespace, data in by_namespace.items():
                metrics.put_metric_data(namespace, data)
