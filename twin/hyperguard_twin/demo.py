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

from hyperguard import planning
from hyperguard.cli.executions import execution_states, history
from hyperguard.events import ClassifyConfig, classify
from hyperguard.store import IncidentStore
from hyperguard_twin.cloud.training_run import interruptions
from hyperguard_twin.inject import put_entry, retarget
from hyperguard_twin.runtime import Twin
from hyperguard_twin.service_users import SEED_JOBS
from hyperguard_twin.story import Follower, phases

REDELIVERIES = 3  # at-least-once: each delivered event arrives this many more times
REPORTS = 5  # the HyperPod agent re-reporting the same fault, as new events
GPUS_PER_INSTANCE = 8  # the twin's ml.p5.48xlarge

NEXT_STEPS = [
    "hyperguard twin up                      # a twin that stays up (Ctrl-C stops it)",
    "hyperguard watch                        # in another terminal: incidents and executions live",
    "hyperguard twin nodes                   # pick a node, then break it:",
    "hyperguard twin fault INSTANCE_ID --kind gpu",
    "hyperguard incidents list",
    "hyperguard incidents show INCIDENT_ID   # the recovery as a timeline",
    "hyperguard views teams                  # GPUs per team, borrowed, utilisation",
    "hyperguard plan --instances 256 --gpus-per-instance 8 --failure-rate 0.0005 "
    "--gpu-hours 10000000 --downtime-min 40 --baseline-downtime-min 280 --gpu-hour-cost 5",
    "hyperguard twin scenario elastic-fault  # elastic_shrink against wait_for_repair",
]


def next_steps(cli: str) -> list[str]:
    """NEXT_STEPS with `cli`, the command as it can be typed here, for `hyperguard`."""
    return [cli + line.removeprefix("hyperguard") for line in NEXT_STEPS]


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


