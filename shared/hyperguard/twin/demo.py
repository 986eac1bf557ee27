"""The demo scenario: real AWS sample events, a duplicate storm, and what became of them.

Runs against a twin started in this process. The samples are tests/events/*.json, the
unmodified AWS documentation examples, aimed at the twin's nodes with `retarget`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hyperguard.store import IncidentStore
from hyperguard.twin.inject import put_entry, retarget
from hyperguard.twin.runtime import Twin

REDELIVERIES = 3  # at-least-once: each delivered event arrives this many more times
REPORTS = 5  # the HyperPod agent re-reporting the same fault, as new events


def _load(events_dir: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((events_dir / f"{name}.json").read_text()))


def _envelope(event: dict[str, Any], event_id: str, account: str, region: str) -> dict[str, Any]:
    """The event as EventBridge delivers it to the queue (for redelivering it verbatim)."""
    return {
        "version": "0",
        "id": event_id,
        "detail-type": event["detail-type"],
        "source": event["source"],
        "account": account,
        "time": event.get("time"),
        "region": region,
        "resources": event.get("resources", []),
        "detail": event["detail"],
    }


def wait_until_settled(twin: Twin, timeout_s: float = 180) -> bool:
    """Queue empty, nothing in flight, no execution running (twice in a row: a delivery
    being processed has left the queue but not yet started its execution)."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline:
        status = twin.status()
        running = status["executions"].get("RUNNING", 0)
        quiet = quiet + 1 if status["queue_depth"]["HealthQueue"] == 0 and running == 0 else 0
        if quiet >= 2:
            return True
        time.sleep(0.5)
    return False


def run_scenario(
    twin: Twin, events_dir: Path, say: Callable[[str], None] = print
) -> dict[str, Any]:
    assert twin.deployment is not None
    outputs = twin.deployment.outputs
    events, sqs = twin.client("events"), twin.client("sqs")
    cluster = twin.config.cluster_name
    instances = twin.cluster.instances()
    by_node = {i.node_name: i for i in instances}
    busy = {by_node[name].instance_id for run in twin.cluster.runs().values() for name in run.nodes}
    hyperpod = [i for i in instances if i.platform == "hyperpod"]
    faulty = next(i for i in hyperpod if i.instance_id in busy)
    idle = [i for i in hyperpod if i.instance_id not in busy]
    retiring, restarting = idle[0], idle[1]
    spot = next(i for i in instances if i.platform == "eks" and i.capacity_type == "Spot")

    hp = _load(events_dir, "hyperpod-node-health-unhealthy")
    plan: list[tuple[str, dict[str, Any]]] = [
        ("same fault, reported again", retarget(hp, faulty.instance_id, cluster)),
        (
            "same node, AWS Health retirement",
            retarget(_load(events_dir, "aws-health-ec2-retirement"), faulty.instance_id),
        ),
        (
            "same node, HyperPod replacement failed",
            retarget(
                _load(events_dir, "hyperpod-cluster-event-instance-error"),
                faulty.instance_id,
                cluster,
            ),
        ),
        (
            "state change to pending",
            retarget(_load(events_dir, "ec2-instance-state-change"), restarting.instance_id),
        ),
        (
            "spot interruption warning",
            retarget(_load(events_dir, "ec2-spot-interruption-warning"), spot.instance_id),
        ),
        (
            "rebalance recommendation",
            retarget(_load(events_dir, "ec2-rebalance-recommendation"), spot.instance_id),
        ),
        (
            "scheduled retirement",
            retarget(_load(events_dir, "aws-health-ec2-retirement"), retiring.instance_id),
        ),
        ("foreign cluster (sample as published)", hp),
    ]
    say(
        f"a GPU of {faulty.instance_id} (under a training job) fails; the simulated HyperPod "
        "health agent reports it on EventBridge"
    )
    twin.fault(faulty.instance_id, "persistent")
    say(f"injecting {len(plan)} real sample events into the twin:")
    delivered: list[dict[str, Any]] = []
    for label, event in plan:
        result = events.put_events(Entries=[put_entry(event, outputs["EventBusName"])])
        event_id = result["Entries"][0]["EventId"]
        delivered.append(_envelope(event, event_id, twin.account, twin.region))
        say(f"  {label:<40} {event['detail-type']}")
    # Constructed here, not a sample: a spot warning whose detail lost its instance-id.
    events.put_events(
        Entries=[
            {
                "Source": "aws.ec2",
                "DetailType": "EC2 Spot Instance Interruption Warning",
                "Detail": json.dumps({"instance-action": "terminate"}),
            }
        ]
    )
    say("  malformed event (constructed)            EC2 Spot Instance Interruption Warning")
    say(
        f"duplicate storm: {len(delivered)} deliveries x{REDELIVERIES} redelivered, "
        f"the GPU fault reported {REPORTS} more times"
    )
    for _ in range(REDELIVERIES):
        for body in delivered:
            sqs.send_message(QueueUrl=outputs["HealthQueueUrl"], MessageBody=json.dumps(body))
    for _ in range(REPORTS):
        events.put_events(Entries=[put_entry(plan[0][1], outputs["EventBusName"])])
    say("recovering (cordon, protect jobs, drain, repair, wait until healthy, resume) ...")
    settled = wait_until_settled(twin)
    return report(twin, settled)


