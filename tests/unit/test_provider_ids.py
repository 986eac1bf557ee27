"""Kubernetes providerIDs of both AWS forms parsed exactly, anything else refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hyperguard.cluster.conventions import UNKNOWN_PROVIDER_ID_METRIC, instance_id_from_provider_id
from hyperguard.observability import metrics
from hyperguard.provider_ids import (
    ProviderId,
    ProviderIdForm,
    eks_provider_id,
    hyperpod_provider_id,
    parse_provider_id,
)

INSTANCE = "i-0123456789abcdef0"

instance_ids = st.from_regex(r"i-[0-9a-f]{8}([0-9a-f]{9})?", fullmatch=True)
zones = st.sampled_from(["us-west-2b", "us-east-1a", "use1-az4", "usw2-az3", "us-gov-west-1a"])
cluster_ids = st.from_regex(r"[a-z0-9]{12}", fullmatch=True)


def test_hyperpods_form_names_its_cluster_and_instance() -> None:
    provider_id = "aws:///us-west-2b/sagemaker/cluster/hyperpod-abc123xyz0-i-0123456789abcdef0"
    assert parse_provider_id(provider_id) == ProviderId(
        ProviderIdForm.HYPERPOD, "us-west-2b", INSTANCE, "abc123xyz0"
    )
    assert instance_id_from_provider_id(provider_id) == INSTANCE


def test_eks_form_names_its_instance() -> None:
    parsed = parse_provider_id(f"aws:///us-west-2a/{INSTANCE}")
    assert parsed == ProviderId(ProviderIdForm.EKS, "us-west-2a", INSTANCE, None)


@pytest.mark.parametrize(
    "provider_id",
    [
        "aws:///us-west-2a/",
        "aws://us-west-2a/i-0123456789abcdef0",  # two slashes: no empty host
        "aws:///us-west-2a/i-0123456789abcdef0/",
        "aws:///us-west-2a/i-0123456789ABCDEF0",  # EC2 ids are lowercase hex
        "aws:///us-west-2a/i-0123456789",  # neither 8 nor 17 digits
        "aws:///us-west-2a/sagemaker/cluster/i-0123456789abcdef0",  # no hyperpod-<cluster>-
        "aws:///us-west-2a/sagemaker/cluster/hyperpod-i-0123456789abcdef0",
        "aws:///us-west-2a/sagemaker/other/hyperpod-abc-i-0123456789abcdef0",
        "aws:///us-west-2a/fargate-ip-10-0-0-1.ec2.internal",
        "kind://docker/kind/node-1",
        "gce://project/us-central1-a/node-1",
        "",
    ],
)
def test_other_strings_are_not_guessed(provider_id: str) -> None:
    assert parse_provider_id(provider_id) is None


def test_an_unknown_form_is_counted_once_per_reading() -> None:
    metrics.clear_metrics()
    assert instance_id_from_provider_id("aws:///us-west-2a/x/i-0123456789abcdef0") is None
    assert instance_id_from_provider_id("gce://p/z/n", holder="node n") is None
    assert metrics.metric_set[UNKNOWN_PROVIDER_ID_METRIC]["Value"] == [1.0, 1.0]
    metrics.clear_metrics()


def test_no_provider_id_yet_is_not_counted() -> None:
    """A NodeClaim before launch (or a node before its kubelet sets it) has none."""
    metrics.clear_metrics()
    assert instance_id_from_provider_id(None) is None
    assert instance_id_from_provider_id("") is None
    assert UNKNOWN_PROVIDER_ID_METRIC not in metrics.metric_set


@given(zone=zones, cluster=cluster_ids, instance=instance_ids)
def test_hyperpod_form_round_trips(zone: str, cluster: str, instance: str) -> None:
    parsed = parse_provider_id(hyperpod_provider_id(zone, cluster, instance))
    assert parsed == ProviderId(ProviderIdForm.HYPERPOD, zone, instance, cluster)


@given(zone=zones, instance=instance_ids)
def test_eks_form_round_trips(zone: str, instance: str) -> None:
    assert parse_provider_id(eks_provider_id(zone, instance)) == ProviderId(
        ProviderIdForm.EKS, zone, instance, None
    )


@given(text=st.text(max_size=120))
def test_any_string_parses_to_a_well_formed_id_or_none(text: str) -> None:
    parsed = parse_provider_id(text)
    if parsed is not None:
        assert text.startswith("aws:///")
        assert text.endswith(parsed.instance_id)
