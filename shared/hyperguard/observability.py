"""Logger, Tracer and Metrics for every handler, configured in one place.

Handlers decorate in one order: inject_lambda_context → log_metrics → capture_lambda_handler.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric

__all__ = ["NAMESPACE", "SERVICE", "MetricUnit", "logger", "metrics", "single_metric", "tracer"]

SERVICE = "hyperguard"
NAMESPACE = "HyperGuard"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(service=SERVICE, namespace=NAMESPACE)