def signal_counts(twin: Twin) -> dict[str, int]:
    """The ingest function's Signals_* metrics, as CloudWatch has them."""
    cw = twin.client("cloudwatch")
    now = datetime.now(UTC)
    counts: dict[str, int] = {}
    for metric in cw.list_metrics(Namespace="HyperGuard")["Metrics"]:
        name = metric["MetricName"]
        if not name.startswith("Signals_"):
            continue
        stats = cw.get_metric_statistics(
            Namespace="HyperGuard",
            MetricName=name,
            Dimensions=metric["Dimensions"],
            StartTime=now - timedelta(hours=1),
            EndTime=now + timedelta(minutes=5),
            Period=3600,
            Statistics=["Sum"],
        )
        counts[name.removeprefix("Signals_")] = int(sum(p["Sum"] for p in stats["Datapoints"]))
    return dict(sorted(counts.items()))


def report(twin: Twin, settled: bool) -> dict[str, Any]:
    assert twin.deployment is not None
    outputs = twin.deployment.outputs
    store = IncidentStore(outputs["IncidentsTableName"], outputs["NodesTableName"])
    sfn = twin.client("stepfunctions")
    incidents = []
    for incident in store.recent():
        execution = (
            sfn.describe_execution(executionArn=incident.execution_arn)["status"]
            if incident.execution_arn
            else None
        )
        incidents.append(
            {
                "incident_id": incident.incident_id,
                "instance_id": incident.instance_id,
                "kind": incident.kind,
                "repair": incident.repair.value,
                "status": incident.status.value,
                "resolution": incident.resolution,
                "replacement": incident.replacement_instance_id,
                "signals": incident.signal_count,
                "sources": incident.sources,
                "execution": execution,
                "timings": incident.timings,
                "jobs": [j.model_dump(mode="json") for j in incident.jobs],
            }
        )
    status = twin.status()
    names = {job_id: name for name, job_id in twin.seeded_jobs.items()}
    jobs = {
        names.get(job_id, job_id): {
            "job_id": job_id,
            "step": twin.cluster.step_of(job_id),
            "nodes": run.nodes,
            "run": run.name,
        }
        for job_id, run in twin.cluster.runs().items()
    }
    return {
        "settled": settled,
        "jobs": jobs,
        "deliveries": twin.poller.records[outputs["IngestHealthFunctionName"]]
        if twin.poller
        else 0,
        "signals": signal_counts(twin),
        "incidents": incidents,
        "executions": status["executions"],
        "dlq_depth": status["queue_depth"]["HealthDLQ"],
        "invocations": status["invocations"],
        "function_errors": status["function_errors"],
    }


def render(result: dict[str, Any]) -> str:
    lines = ["", "what happened:"]
    lines.append(f"  deliveries processed: {result['deliveries']}")
    lines.append("  signals: " + ", ".join(f"{k} {v}" for k, v in result["signals"].items()))
    lines.append(f"  incidents: {len(result['incidents'])}")
    for i in result["incidents"]:
        lines.append(
            f"    {i['incident_id']:<46} {i['kind']:<24} {i['status']}/{i['resolution'] or '-':<9} "
            f"signals {i['signals']:<3} sources {','.join(i['sources']):<20} "
            f"execution {i['execution']}"
        )
        if i["replacement"]:
            lines.append(f"      replaced by {i['replacement']}")
        for job in i["jobs"]:
            lines.append(
                f"      job {job['job_id']}: {job['strategy']}, "
                f"from checkpoint step {job['checkpoint_step']}"
            )
        if i["timings"]:
            marks = ", ".join(
                f"{k.removeprefix('signal_to_').removesuffix('_s')} {v:.1f}s"
                for k, v in sorted(i["timings"].items(), key=lambda kv: kv[1])
            )
            lines.append(f"      from first signal (wall time, cluster at x60): {marks}")
    lines.append("  jobs now:")
    for name, job in sorted(result["jobs"].items()):
        lines.append(f"    {name:<22} step {job['step']:<6} run {job['run']}")
    lines.append("  executions: " + ", ".join(f"{k} {v}" for k, v in result["executions"].items()))
    lines.append(f"  dead-letter queue: {result['dlq_depth']}")
    lines.append(f"  handler errors: {sum(result['function_errors'].values())}")
    return "\n".join(lines)
