"""boto3 clients, created lazily and once per sandbox (nothing connects at import), and the
init check that the Lambda runtime's botocore knows every operation a function calls.

boto3 honours AWS_ENDPOINT_URL, which is how the local twin points every client at the
emulator without the code knowing.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from botocore.config import Config

from hyperguard.observability import NAMESPACE, MetricUnit, logger, single_metric

_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5}, connect_timeout=2, read_timeout=10
)


class MissingOperationError(RuntimeError):
    """The Lambda runtime's botocore does not know an operation the function calls."""


@cache
def client(service: str) -> Any:
    import boto3

    return boto3.session.Session().client(service, config=_CONFIG)


@cache
def dynamodb_table(name: str) -> Any:
    import boto3

    return boto3.session.Session().resource("dynamodb", config=_CONFIG).Table(name)


def require_operations(service: str, operations: Iterable[str]) -> None:
    """Fail loudly, at init, when the runtime's botocore lacks one of `operations` (API
    names, e.g. BatchAddClusterNodes): a MissingAwsOperation metric, an error log, and
    MissingOperationError, rather than an AttributeError deep in a workflow. The layer does
    not ship botocore (shared/Makefile: the runtime provides it; D67). The check reads the
    model of the client the function will use (creating a client connects nowhere), so the
    model is loaded once, at init instead of at the first call."""
    import botocore

    known = set(client(service).meta.service_model.operation_names)
    missing = sorted(set(operations) - known)
    if not missing:
        return
    with single_metric(
        name="MissingAwsOperation",
        unit=MetricUnit.Count,
        value=len(missing),
        namespace=NAMESPACE,
    ) as metric:
        metric.add_dimension(name="service", value=service)
    message = (
        f"the Lambda runtime's botocore {botocore.__version__} has no {service} operation "
        f"{', '.join(missing)}: this function cannot run on it (deploy on a runtime with a "
        "newer boto3, or ship boto3 and botocore in the layer)"
    )
    logger.error(message, extra={"service": service, "missing": missing})
    raise MissingOperationError(message)
