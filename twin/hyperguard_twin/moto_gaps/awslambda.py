"""Lambda: moto runs function code only in Docker. `LambdaFunction._invoke_lambda` is routed
to the twin's Lambda runtime (worker processes; so Step Functions' lambda:invoke tasks run
the real handlers), and an error of the Lambda service there (a throttle) is the Invoke
API's error, as on AWS. SQS event source mappings are the twin's poller's to deliver."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Invoker = Callable[[str, Any], tuple[str, bool, str]]

_invoker: Invoker | None = None


def route_invocations(invoker: Invoker) -> None:
    """Every invocation moto makes, by `invoker` from now on."""
    global _invoker
    from moto.awslambda.models import LambdaFunction
    from moto.core.exceptions import JsonRESTError

    from hyperguard_twin.lambda_runtime import LambdaServiceError

    _invoker = invoker

    def invoke_in_worker(self: Any, event: Any = None) -> tuple[str, bool, str]:
        if _invoker is None:
            raise RuntimeError("no Lambda runtime is installed")
        try:
            return _invoker(self.function_name, event)
        except LambdaServiceError as exc:
            error = JsonRESTError(exc.code, exc.message)
            error.code = exc.status
            raise error from exc

    LambdaFunction._invoke_lambda = invoke_in_worker  # type: ignore[method-assign]


def detach_inline_sqs_triggers() -> int:
    """Stop moto from invoking functions inline on SendMessage; the twin's poller delivers."""
    from moto.sqs.models import sqs_backends

    detached = 0
    backend: Any
    for _account, _region, backend in sqs_backends.iter_backends():
        for queue in backend.queues.values():
            detached += len(queue.lambda_event_source_mappings)
            queue.lambda_event_source_mappings.clear()
    return detached
