"""Pure pieces of the twin: retargeting recorded events, EMF parsing, substitutions."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.conftest import EVENTS, load_event

from hyperguard.events import classify
from hyperguard_twin import workdirs
from hyperguard_twin.inject import InjectError, put_entry, retarget
from hyperguard_twin.lambda_layer import LAYER_PACKAGE_PREFIX
from hyperguard_twin.moto_gaps.cloudformation import substitute
from hyperguard_twin.plane import processes
from hyperguard_twin.telemetry import emf_metrics

TARGET = "i-0fedcba9876543210"
FIXTURES = sorted(p.stem for p in EVENTS.glob("*.json"))


@pytest.mark.parametrize("name", FIXTURES)
def test_retargeted_events_classify_to_the_new_instance_only(name: str) -> None:
    original = load_event(name)
    moved = retarget(original, TARGET, "twin-cluster")
    signals = [s for s in classify(moved) if s.instance_id is not None]
    assert signals, name
    assert {s.instance_id for s in signals} == {TARGET}
    assert all(s.cluster in (None, "twin-cluster") for s in signals)
    assert load_event(name) == original  # the recorded event is not touched
    text = json.dumps(moved)
    for old in (
        "i-12345678abcdefghi",
        "i-1234567890abcdef0",
        "i-0b662ef9931388ba0",
        "i-0391f86fa0fe0d465",
    ):
        assert old not in text
    # structured names only; free-text descriptions keep what they said
    assert '"sample-cluster"' not in text and 'cluster/sample-cluster"' not in text


def test_retarget_without_cluster_keeps_it() -> None:
    moved = retarget(load_event("hyperpod-node-health-unhealthy"), TARGET)
    assert moved["detail"]["ClusterName"] == "sample-cluster"
    assert moved["detail"]["InstanceId"] == TARGET


def test_put_entry_routes_forwarder_events_to_the_service_bus() -> None:
    aws_entry = put_entry(load_event("ec2-spot-interruption-warning"), "svc-bus")
    assert aws_entry["EventBusName"] == "default" and aws_entry["Source"] == "aws.ec2"
    forwarded = {
        "source": "hyperguard.node-forwarder",
        "detail-type": "Kubernetes Node Condition Changed",
        "detail": {},
    }
    assert put_entry(forwarded, "svc-bus")["EventBusName"] == "svc-bus"
    with pytest.raises(InjectError, match="detail-type"):
        put_entry({"source": "aws.ec2", "detail": {}}, "svc-bus")
    with pytest.raises(InjectError):
        retarget({"source": "x"}, TARGET)


def test_emf_lines_become_metric_points() -> None:
    line = json.dumps(
        {
            "_aws": {
                "Timestamp": 1,
                "CloudWatchMetrics": [
                    {
                        "Namespace": "HyperGuard",
                        "Dimensions": [["service"]],
                        "Metrics": [{"Name": "Signals_opened", "Unit": "Count"}],
                    }
                ],
            },
            "service": "hyperguard",
            "Signals_opened": [1.0, 1.0],
        }
    )
    points = emf_metrics(line)
    assert len(points) == 2
    assert points[0] == {
        "Namespace": "HyperGuard",
        "MetricName": "Signals_opened",
        "Dimensions": [{"Name": "service", "Value": "hyperguard"}],
        "Value": 1.0,
        "Unit": "Count",
    }
    assert emf_metrics('{"level": "INFO"}') == [] and emf_metrics("plain text") == []


def test_substitute_replaces_every_placeholder() -> None:
    definition = '{"A": "${FnArn}", "B": "${FnArn}", "C": "${Other}"}'
    out = substitute(definition, {"FnArn": "arn:x", "Other": 3})
    assert json.loads(out) == {"A": "arn:x", "B": "arn:x", "C": "3"}


@pytest.mark.parametrize("prefix", [processes.WORKDIR_PREFIX, LAYER_PACKAGE_PREFIX])
def test_a_killed_twins_folder_is_removed_by_the_next_twin_and_a_live_ones_stays(
    tmp_path: Path, prefix: str
) -> None:
    """A plane's folder (etcd's data, the logs) and a layer's copy, in the twin's cache."""
    dead = subprocess.Popen(["true"])  # a process that has exited, as a killed one has
    dead.wait()
    folders = {}
    for name, owner in (("killed", str(dead.pid)), ("live", str(os.getpid())), ("new", None)):
        folder = tmp_path / f"{prefix}{name}"
        (folder / "etcd").mkdir(parents=True)
        if owner is not None:
            (folder / workdirs.OWNER_FILE).write_text(owner)
        folders[name] = folder
    other = tmp_path / "layer-deps-0123"  # a cache entry, owned by no one
    other.mkdir()
    made = workdirs.owned_workdir(prefix, tmp_path)
    assert made.name.startswith(prefix) and (made / workdirs.OWNER_FILE).exists()
    assert not folders["killed"].exists()
    assert folders["live"].exists() and folders["new"].exists() and other.exists()
