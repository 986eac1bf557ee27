"""What an instance type has — accelerators, vCPUs, memory — one answer for quotas,
placement and the cluster adapters.

The figures are EC2's: `hyperguard.cluster.catalogue` reads them with DescribeInstanceTypes,
so a new instance type needs no code change. SageMaker HyperPod names an instance type with
an `ml.` prefix on the EC2 name of the same hardware (`ml.p5.48xlarge` is a `p5.48xlarge`);
quotas use HyperPod's spelling, EKS nodes report the EC2 one. Accelerators are what a
Kubernetes pod requests as `nvidia.com/gpu` or `aws.amazon.com/neuron`: GPUs (EC2 GpuInfo) or
Neuron devices (NeuronInfo).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Protocol

ML_PREFIX = "ml."
INSTANCE_TYPE_PATTERN = r"^(ml\.)?[a-z0-9-]{1,24}\.[a-z0-9-]{1,24}$"
"""An instance type in either spelling (`ml.p5.48xlarge`, `p5.48xlarge`): what an API field
naming one accepts, so that no control character or markup reaches EC2 in a request."""


class InstanceSpec(NamedTuple):
    accelerators: int
    vcpu: int
    memory_mib: int
    efa_interfaces: int = 0
    """Elastic Fabric Adapter interfaces (EC2 NetworkInfo.EfaInfo.MaximumEfaInterfaces): what a
    pod requests as `vpc.amazonaws.com/efa` (the EFA device plugin's resource)."""

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024


class UnknownInstanceTypeError(KeyError):
    """EC2 does not know the instance type (nor, for an `ml.` name, its EC2 counterpart)."""

    def __init__(self, instance_type: str) -> None:
        super().__init__(instance_type)
        self.instance_type = instance_type

    def __str__(self) -> str:
        return f"unknown instance type {self.instance_type!r}"


class InstanceCatalogue(Protocol):
    def spec(self, instance_type: str) -> InstanceSpec:
        """The instance type's figures (either spelling); UnknownInstanceTypeError if none."""
        ...


def ec2_name(instance_type: str) -> str:
    return instance_type.removeprefix(ML_PREFIX)


def ml_name(instance_type: str) -> str:
    """HyperPod's spelling, the name quotas and the scheduler count capacity under."""
    return instance_type if instance_type.startswith(ML_PREFIX) else ML_PREFIX + instance_type


def spec_of(info: Mapping[str, Any]) -> InstanceSpec:
    """An InstanceSpec from one InstanceTypeInfo of DescribeInstanceTypes."""
    gpus = sum(int(g.get("Count", 0)) for g in info.get("GpuInfo", {}).get("Gpus", []))
    neuron = sum(
        int(d.get("Count", 0)) for d in info.get("NeuronInfo", {}).get("NeuronDevices", [])
    )
    return InstanceSpec(
        accelerators=gpus + neuron,
        vcpu=int(info["VCpuInfo"]["DefaultVCpus"]),
        memory_mib=int(info["MemoryInfo"]["SizeInMiB"]),
        efa_interfaces=int(
            ((info.get("NetworkInfo") or {}).get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)
        ),
    )


class StaticCatalogue:
    """A catalogue that already holds every answer (tests, benchmarks, a prefetched EC2 read)."""

    def __init__(self, specs: Mapping[str, InstanceSpec]) -> None:
        self._specs = {ec2_name(name): spec for name, spec in specs.items()}

    @classmethod
    def from_instance_types(cls, infos: Iterable[Mapping[str, Any]]) -> StaticCatalogue:
        """From DescribeInstanceTypes' InstanceTypes entries."""
        return cls({info["InstanceType"]: spec_of(info) for info in infos})

    def spec(self, instance_type: str) -> InstanceSpec:
        try:
            return self._specs[ec2_name(instance_type)]
        except KeyError:
            raise UnknownInstanceTypeError(instance_type) from None
