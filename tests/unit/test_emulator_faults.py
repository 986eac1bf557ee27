"""DynamoDB as the emulator serves it to the service's own SDK client: the errors it injects,
and requests applied to an item atomically; EC2's launches one at a time.

No network: botocore's `before-send` hands each signed request to the emulator's WSGI app
and its answer back to the client, so the client's real retry handler (standard mode, the
config in hyperguard.aws) decides what to retry and how often.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from tests.wsgi_client import wsgi_sender
from werkzeug.test import EnvironBuilder

from hyperguard import aws
from hyperguard_twin.emulator import Emulator

TABLE = "incidents"


class FakeMoto:
    """Stands in for moto: counts what reaches it and answers an empty success."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        self.calls += 1
        start_response("200 OK", [("Content-Type", "application/x-amz-json-1.0")])
        return [b"{}"]


@pytest.fixture
def emulator() -> Emulator:
    return Emulator()


@pytest.fixture
def moto() -> FakeMoto:
    return FakeMoto()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The SDK's back-off between attempts, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr("botocore.endpoint.time.sleep", slept.append)
    return slept


@pytest.fixture
def ddb(monkeypatch: pytest.MonkeyPatch, emulator: Emulator, moto: FakeMoto) -> Iterator[Any]:
    """The client the handlers use (hyperguard.aws), talking to the emulator's app."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIDRECOVERY",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://emulator.invalid:4566",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    aws.client.cache_clear()
    client = aws.client("dynamodb")
    client.meta.events.register("before-send.dynamodb", wsgi_sender(emulator._wrap(moto)))
    yield client
    aws.client.cache_clear()


def update(ddb: Any, table: str = TABLE) -> Any:
    return ddb.update_item(
        TableName=table,
        Key={"incident_id": {"S": "i-1"}, "sk": {"S": "META"}},
        UpdateExpression="SET #s = :s",
        ConditionExpression="attribute_exists(incident_id)",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "detected"}},
    )


def test_a_throttle_is_answered_as_dynamodb_does_and_the_sdk_tries_six_times(
    ddb: Any, emulator: Emulator, moto: FakeMoto, sleeps: list[float]
) -> None:
    """Standard retry mode with `max_attempts: 5` (botocore counts retries there): one
    attempt and five retries, so six throttles in a row reach the caller."""
    emulator.faults.inject("dynamodb:UpdateItem", "ProvisionedThroughputExceededException", 6)
    with pytest.raises(ClientError) as raised:
        update(ddb)
    error = raised.value.response
    assert error["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["ResponseMetadata"]["MaxAttemptsReached"] is True
    assert len(sleeps) == 5 and moto.calls == 0
    throttled = ("dynamodb:UpdateItem", "ProvisionedThroughputExceededException")
    assert emulator.faults.answered == {throttled: 6}
    assert emulator.faults.pending == 0
    assert emulator.calls[("AKIDRECOVERY", "dynamodb:UpdateItem")] == 6


def test_five_throttles_are_absorbed_by_the_sdk(
    ddb: Any, emulator: Emulator, moto: FakeMoto, sleeps: list[float]
) -> None:
    emulator.faults.inject("dynamodb:UpdateItem", "ThrottlingException", 5)
    update(ddb)
    assert (len(sleeps), moto.calls) == (5, 1)
    assert emulator.faults.pending == 0


def test_a_conditional_check_failure_is_not_retried(
    ddb: Any, emulator: Emulator, moto: FakeMoto, sleeps: list[float]
) -> None:
    emulator.faults.inject("dynamodb:UpdateItem", "ConditionalCheckFailedException")
    with pytest.raises(ClientError) as raised:
        update(ddb)
    assert raised.value.response["Error"] == {
        "Code": "ConditionalCheckFailedException",
        "Message": "The conditional request failed",
    }
    assert sleeps == [] and moto.calls == 0
    update(ddb)  # the fault is spent: the next call reaches moto
    assert moto.calls == 1


def test_a_transaction_is_cancelled_by_its_first_conditional_item(
    ddb: Any, emulator: Emulator
) -> None:
    emulator.faults.inject("dynamodb:TransactWriteItems", "ConditionalCheckFailedException")
    with pytest.raises(ClientError) as raised:
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": {"incident_id": {"S": "i-1"}}}},
                {
                    "Update": {
                        "TableName": "nodes",
                        "Key": {"instance_id": {"S": "i-1"}},
                        "UpdateExpression": "REMOVE open_incident_id",
                        "ConditionExpression": "open_incident_id = :id",
                        "ExpressionAttributeValues": {":id": {"S": "x"}},
                    }
                },
            ]
        )
    response = raised.value.response
    assert response["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in response["CancellationReasons"]] == [
        "None",
        "ConditionalCheckFailed",
    ]


def test_a_fault_applies_only_to_the_requests_it_matches(
    ddb: Any, emulator: Emulator, moto: FakeMoto
) -> None:
    seen: list[tuple[str, str]] = []

    def on_incidents(key: str, request: dict[str, Any]) -> bool:
        seen.append((key, request["TableName"]))
        return bool(request["TableName"] == TABLE)

    emulator.faults.inject("dynamodb:UpdateItem", "InternalServerError", 1, match=on_incidents)
    update(ddb, table="nodes")
    assert moto.calls == 1 and emulator.faults.pending == 1
    emulator.faults.inject("dynamodb:GetItem", "InternalServerError")  # another call: untouched
    update(ddb)  # 500, retried by the SDK: the second attempt reaches moto
    assert moto.calls == 2 and emulator.faults.pending == 1
    assert seen == [("AKIDRECOVERY", "nodes"), ("AKIDRECOVERY", TABLE)]


def test_only_dynamodb_errors_are_injected(emulator: Emulator) -> None:
    with pytest.raises(ValueError, match="DynamoDB errors only"):
        emulator.faults.inject("sqs:SendMessage", "ThrottlingException")
    with pytest.raises(ValueError, match="DynamoDB errors only"):
        emulator.faults.inject("dynamodb:PutItem", "ResourceNotFoundException")
    with pytest.raises(ValueError, match="at least 1"):
        emulator.faults.inject("dynamodb:PutItem", "ThrottlingException", 0)


def test_the_body_moto_reads_is_intact_after_a_match(emulator: Emulator) -> None:
    received: list[bytes] = []

    def moto(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        received.append(environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"])))
        start_response("200 OK", [])
        return [b"{}"]

    looked: list[dict[str, Any]] = []

    def look(_key: str, request: dict[str, Any]) -> bool:
        looked.append(request)
        return False

    emulator.faults.inject("dynamodb:PutItem", "ThrottlingException", match=look)
    body = json.dumps({"TableName": TABLE, "Item": {}}).encode()
    headers = [
        ("X-Amz-Target", "DynamoDB_20120810.PutItem"),
        (
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=AKID/20261122/us-east-1/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=0",
        ),
    ]
    environ = EnvironBuilder(path="/", method="POST", headers=headers, data=body).get_environ()
    list(emulator._wrap(moto)(environ, lambda *_: None))
    assert looked == [{"TableName": TABLE, "Item": {}}] and received == [body]


class CountingLock:
    """A lock that tells how many threads wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting = 0

    def __enter__(self) -> None:
        self.waiting += 1
        self._lock.acquire()
        self.waiting -= 1

    def __exit__(self, *_: object) -> None:
        self._lock.release()


