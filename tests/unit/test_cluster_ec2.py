"""EC2 adapter: moto for RebootInstances (it implements the call and its NotFound error),
botocore's Stubber for the error codes moto does not produce."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from hyperguard.cluster.ec2 import Ec2Adapter

REGION = "us-west-2"
UNKNOWN = "i-0000000000000dead"


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


class Recorded(list[dict[str, Any]]):
    """The parameters of every RebootInstances call a client makes."""

    def __call__(self, params: dict[str, Any], **_: Any) -> None:
        self.append(dict(params))


MotoEc2 = tuple[Any, list[str], Recorded]
"""A moto EC2 client, its running instances' ids, and its reboots."""


@contextmanager
def moto_ec2(count: int) -> Iterator[MotoEc2]:
    """A moto EC2 client with `count` running instances, and a record of its reboots."""
    with mock_aws():
        client = boto3.client("ec2", region_name=REGION)
        reservation = client.run_instances(
            ImageId="ami-12c6146b", InstanceType="p5.48xlarge", MinCount=count, MaxCount=count
        )
        ids = [i["InstanceId"] for i in reservation["Instances"]]
        calls = Recorded()
        client.meta.events.register("provide-client-params.ec2.RebootInstances", calls)
        yield client, ids, calls


@pytest.fixture
def ec2() -> Iterator[MotoEc2]:
    with moto_ec2(2) as ec2:
        yield ec2


def test_reboots_each_instance_once(ec2: MotoEc2) -> None:
    client, (a, b), calls = ec2

    outcome = Ec2Adapter(client=client).reboot([a, b, a])

    assert outcome.successful == [a, b]
    assert outcome.failed == []
    assert calls == [{"InstanceIds": [a]}, {"InstanceIds": [b]}]


def test_an_unknown_instance_fails_alone_with_instance_id_not_found(ec2: MotoEc2) -> None:
    client, (a, _), calls = ec2

    outcome = Ec2Adapter(client=client).reboot([UNKNOWN, a])

    assert outcome.successful == [a]
    (failure,) = outcome.failed
    assert (failure.node_id, failure.error_code) == (UNKNOWN, "InstanceIdNotFound")
    assert UNKNOWN in failure.message
    assert calls == [{"InstanceIds": [UNKNOWN]}, {"InstanceIds": [a]}]


@pytest.mark.parametrize(
    ("ec2_code", "error_code"),
    [
        ("InvalidInstanceID.Malformed", "InstanceIdNotFound"),
        ("IncorrectInstanceState", "InvalidInstanceStatus"),
        ("RequestLimitExceeded", "RequestLimitExceeded"),
        ("UnauthorizedOperation", "UnauthorizedOperation"),
    ],
)
def test_ec2_errors_map_onto_sagemakers_per_node_codes(ec2_code: str, error_code: str) -> None:
    client = boto3.client("ec2", region_name=REGION)
    with Stubber(client) as stubber:
        stubber.add_client_error(
            "reboot_instances",
            ec2_code,
            f"{ec2_code} for {UNKNOWN}",
            expected_params={"InstanceIds": [UNKNOWN]},
        )
        outcome = Ec2Adapter(client=client).reboot([UNKNOWN])
        stubber.assert_no_pending_responses()

    assert outcome.successful == []
    assert [(f.node_id, f.error_code) for f in outcome.failed] == [(UNKNOWN, error_code)]


def test_no_client_is_created_until_first_use(
    monkeypatch: pytest.MonkeyPatch, ec2: MotoEc2
) -> None:
    client, (a, _), calls = ec2
    created: list[Any] = []

    def factory(service: str) -> Any:
        created.append(client)
        return client

    monkeypatch.setattr("hyperguard.cluster.ec2.client", factory)
    adapter = Ec2Adapter()
    assert created == []
    assert adapter.reboot([a]).successful == [a]
    assert adapter.reboot([a]).successful == [a]
    assert created == [client]
    assert len(calls) == 2
