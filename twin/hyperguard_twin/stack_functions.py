"""The deployed stack's functions, run by the twin's Lambda runtime as Lambda runs them: each
with the configuration the stack gave it and its execution role's credentials, its output
shipped to CloudWatch Logs, and its SQS event source mappings polled."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from hyperguard_twin.config import ACCOUNT, REGION
from hyperguard_twin.deploy import Deployment
from hyperguard_twin.emulator import Emulator
from hyperguard_twin.lambda_layer import LayerPaths
from hyperguard_twin.lambda_runtime import FunctionSpec, LambdaRuntime
from hyperguard_twin.moto_gaps.awslambda import detach_inline_sqs_triggers
from hyperguard_twin.poller import SqsMapping, SqsPoller
from hyperguard_twin.telemetry import CloudWatchSink


class StackFunctions:
    def __init__(
        self,
        layer: LayerPaths,
        *,
        client: Callable[[str], Any],
        emulator: Emulator,
        max_concurrency: int,
    ) -> None:
        self._client = client
        self._emulator = emulator
        self.credential_owners: dict[str, str] = {}
        """Access key id → the function (logical id) that runs with it."""
        self.sink = CloudWatchSink(ACCOUNT, REGION)
        self.runtime = LambdaRuntime(
            layer,
            region=REGION,
            account=ACCOUNT,
            max_concurrency=max_concurrency,
            extra_env={"AWS_ENDPOINT_URL": emulator.endpoint},
            credentials=self._role_credentials,
            output_sink=self.sink.ship,
        )

    def register(self, deployment: Deployment) -> None:
        """Every function of the stack, as Lambda has it configured."""
        lam = self._client("lambda")
        for logical_id, fn in deployment.functions.items():
            configuration = lam.get_function_configuration(FunctionName=fn["name"])
            self.runtime.register(
                FunctionSpec(
                    name=fn["name"],
                    logical_id=logical_id,
                    code_dir=fn["code_dir"],
                    handler=fn["handler"],
                    # Lambda environment values are strings; moto keeps Number parameters as
                    # floats.
                    environment={
                        k: str(v)
                        for k, v in configuration.get("Environment", {})
                        .get("Variables", {})
                        .items()
                    },
                    timeout_s=float(fn["timeout"]),
                    memory_mb=int(fn["memory"]),
                    reserved_concurrency=fn["reserved_concurrency"],
                    role_arn=configuration["Role"],
                )
            )

    def sqs_poller(self) -> SqsPoller:
        """The Lambda service's poller for the stack's SQS event source mappings, which
        moto would otherwise deliver inline on SendMessage."""
        detach_inline_sqs_triggers()
        return SqsPoller(self._client("sqs"), self.runtime, self._sqs_mappings(), REGION)

    def _sqs_mappings(self) -> list[SqsMapping]:
        lam, sqs = self._client("lambda"), self._client("sqs")
        mappings = []
        for esm in lam.list_event_source_mappings()["EventSourceMappings"]:
            queue_arn = esm["EventSourceArn"]
            if ":sqs:" not in queue_arn:
                continue
            queue_name = queue_arn.rsplit(":", 1)[1]
            mappings.append(
                SqsMapping(
                    queue_url=sqs.get_queue_url(QueueName=queue_name)["QueueUrl"],
                    queue_arn=queue_arn,
                    function_name=esm["FunctionArn"].rsplit(":", 1)[1],
                    batch_size=int(esm.get("BatchSize", 10)),
                    report_batch_item_failures="ReportBatchItemFailures"
                    in esm.get("FunctionResponseTypes", []),
                )
            )
        return mappings

    def calls(self) -> Counter[tuple[str, str]]:
        """AWS API calls the functions made: (function logical id, "service:Operation")."""
        calls: Counter[tuple[str, str]] = Counter()
        for (key, operation), count in list(self._emulator.calls.items()):
            owner = self.credential_owners.get(key)
            if owner is not None:
                calls[(owner, operation)] += count
        return calls

    def _role_credentials(self, spec: FunctionSpec) -> dict[str, str]:
        """A function runs with its execution role's temporary credentials, as on Lambda."""
        credentials = self._client("sts").assume_role(
            RoleArn=spec.role_arn, RoleSessionName=spec.name[:64]
        )["Credentials"]
        self.credential_owners[credentials["AccessKeyId"]] = spec.logical_id
        self._emulator.iam.enforce(credentials["AccessKeyId"], spec.role_arn, spec.logical_id)
        return {
            "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
            "AWS_SESSION_TOKEN": credentials["SessionToken"],
        }

    def stop(self) -> None:
        """Stop the runtime, and deliver no output after it: moto's backends are
        process-global, and an invocation that ends late would write into whatever mock
        the process runs next."""
        self.runtime.stop()
        self.sink.close()
