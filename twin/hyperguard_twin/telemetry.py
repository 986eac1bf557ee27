"""What CloudWatch does with a Lambda's output, for the twin.

Each invocation's log text (its worker process's output, with Lambda's START/END/REPORT
lines) goes to the function's CloudWatch Logs group, and the Embedded Metric Format lines
that powertools prints become CloudWatch metrics, all in the emulator.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import suppress
from typing import Any


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
    """Ships captured output to the emulator's CloudWatch Logs and Metrics."""

    def __init__(self, logs: Any, cloudwatch: Any) -> None:
        self.logs = logs
        self.cloudwatch = cloudwatch
        self._groups: set[str] = set()
        self._lock = threading.Lock()

    def ship(self, function_name: str, output: str) -> None:
        lines = [line for line in output.splitlines() if line.strip()]
        if not lines:
            return
        group = f"/aws/lambda/{function_name}"
        with self._lock:
            if group not in self._groups:
                # The stack creates the function's log group (with its retention).
                with suppress(self.logs.exceptions.ResourceAlreadyExistsException):
                    self.logs.create_log_group(logGroupName=group)
                with suppress(self.logs.exceptions.ResourceAlreadyExistsException):
                    self.logs.create_log_stream(logGroupName=group, logStreamName="twin")
                self._groups.add(group)
        now = int(time.time() * 1000)
        self.logs.put_log_events(
            logGroupName=group,
            logStreamName="twin",
            logEvents=[{"timestamp": now, "message": line} for line in lines],
        )
        by_namespace: dict[str, list[dict[str, Any]]] = {}
        for line in lines:
            for point in emf_metrics(line):
                by_namespace.setdefault(point.pop("Namespace"), []).append(point)
        for namespace, data in by_namespace.items():
            for start in range(0, len(data), 500):
                self.cloudwatch.put_metric_data(
                    Namespace=namespace, MetricData=data[start : start + 500]
                )