def held_until(other_done: threading.Event, lock: CountingLock, other: str) -> None:
    """A request held inside moto until the other request has either run beside it
    (`other_done`) or waits for the emulator's lock."""
    deadline = time.monotonic() + 10
    while not (other_done.is_set() or lock.waiting):
        assert time.monotonic() < deadline, f"{other} neither ran nor waited"
        time.sleep(0.001)


def through_moto(
    monkeypatch: pytest.MonkeyPatch, emulator: Emulator, service: str, key: str
) -> tuple[Any, CountingLock]:
    """The service's SDK client, as signed by the access key `key`, answered by the
    emulator's app in front of moto itself; and a counting lock in place of the emulator's
    lock for the service, which serves its requests one at a time."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    for name, value in {
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://emulator.invalid:4566",
    }.items():
        monkeypatch.setenv(name, value)
    aws.client.cache_clear()
    client = aws.client(service)
    app = emulator._wrap(DomainDispatcherApplication(create_backend_app))
    client.meta.events.register(f"before-send.{service}", wsgi_sender(app))
    assert service in emulator._one_at_a_time
    lock = CountingLock()
    monkeypatch.setitem(emulator._one_at_a_time, service, lock)
    return client, lock


def test_a_scan_never_sees_an_update_half_applied(
    monkeypatch: pytest.MonkeyPatch, emulator: Emulator
) -> None:
    """moto stores an UpdateItem's new key bare, then sets its attributes: a Scan in between
    read `{"instance_id": ...}` alone (a CI run failed on exactly that). DynamoDB applies a
    request to an item atomically, and so must the emulator. The update is held once the bare
    key is stored (by moto's update or the emulator's own, D203) until the scan has either
    finished (the torn read) or waits for the update to end."""
    from moto.dynamodb.models.table import Table

    ddb, lock = through_moto(monkeypatch, emulator, "dynamodb", "AKIDINVENTORY")
    table = f"nodes-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "instance_id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "instance_id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    updating, scanned = threading.Event(), threading.Event()
    put_item = Table.put_item

    def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        stored = put_item(self, *args, **kwargs)
        updating.set()
        held_until(scanned, lock, "the scan")
        return stored

    monkeypatch.setattr(Table, "put_item", held)
    writer = threading.Thread(
        target=ddb.update_item,
        kwargs={
            "TableName": table,
            "Key": {"instance_id": {"S": "i-1"}},
            "UpdateExpression": "SET in_pool = :p",
            "ExpressionAttributeValues": {":p": {"S": "hyperpod"}},
        },
    )
    writer.start()
    try:
        assert updating.wait(10)
        items = ddb.scan(TableName=table)["Items"]
        scanned.set()
    finally:
        writer.join()
        ddb.delete_table(TableName=table)
        aws.client.cache_clear()
    assert items == [{"instance_id": {"S": "i-1"}, "in_pool": {"S": "hyperpod"}}]


def test_two_launches_at_once_are_served_one_after_the_other(
    monkeypatch: pytest.MonkeyPatch, emulator: Emulator
) -> None:
    """Karpenter launches a burst's instances concurrently. moto's RunInstances takes each
    instance's private IP from its subnet's generator, and two at once failed one with
    `ValueError: generator already executing` (an error 500 where EC2 launches both): so the
    emulator serves EC2 one request at a time. The first launch is held inside moto, after its
    subnet gave it an IP, until the second has either run beside it or waits for it."""
    from moto.ec2.models.subnets import Subnet

    ec2, lock = through_moto(monkeypatch, emulator, "ec2", "AKIDKARPENTER")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]  # as Karpenter launches
    launching, second_done = threading.Event(), threading.Event()
    take_ip = Subnet.get_available_subnet_ip
    inside: list[int] = [0, 0]  # launches in moto now, and the most at once

    def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        inside[0] += 1
        inside[1] = max(inside)
        try:
            ip = take_ip(self, *args, **kwargs)
            if not launching.is_set():
                launching.set()
                held_until(second_done, lock, "the second launch")
            return ip
        finally:
            inside[0] -= 1

    monkeypatch.setattr(Subnet, "get_available_subnet_ip", held)
    launched: list[dict[str, Any]] = []

    def launch() -> None:
        launched.append(ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnet))

    first = threading.Thread(target=launch)
    first.start()
    try:
        assert launching.wait(10)
        launch()
        second_done.set()
    finally:
        first.join()
        aws.client.cache_clear()
    assert inside[1] == 1  # the second waited for the first, never in moto beside it
    ips = [r["Instances"][0]["PrivateIpAddress"] for r in launched]
    assert len(set(ips)) == 2, ips
