"""Ingest benchmark: handler cost per record and AWS calls per outcome (moto, in-process),
and event-put → incident-detected latency on the twin.

    python bench/ingest.py [--nodes 64] [--skip-twin]

Prints one JSON object. The in-process part runs the real ingest handler on moto in
decorator mode (no network), so its times are this code's CPU cost plus moto's, an upper
bound on the handler's own share; the AWS call counts are exact.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EVENTS = ROOT / "tests" / "events"


def _calls_counter() -> Counter[str]:
    """Counts every botocore API call made in this process."""
    from botocore.client import BaseClient

    calls: Counter[str] = Counter()
    original = BaseClient._make_api_call

    def counting(self: Any, operation: str, params: Any) -> Any:
        calls[operation] += 1
        return original(self, operation, params)

    BaseClient._make_api_call = counting
    return calls


def _sqs_record(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": "rh",
        "body": json.dumps(body),
        "attributes": {},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
        "awsRegion": "us-east-1",
    }


def in_process(nodes: int) -> dict[str, Any]:
    os.environ.update(
        AWS_ACCESS_KEY_ID="b", AWS_SECRET_ACCESS_KEY="b", AWS_DEFAULT_REGION="us-east-1"
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    import boto3
    from moto import mock_aws

    from hyperguard.models import Node
    from hyperguard.store import NodeStore
    from hyperguard_twin.deploy import create_tables, load_template
    from hyperguard_twin.inject import retarget

    with mock_aws():
        tables = create_tables(
            load_template(ROOT / "template.yaml"), boto3.client("dynamodb"), "b-"
        )
        sfn = boto3.client("stepfunctions")
        machine = sfn.create_state_machine(
            name="b",
            roleArn="arn:aws:iam::123456789012:role/b",
            definition=json.dumps({"StartAt": "S", "States": {"S": {"Type": "Succeed"}}}),
        )
        env = {
            "INCIDENTS_TABLE": tables["IncidentsTable"],
            "NODES_TABLE": tables["NodesTable"],
            "JOBS_TABLE": tables["JobsTable"],
            "TEAMS_TABLE": tables["TeamsTable"],
            "IDEMPOTENCY_TABLE": tables["IdempotencyTable"],
            "EVENT_BUS_NAME": "default",
            "ESCALATION_TOPIC_ARN": boto3.client("sns").create_topic(Name="b")["TopicArn"],
            "RECOVERY_STATE_MACHINE_ARN": machine["stateMachineArn"],
            "HYPERPOD_CLUSTER_NAME": "bench",
            "EKS_CLUSTER_NAME": "bench-eks",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
            "POWERTOOLS_METRICS_DISABLED": "true",
        }
        os.environ.update(env)
        ids = [f"i-0{n:016x}" for n in range(nodes)]
        NodeStore(tables["NodesTable"]).upsert_inventory(
            [
                Node(
                    instance_id=i,
                    cluster="bench",
                    pool="w",
                    platform="hyperpod",
                    instance_type="ml.p5.48xlarge",
                )
                for i in ids
            ]
        )
        t0 = time.perf_counter()
        spec = importlib.util.spec_from_file_location(
            "bench_ingest_app", ROOT / "functions/ingest_health/app.py"
        )
        assert spec and spec.loader
        app = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(app)
        init_s = time.perf_counter() - t0
        calls = _calls_counter()
        ctx = SimpleNamespace(
            function_name="b",
            memory_limit_in_mb=512,
            aws_request_id="r",
            invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:b",
        )
        hp = json.loads((EVENTS / "hyperpod-node-health-unhealthy.json").read_text())
        health = json.loads((EVENTS / "aws-health-ec2-retirement.json").read_text())
        phases: dict[str, list[dict[str, Any]]] = {
            "opened": [dict(retarget(hp, i, "bench"), id=f"hp-{i}") for i in ids],
            "merged": [dict(retarget(health, i), id=f"health-{i}") for i in ids],
        }
        phases["duplicate"] = phases["opened"]
        result: dict[str, Any] = {"records_per_phase": nodes, "init_s": round(init_s, 4)}
        for phase, events in phases.items():
            calls.clear()
            per_record = []
            cpu0 = time.process_time()
            for start in range(0, len(events), 10):
                batch = [_sqs_record(e) for e in events[start : start + 10]]
                t = time.perf_counter()
                out = app.handler({"Records": batch}, ctx)
                per_record.append((time.perf_counter() - t) / len(batch))
                assert out == {"batchItemFailures": []}, out
            cpu = time.process_time() - cpu0
            result[phase] = {
                "ms_per_record_median": round(statistics.median(per_record) * 1000, 3),
                "cpu_ms_per_record": round(cpu / len(events) * 1000, 3),
                "aws_calls_per_record": round(sum(calls.values()) / len(events), 2),
                "calls": dict(sorted((k, round(v / len(events), 2)) for k, v in calls.items())),
            }
        result["outcomes"] = dict(app.ingestor.counts)
        return result


def on_twin(samples: int) -> dict[str, Any]:
    from hyperguard.store import IncidentStore
    from hyperguard_twin.config import TwinConfig
    from hyperguard_twin.inject import put_entry, retarget
    from hyperguard_twin.runtime import Twin

    t0 = time.perf_counter()
    twin = Twin(TwinConfig(root=ROOT, port=0, api_port=0))
    twin.up()
    up_s = time.perf_counter() - t0
    assert twin.deployment is not None
    out = twin.deployment.outputs
    store = IncidentStore(out["IncidentsTableName"], out["NodesTableName"])
    events = twin.client("events")
    hp = json.loads((EVENTS / "hyperpod-node-health-unhealthy.json").read_text())
    nodes = [i.instance_id for i in twin.cluster.instances() if i.platform == "hyperpod"][:samples]
    to_incident: list[float] = []
    to_detected: list[float] = []
    for instance in nodes:
        t = time.perf_counter()
        events.put_events(
            Entries=[
                put_entry(retarget(hp, instance, twin.config.cluster_name), out["EventBusName"])
            ]
        )
        opened: float | None = None
        while time.perf_counter() - t < 30:
            incident = store.open_incident_for(instance)
            if incident and opened is None:
                opened = time.perf_counter() - t
            if incident and incident.status.value == "detected":
                assert opened is not None  # set above, when the incident first appeared
                to_incident.append(opened)
                to_detected.append(time.perf_counter() - t)
                break
            time.sleep(0.005)
    twin.down()
    return {
        "twin_up_s": round(up_s, 2),
        "samples": len(to_detected),
        "put_to_incident_ms_median": round(statistics.median(to_incident) * 1000, 1),
        "put_to_detected_ms_median": round(statistics.median(to_detected) * 1000, 1),
        "put_to_detected_ms_max": round(max(to_detected) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--twin-samples", type=int, default=8)
    parser.add_argument("--skip-twin", action="store_true")
    args = parser.parse_args()
    result: dict[str, Any] = {"in_process": in_process(args.nodes)}
    if not args.skip_twin:
        result["twin"] = on_twin(args.twin_samples)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
