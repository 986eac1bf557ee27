"""boto3 clients, created lazily and once per sandbox (nothing connects at import), the
init check that the Lambda runtime's botocore knows every operation a function calls, and
what a call fails with (`AWS_ERRORS`). The SDK is imported here, in the adapters
(`hyperguard.store`, `hyperguard.cluster`) and in the forwarder only: the rest of the
service catches AWS's refusals by these names (an import contract keeps it so).

boto3 honours AWS_ENDPOINT_URL, which is how the local twin points every client at the
emulator without the code knowing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from functools import cache
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError as ClientError  # re-exported: caught by that name

from hyperguard.concurrency import CONNECTIONS
from hyperguard.observability import NAMESPACE, MetricUnit, logger, single_metric

_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},  # retries after the first: 6 tries in all
    connect_timeout=2,
    read_timeout=10,
    max_pool_connections=CONNECTIONS,  # calls issued together keep their connections
)
_ONE_TRY = _CONFIG.merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))
"""For a call on every request's path that has its own answer to a failure (the API's rate
limits): a retry with backoff would hold the request, and a throttle there is the answer."""


AWS_ERRORS: tuple[type[Exception], ...] = (ClientError, BotoCoreError)
"""What a call through the SDK fails with: AWS's answer (ClientError, its code in
`response["Error"]["Code"]`) or the SDK's own failure before one (BotoCoreError: no
connection, a timeout, retries spent)."""


class MissingOperationError(RuntimeError):
    """The Lambda runtime's botocore does not know an operation the function calls."""


_SESSIONS = threading.Lock()


@cache
def _data_loader(data_path: str | None) -> Any:
    from botocore.loaders import create_loader

    return create_loader(data_path)


def new_session() -> Any:
    """A boto3 session for one client (a session is not safe to share between threads),
    with botocore's data loader shared by every session of the process that reads the same
    AWS_DATA_PATH: each service model, the endpoints and the retry rules are parsed once per
    process instead of once per client (parsing SageMaker's model alone takes a fraction of a
    second). Credentials and configuration stay each session's own. Responses are parsed
    by hyperguard.aws.responses (DynamoDB's attribute values read directly: the same result as
    botocore's shape walk at a fifth of its CPU)."""
    import boto3
    import botocore.session

    from hyperguard.aws.responses import ResponseParsers

    with _SESSIONS:
        core = botocore.session.Session()
        loader = _data_loader(core.get_config_variable("data_path"))
        core.register_component("data_loader", loader)
        core.register_component("response_parser_factory", ResponseParsers())
        session = boto3.session.Session(botocore_session=core)
        paths = loader.search_paths
        paths[:] = dict.fromkeys(paths)  # boto3 adds its own data folder for every session
        return session


@cache
def client(service: str) -> Any:
    return new_session().client(service, config=_CONFIG)


@cache
def _dynamodb(retry: bool) -> Any:
    return new_session().resource("dynamodb", config=_CONFIG if retry else _ONE_TRY)


@cache
def dynamodb_table(name: str, *, retry: bool = True) -> Any:
    """The table `name`; `retry=False`: each call tried once (`_ONE_TRY`). Every table of a
    retry mode shares one resource, and so one client (clients are thread-safe): a function
    that reads five tables makes one client, not five (about 40 ms each on this project's
    machine), and the store's bulk reads one low-level client beside it (D173)."""
    return _dynamodb(retry).Table(name)


def forget_clients() -> None:
    """Drop every client and table made so far: the next ones read the environment again
    (the twin and the tests point AWS_ENDPOINT_URL elsewhere)."""
    client.cache_clear()
    _dynamodb.cache_clear()
    dynamodb_table.cache_clear()


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