def wait_until_settled(
    twin: Twin, timeout_s: float = 180, on_poll: Callable[[], None] = lambda: None
) -> bool:
    """Queue empty, nothing in flight, no execution running (twice in a row: a delivery
    being processed has left the queue but not yet started its execution)."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline:
        on_poll()
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
    say(
        "recovering (cordon, protect jobs, drain, repair, wait until healthy, resume); each "
        "state as its execution leaves it, seconds since the demo started, cluster time:"
    )
    follower = Follower(twin, say)
    settled = wait_until_settled(twin, on_poll=follower.poll)
    follower.poll()
    result = report(twin, settled)
    rows: list[tuple[str, dict[str, Any] | None, str]] = [
        ("GPU fault (simulated health agent)", None, faulty.instance_id)
    ]
    rows += [(label, event, event["detail"].get("instance-id") or "") for label, event in plan]
    signals = result["signals"]
    on_faulty = next(
        (i["signals"] for i in result["incidents"] if i["instance_id"] == faulty.instance_id), 0
    )
    result["summary"] = [
        *summarise(rows, result["incidents"], cluster),
        {
            "event": "malformed (constructed)",
            "classification": "-",
            "action": "-",
            "outcome": f"{signals.get('malformed', 0)} counted as malformed, acknowledged",
        },
        {
            "event": f"{len(delivered)} deliveries, each redelivered x{REDELIVERIES}",
            "classification": "same event id",
            "action": "-",
            "outcome": f"{signals.get('duplicate', 0)} counted as duplicates, dropped",
        },
        {
            "event": f"the GPU fault reported {REPORTS} more times",
            "classification": "hyperpod_node_health",
            "action": "open_incident",
            "outcome": f"merged: the node's incident holds {on_faulty} signals",
        },
    ]
    return result


def summarise(
    rows: list[tuple[str, dict[str, Any] | None, str]],
    incidents: list[dict[str, Any]],
    cluster: str,
) -> list[dict[str, str]]:
    """Event -> classification (the ingest function's own classifier) -> action -> what
    became of it on the twin. `rows`: (label, event or None for the agent's report, node)."""
    by_node = {i["instance_id"]: i for i in incidents}
    seen: set[str] = set()
    summary = []
    for label, event, node in rows:
        if event is None:
            kind, action, target = "hyperpod_node_health", "open_incident", cluster
        else:
            (signal, *_) = classify(event, ClassifyConfig())
            kind, action, target = signal.kind, signal.action.value, signal.cluster or cluster
            node = signal.instance_id or node
        incident = by_node.get(node)
        if target != cluster:
            outcome = f"another cluster ({target}): counted as foreign, dropped"
        elif action == "ignore":
            outcome = "counted, no action"
        elif incident is None:
            outcome = "no incident"
        else:
            verb = "noted on" if action == "notify" else "merged into" if node in seen else "opened"
            ending = incident["resolution"] or incident["status"]
            outcome = f"{verb} incident: {incident['status']}, {ending}"
            seen.add(node)
        summary.append(
            {"event": label, "classification": kind, "action": action, "outcome": outcome}
        )
    return summary


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
    to_cluster = twin.cluster.clock.virtual
    incidents, recoveries, execution_rows = [], [], []
    for incident in store.recent():
        if incident.execution_arn:
            described = sfn.describe_execution(executionArn=incident.execution_arn)
            states = execution_states(history(sfn, incident.execution_arn))
            recoveries.append(
                {
                    "incident_id": incident.incident_id,
                    "instance_id": incident.instance_id,
                    "outcome": incident.resolution or incident.status.value,
                    "phases": [
                        {
                            "name": p.name,
                            "start": _iso(to_cluster(p.start)),
                            "end": _iso(to_cluster(p.end)),
                            # the service's own time: the cluster's clock scales it
                            "wall_s": round((p.end - p.start).total_seconds(), 1),
                        }
                        for p in phases(incident, states)
                    ],
                }
            )
            execution_rows.append(
                {
                    "name": described["name"],
                    "state_machine": described["stateMachineArn"].rsplit(":", 1)[-1],
                    "status": described["status"],
                    "start": _iso(described["startDate"]),
                    "stop": _iso(described["stopDate"]) if described.get("stopDate") else None,
                    "states": len(states),
                }
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
                "execution": execution_rows[-1]["status"] if incident.execution_arn else None,
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
        "recoveries": recoveries,
        "recovery_executions": execution_rows,
        "gpu_use": gpu_use(twin),
        "job_outcomes": job_outcomes(twin),
        "dlq_depth": status["queue_depth"]["HealthDLQ"],
        "invocations": status["invocations"],
        "function_errors": status["function_errors"],
    }


def gpu_use(twin: Twin) -> dict[str, Any]:
    """GPUs each team's training held over the demo, in cluster time: every moment a job's
    size changed on the simulated cluster (its ground truth), as a step series."""
    teams = {
        twin.seeded_jobs[name]: team for name, team, *_ in SEED_JOBS if name in twin.seeded_jobs
    }
    changes = sorted(
        (point.at, job_id, point.replicas)
        for job_id in teams
        for point in twin.cluster.timeline(job_id)
    )
    size = dict.fromkeys(teams, 0)
    times: list[str] = []
    series: dict[str, list[int]] = {team: [] for team in sorted(set(teams.values()))}
    for at, job_id, replicas in [*changes, (twin.cluster.clock.now(), "", 0)]:
        if job_id:
            size[job_id] = replicas
        times.append(_iso(at))
        for team in series:
            series[team].append(
                GPUS_PER_INSTANCE * sum(n for j, n in size.items() if teams[j] == team)
            )
    capacity = GPUS_PER_INSTANCE * sum(
        1 for i in twin.cluster.instances() if i.platform == "hyperpod"
    )
    return {"times": times, "teams": series, "capacity": capacity}


def job_outcomes(twin: Twin) -> list[dict[str, Any]]:
    """What each seeded job lost over the run, from the simulated cluster's ground truth:
    each time it stopped training, the steps it then redid (its progress beyond the
    checkpoint it resumed from), the cluster seconds it did not train, and the steps it
    resumed from."""
    now = twin.cluster.clock.now()
    rows = []
    for name, team, *_ in SEED_JOBS:
        job_id = twin.seeded_jobs.get(name)
        if job_id is None:
            continue
        stops = [
            i
            for i in interruptions(twin.cluster.timeline(job_id))
            if i.steps_lost or i.seconds_down(now)  # a resize that never stopped it: none
        ]
        rows.append(
            {
                "job": name,
                "team": team,
                "step": twin.cluster.step_of(job_id),
                "interruptions": len(stops),
                "steps_lost": sum(i.steps_lost for i in stops),
                "seconds_down": round(sum(i.seconds_down(now) for i in stops), 1),
                "resumed_from": [i.resumed.step for i in stops if i.resumed is not None],
            }
        )
    return rows


def report_data(result: dict[str, Any]) -> dict[str, Any]:
    """What the HTML report draws (hyperguard_twin.report): the run's facts, nothing else."""
    return {
        "title": "HyperGuard twin demo",
        "subtitle": (
            "real AWS sample events into the real template on the emulator; times are the "
            "simulated cluster's (x60)"
        ),
        "generated_at": _iso(datetime.now(UTC)),
        "summary": result["summary"],
        "recoveries": result["recoveries"],
        "jobs": result["job_outcomes"],
        "gpu_use": result["gpu_use"],
        "executions": result["recovery_executions"],
        "tradeoff": tradeoff(planning.PUBLISHED_RATE),
        "next_steps": result.get("next_steps", NEXT_STEPS),
    }


TRADEOFF_SIZES = (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def tradeoff(rate: float) -> dict[str, Any]:
    """The planner's trade-off curves for the report, with what they rest on."""
    return planning.tradeoff(TRADEOFF_SIZES, rate) | {
        "inputs": {
            "failure rate per instance-hour": rate,
            "component times (s)": (
                f"detect {planning.DETECT_S:g}, replace {planning.REPLACE_S:g}, resume "
                f"{planning.RESUME_S:g}, rescale {planning.RESCALE_S:g}, provision "
                f"{planning.PROVISION_S:g}"
            ),
            "HyperGuard overhead (s, measured)": planning.HYPERGUARD_OVERHEAD_S,
        }
    }


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds")


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
