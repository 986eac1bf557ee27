"""The instance catalogue, read from EC2 DescribeInstanceTypes and kept for the sandbox's life.

Instance types do not change under a running function, so each is read once per sandbox;
an instance type EC2 does not know is remembered as unknown too, so a bad quota retried in a
loop costs one call. DescribeInstanceTypes answers an unknown name with
InvalidInstanceType naming it in the message only; names are therefore asked one call per
batch of known-good names and, on that error, one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from hyperguard.aws import client
from hyperguard.catalogue import InstanceSpec, UnknownInstanceTypeError, ec2_name, spec_of
from hyperguard.cluster.gateway import ClusterError

PAGE = 100  # DescribeInstanceTypes: at most 100 InstanceTypes per request
INVALID_INSTANCE_TYPE = "InvalidInstanceType"


class Ec2InstanceCatalogue:
    def __init__(self, ec2: Any | None = None) -> None:
        self._ec2 = ec2
        self._specs: dict[str, InstanceSpec | None] = {}
        self._lock = threading.Lock()

    @property
    def ec2(self) -> Any:
        if self._ec2 is None:
            self._ec2 = client("ec2")
        return self._ec2

    def spec(self, instance_type: str) -> InstanceSpec:
        name = ec2_name(instance_type)
        if name not in self._specs:
            self.prefetch([name])
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownInstanceTypeError(instance_type)
        return spec

    def prefetch(self, instance_types: Iterable[str]) -> None:
        """Read every name not read yet, in as few calls as EC2 allows."""
        with self._lock:
            wanted = sorted({ec2_name(t) for t in instance_types} - self._specs.keys())
            for start in range(0, len(wanted), PAGE):
                self._read(wanted[start : start + PAGE])

    def _read(self, names: list[str]) -> None:
        try:
            response = self.ec2.describe_instance_types(InstanceTypes=names)
        except ClientError as error:
            if error.response["Error"]["Code"] != INVALID_INSTANCE_TYPE:
                raise ClusterError(f"DescribeInstanceTypes: {error}") from error
            if len(names) == 1:
                self._specs[names[0]] = None
                return
            for name in names:
                self._read([name])
            return
        except BotoCoreError as error:
            raise ClusterError(f"DescribeInstanceTypes: {error}") from error
        for info in response.get("InstanceTypes", []):
            self._specs[info["InstanceType"]] = spec_of(info)
        for name in names:
            self._specs.setdefault(name, None)
