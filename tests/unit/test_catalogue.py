"""The instance catalogue: EC2's figures, either spelling, read once per type."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from tests.conftest import FIXTURES, REGION, catalogue

from hyperguard.catalogue import InstanceSpec, StaticCatalogue, UnknownInstanceTypeError, ml_name
from hyperguard.cluster.catalogue import Ec2InstanceCatalogue


@pytest.mark.parametrize(
    ("instance_type", "spec"),
    [
        ("ml.p5.48xlarge", InstanceSpec(8, 192, 2_097_152, 32)),  # GpuInfo: 8 H100; 32 EFA
        ("p5.48xlarge", InstanceSpec(8, 192, 2_097_152, 32)),  # the EC2 spelling
        ("ml.g5.2xlarge", InstanceSpec(1, 8, 32_768)),
        ("ml.g6.12xlarge", InstanceSpec(4, 48, 196_608, 1)),
        ("ml.trn2.48xlarge", InstanceSpec(16, 192, 2_097_152, 16)),  # NeuronInfo: 16 devices
        ("ml.c5.2xlarge", InstanceSpec(0, 8, 16_384)),  # no accelerators
    ],
)
def test_specs_come_from_describe_instance_types(instance_type: str, spec: InstanceSpec) -> None:
    assert catalogue().spec(instance_type) == spec


def test_an_unknown_type_is_a_typed_error_naming_it() -> None:
    with pytest.raises(UnknownInstanceTypeError, match=r"ml\.x9\.huge"):
        StaticCatalogue({}).spec("ml.x9.huge")
    assert ml_name("p5.48xlarge") == ml_name("ml.p5.48xlarge") == "ml.p5.48xlarge"


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[list[str]]]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("ec2", region_name=REGION)
        calls: list[list[str]] = []
        client.meta.events.register(
            "provide-client-params.ec2.DescribeInstanceTypes",
            lambda params, **_: calls.append(list(params["InstanceTypes"])),
        )
        yield client, calls


def test_each_type_is_read_once_and_a_batch_is_one_call(ec2: tuple[Any, list[list[str]]]) -> None:
    client, calls = ec2
    ec2_catalogue = Ec2InstanceCatalogue(client)
    ec2_catalogue.prefetch(["ml.p5.48xlarge", "g5.12xlarge", "p5.48xlarge"])
    assert calls == [["g5.12xlarge", "p5.48xlarge"]]
    assert ec2_catalogue.spec("ml.g5.12xlarge").accelerators == 4
    assert ec2_catalogue.spec("p5.48xlarge").accelerators == 8
    assert len(calls) == 1


def test_an_unknown_type_in_a_batch_is_found_and_remembered(
    ec2: tuple[Any, list[list[str]]],
) -> None:
    client, calls = ec2
    ec2_catalogue = Ec2InstanceCatalogue(client)
    ec2_catalogue.prefetch(["p5.48xlarge", "x9.huge"])
    assert ec2_catalogue.spec("p5.48xlarge").vcpu == 192
    for _ in range(3):
        with pytest.raises(UnknownInstanceTypeError):
            ec2_catalogue.spec("ml.x9.huge")
    # the failed batch, then one by one; never again for the unknown one
    assert calls == [["p5.48xlarge", "x9.huge"], ["p5.48xlarge"], ["x9.huge"]]


def test_the_fixture_is_ec2s_own_output() -> None:
    data = json.loads((FIXTURES / "ec2-describe-instance-types.json").read_text())
    p5 = next(i for i in data["InstanceTypes"] if i["InstanceType"] == "p5.48xlarge")
    assert p5["GpuInfo"]["Gpus"][0]["Name"] == "H100"
