"""Shared fixtures: the AWS side comes from moto, built from template.yaml's own definitions."""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests import xdist_twins
from tests.one_writer import guarded

if TYPE_CHECKING:
    from hyperguard.catalogue import StaticCatalogue

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "tests" / "events"
FIXTURES = ROOT / "tests" / "fixtures"
REGION = "us-east-1"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """For `--dist loadgroup` (the Makefile's runs): the tests of a module that share a
    fixture wider than a test (an e2e module's twin, a module's API server) go to one worker
    together, so it is built once; every other test goes to whichever worker is free, so a
    long module of independent tests is spread over the workers instead of trailing on one.
    First among the hooks, as xdist's own reads the groups into the node ids (`name@group`);
    pyproject.toml keeps pytest below 9.2, whose node ids xdist 3.8 can no longer change
    (tests/unit/test_xdist_groups.py). Then the long units first (tests/xdist_twins.py)."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        definitions = info.name2fixturedefs.values() if info is not None else ()
        if any(d[-1].scope != "function" for d in definitions if d):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    xdist_twins.longest_first(items)


def pytest_addoption(parser: pytest.Parser) -> None:
    xdist_twins.pytest_addoption(parser)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--twins-at-once` (tests/xdist_twins.py); else xdist's own."""
    return xdist_twins.make_scheduler(config, log)


def load_event(name: str) -> dict[str, Any]:
    return dict(json.loads((EVENTS / f"{name}.json").read_text()))


SCHEDULER_TICK: dict[str, Any] = {
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2026-11-22T09:00:00Z",
    "region": REGION,
    "resources": [f"arn:aws:events:{REGION}:123456789012:rule/scheduler-tick"],
    "detail": {},
}
"""Constructed, not a published sample: EventBridge's scheduled event (SchedulerTickRule) as
it reaches the scheduler's queue."""


def catalogue() -> StaticCatalogue:
    """The instance catalogue from EC2's own figures (tests/fixtures)."""
    from hyperguard.catalogue import StaticCatalogue

    data = json.loads((FIXTURES / "ec2-describe-instance-types.json").read_text())
    return StaticCatalogue.from_instance_types(data["InstanceTypes"])


def template() -> dict[str, Any]:
    """template.yaml as CloudFormation reads it: a copy the caller may change, of one parse
    per process (parsing it is a tenth of a second, and every stack and template test asks)."""
    return copy.deepcopy(_parsed_template())


@functools.cache
def _parsed_template() -> dict[str, Any]:
    from hyperguard_twin.deploy import load_template

    return load_template(ROOT / "template.yaml")


@functools.cache
def _cache_moto_urls() -> None:
    """moto's in-process mock matches each request against its backend's URL patterns,
    which it rebuilds for every request (S3's by reloading moto.s3.urls: a module import per
    S3 call). The patterns are a backend class's constants: built once per class here."""
    from moto.core.base_backend import BaseBackend

    build = BaseBackend.urls.fget  # type: ignore[attr-defined]
    built: dict[type, Any] = {}

    def urls(self: BaseBackend) -> Any:
        kind = type(self)
        if kind not in built:
            built[kind] = build(self)
        return built[kind]

    BaseBackend.urls = property(urls)  # type: ignore[method-assign,assignment]


def _one_client_each(make: Any) -> Any:
    """`make` (a session's `client`), answering the same arguments with the same client
    (clients are thread-safe); unhashable arguments get a new one."""
    cached = functools.cache(make)

    def client(*args: Any, **kwargs: Any) -> Any:
        try:
            return cached(*args, **kwargs)
        except TypeError:  # an unhashable argument (a client's own TypeError is raised again)
            return make(*args, **kwargs)

    return client


def _one_request_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS applies each request atomically; moto's in-process backend is not thread-safe (a
    transaction deep-copies tables other threads are changing). So moto answers one request
    at a time, as the twin's emulator does: the service's calls issued together (D162)
    interleave between requests, as they would on AWS."""
    from moto.core.botocore_stubber import BotocoreStubber

    lock = threading.RLock()  # re-entered where moto calls AWS while it answers
    answer = BotocoreStubber.__call__

    def atomic(self: BotocoreStubber, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return answer(self, *args, **kwargs)

    monkeypatch.setattr(BotocoreStubber, "__call__", atomic)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from moto import mock_aws

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        # moto builds ~1,300 public AMIs into each EC2 region backend at its first call
        # (0.2 s a test); nothing here launches from an AMI.
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    _one_request_at_a_time(monkeypatch)
    from hyperguard import aws
    from hyperguard_twin import dynamodb
    from hyperguard_twin.moto_gaps.performance import install_jsonpath_cache

    dynamodb.install()  # the twin's emulator answers DynamoDB the same way
    install_jsonpath_cache()
    _cache_moto_urls()
    aws.forget_clients()
    with mock_aws():
        # moto swaps boto3's default session for a new one, whose model loader would parse
        # every service model again for the test's own clients (SageMaker's alone takes a
        # fraction of a second): the test's session shares the process's loader, as the
        # service's do, and hands the test one client per service and arguments (a client
        # takes 10-20 ms to make; the harnesses ask for one wherever they call AWS).
        import boto3

        session = aws.new_session()
        session.client = _one_client_each(session.client)
        boto3.DEFAULT_SESSION = session
        yield
    aws.forget_clients()


@dataclass
class Stack:
    tables: dict[str, str]
    bus_name: str
    topic_arn: str
    state_machine_arn: str
    queue_url: str

    def env(self) -> dict[str, str]:
        return {
            "INCIDENTS_TABLE": self.tables["IncidentsTable"],
            "NODES_TABLE": self.tables["NodesTable"],
            "JOBS_TABLE": self.tables["JobsTable"],
            "TEAMS_TABLE": self.tables["TeamsTable"],
            "IDEMPOTENCY_TABLE": self.tables["IdempotencyTable"],
            "EVENT_BUS_NAME": self.bus_name,
            "ESCALATION_TOPIC_ARN": self.topic_arn,
            "RECOVERY_STATE_MACHINE_ARN": self.state_machine_arn,
            "HYPERPOD_CLUSTER_NAME": "hyperguard-twin",
            "EKS_CLUSTER_NAME": "hyperguard-eks",
        }


@pytest.fixture
def stack(aws_env: None) -> Iterator[Stack]:
    """The template's tables (same keys and indexes), bus, topic, queue and a state machine.
    Every write to the jobs and incidents tables while the test runs must come from the
    state's one writer, conditionally (tests/one_writer.py)."""
    import boto3

    from hyperguard_twin.deploy import create_tables

    tables = create_tables(template(), boto3.client("dynamodb", region_name=REGION), "test-")
    events = boto3.client("events", region_name=REGION)
    events.create_event_bus(Name="test-bus")
    topic = boto3.client("sns", region_name=REGION).create_topic(Name="test-escalations")
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(
        name="test-recovery",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/test",
    )
    queue = boto3.client("sqs", region_name=REGION).create_queue(QueueName="test-health")
    with guarded(tables["JobsTable"], tables["IncidentsTable"]) as offences:
        yield Stack(
            tables,
            "test-bus",
            topic["TopicArn"],
            machine["stateMachineArn"],
            queue["QueueUrl"],
        )
    assert offences == [], "writes around the state's one writer (tests/one_writer.py)"
