"""hyperguard — operator CLI for HyperGuard and its local twin.

Commands that read the service take --endpoint (default: the twin at
http://127.0.0.1:4566, or $HYPERGUARD_ENDPOINT; `aws` for a real deployment) and --stack.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from hyperguard.cli.jobs import add_jobs_parser

ROOT = Path(__file__).resolve().parents[3]


class CliError(Exception):
    pass


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    widths = {c: max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns))


# ---- events -------------------------------------------------------------------------------
def cmd_events_classify(args: argparse.Namespace) -> int:
    from hyperguard.events import ClassifyConfig, MalformedEventError, classify

    config = ClassifyConfig(rebalance_action=args.rebalance_action)
    failed = 0
    for name in args.files:
        try:
            event = json.loads(Path(name).read_text())
            if not isinstance(event, dict):
                raise ValueError("the file does not hold a JSON object")
            for s in classify(event, config):
                print(
                    json.dumps(
                        {
                            "file": name,
                            "source": s.source.value,
                            "kind": s.kind,
                            "instance_id": s.instance_id,
                            "cluster": s.cluster,
                            "severity": s.severity.value,
                            "action": s.action.value,
                            "repair": s.repair.value,
                            "reason": s.reason,
                            "observed_at": s.observed_at.isoformat(),
                            "not_before": s.not_before.isoformat() if s.not_before else None,
                            "deadline": s.deadline.isoformat() if s.deadline else None,
                            "dedupe_key": s.dedupe_key,
                        }
                    )
                )
        except (OSError, ValueError, MalformedEventError) as exc:
            failed += 1
            print(json.dumps({"file": name, "error": f"{type(exc).__name__}: {exc}"}))
    return 1 if failed else 0


# ---- twin ---------------------------------------------------------------------------------
def _start_twin(args: argparse.Namespace, **config: Any) -> Any:
    """A twin on the options' ports and clock (and `config`'s overrides), up and ready."""
    from hyperguard.twin.runtime import Twin, TwinConfig

    config.setdefault("hyperpod_nodes", getattr(args, "nodes", 16))
    twin = Twin(
        TwinConfig(
            root=ROOT,
            port=args.port,
            api_port=args.api_port,
            time_scale=args.time_scale,
            **config,
        )
    )
    try:
        twin.up()
    except OSError as exc:
        raise CliError(f"cannot serve on 127.0.0.1:{args.port}: {exc}") from exc
    return twin


def cmd_twin_up(args: argparse.Namespace) -> int:
    twin = _start_twin(args)
    status = twin.status()
    print(f"HyperGuard twin up at {twin.emulator.endpoint}  (stack {status['stack']})")
    print(f"  API at {twin.api_endpoint}  (caller: X-HyperGuard-Principal header, default admin)")
    print(
        f"  try: aws --endpoint-url {twin.emulator.endpoint} stepfunctions list-executions "
        f"--state-machine-arn {status['outputs']['NodeRecoveryStateMachineArn']}"
    )
    print(
        f"  emulator gaps the twin covers: {len(status['emulator_gaps'])} (hyperguard twin status)"
    )
    sys.stdout.flush()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    twin.down()
    return 0


def cmd_twin_demo(args: argparse.Namespace) -> int:
    from hyperguard.twin.demo import render, run_scenario

    print(f"starting the twin on 127.0.0.1:{args.port} (real template.yaml on moto) ...")
    twin = _start_twin(args)
    status = twin.status()
    print(
        f"  stack {status['stack']}: {len(status['resources'])} resources created, "
        f"{len(status['not_created'])} the emulator cannot create, covered by the twin "
        f"({', '.join(sorted(set(status['not_created'].values())))})"
    )
    instances = twin.cluster.instances()
    print(
        f"  simulated cluster: {sum(i.platform == 'hyperpod' for i in instances)} HyperPod "
        f"nodes, {sum(i.platform == 'eks' for i in instances)} EKS burst nodes, "
        f"{len(twin.cluster.runs())} training jobs (submitted through the API)"
    )
    try:
        result = run_scenario(twin, ROOT / "tests" / "events")
    finally:
        twin.down()
    print(render(result))
    if args.json:
        _print_json(result)
    ok = result["settled"] and result["dlq_depth"] == 0 and not result["function_errors"]
    return 0 if ok else 1


def cmd_twin_scenario(args: argparse.Namespace) -> int:
    from hyperguard.twin.scenarios import elastic_fault

    twin = _start_twin(args, hyperpod_nodes=8, burst_nodes=0, seed_jobs=False)
    try:
        result = elastic_fault(twin)
    finally:
        twin.down()
    if args.json:
        _print_json(result)
        return 0
    rows = [{"strategy": name, **values} for name, values in result["strategies"].items()]
    _table(
        rows,
        [
            "strategy",
            "lost_gpu_minutes",
            "replicas_min_seen",
            "replicas_end",
            "checkpoint_step_kept",
            "full_size_again_after_s",
        ],
    )
    return 0


def _service(args: argparse.Namespace) -> Any:
    from hyperguard.twin.client import ServiceClient

    return ServiceClient(args.endpoint, args.stack)


def cmd_twin_status(args: argparse.Namespace) -> int:
    status = _service(args).twin_get("status")
    if args.json:
        _print_json(status)
        return 0
    print(
        f"twin at {status['endpoint']}, stack {status['stack']}, up {status['uptime_s']} s, "
        f"time x{status['time_scale']}"
    )
    print(f"resources: {len(status['resources'])} created")
    for logical_id, kind in status["not_created"].items():
        print(f"  not created by the emulator: {logical_id} ({kind})")
    print("what the twin does where the emulator cannot:")
    for gap in status["emulator_gaps"]:
        print(f"  {gap['type']}: {gap['twin_does']}")
    print(f"invocations: {status['invocations']}  errors: {status['function_errors']}")
    print(f"queues: {status['queue_depth']}  executions: {status['executions']}")
    return 0


def cmd_twin_nodes(args: argparse.Namespace) -> int:
    snapshot = _service(args).twin_get("nodes")
    if args.json:
        _print_json(snapshot)
        return 0
    _table(
        snapshot["nodes"],
        [
            "instance_id",
            "platform",
            "pool",
            "instance_type",
            "capacity_type",
            "status",
            "schedulable",
        ],
    )
    return 0


def cmd_twin_inject(args: argparse.Namespace) -> int:
    from hyperguard.twin.inject import InjectError, put_entry, retarget

    service = _service(args)
    status = service.twin_get("status")
    cluster = status["outputs"].get("HyperPodClusterName")
    events = service.client("events")
    for name in args.files:
        try:
            event = json.loads(Path(name).read_text())
            if args.instance_id:
                event = retarget(event, args.instance_id, cluster)
            result = events.put_events(
                Entries=[put_entry(event, status["outputs"]["EventBusName"])]
            )
        except (OSError, json.JSONDecodeError, InjectError) as exc:
            raise CliError(f"{name}: {exc}") from exc
        entry = result["Entries"][0]
        print(
            json.dumps(
                {"file": name, "event_id": entry.get("EventId"), "error": entry.get("ErrorCode")}
            )
        )
    return 0


# ---- incidents ----------------------------------------------------------------------------
def _job_store(args: argparse.Namespace) -> Any:
    from hyperguard.store import JobStore

    return JobStore(_service(args).outputs["JobsTableName"])


def _incident_store(args: argparse.Namespace) -> Any:
    from hyperguard.store import IncidentStore

    outputs = _service(args).outputs
    return IncidentStore(outputs["IncidentsTableName"], outputs["NodesTableName"])


def cmd_incidents_list(args: argparse.Namespace) -> int:
    incidents = [i.model_dump(mode="json") for i in _incident_store(args).recent(args.limit)]
    if args.json:
        _print_json(incidents)
        return 0
    _table(
        incidents,
        ["incident_id", "instance_id", "kind", "severity", "repair", "status", "signal_count"],
    )
    return 0


def cmd_incidents_show(args: argparse.Namespace) -> int:
    store = _incident_store(args)
    incident = store.get(args.incident_id)
    if incident is None:
        raise CliError(f"no incident {args.incident_id}")
    detail = incident.model_dump(mode="json") | {"signals": store.signals(args.incident_id)}
    _print_json(detail)
    return 0


def _operator(args: argparse.Namespace) -> Any:
    from hyperguard.messaging import RecoveryWorkflows
    from hyperguard.recovery.operator import RecoveryOperator
    from hyperguard.store import IncidentStore, NodeStore

    outputs = _service(args).outputs
    return RecoveryOperator(
        IncidentStore(outputs["IncidentsTableName"], outputs["NodesTableName"]),
        NodeStore(outputs["NodesTableName"]),
        RecoveryWorkflows(outputs["NodeRecoveryStateMachineArn"]),
    )


def _operator_call(args: argparse.Namespace, action: str, *call_args: Any) -> int:
    from hyperguard.recovery.operator import OperatorActionError

    try:
        _print_json(getattr(_operator(args), action)(*call_args))
    except OperatorActionError as exc:
        raise CliError(str(exc)) from exc
    return 0


def cmd_incidents_approve(args: argparse.Namespace) -> int:
    return _operator_call(args, "approve", args.incident_id, args.by)


def cmd_incidents_veto(args: argparse.Namespace) -> int:
    return _operator_call(args, "veto", args.incident_id, args.by, args.reason)


def cmd_incidents_redrive(args: argparse.Namespace) -> int:
    return _operator_call(args, "redrive", args.incident_id)


def cmd_nodes_veto(args: argparse.Namespace) -> int:
    return _operator_call(args, "veto_node", args.instance_id, None if args.lift else args.reason)


def cmd_twin_fault(args: argparse.Namespace) -> int:
    _print_json(
        _service(args).twin_post("fault", {"instance_id": args.instance_id, "kind": args.kind})
    )
    return 0


# ---- parser -------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hyperguard", description=__doc__.split("\n")[0])
    groups = parser.add_subparsers(dest="group", required=True)

    def service_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--endpoint",
            help="twin URL, or 'aws' (default $HYPERGUARD_ENDPOINT or http://127.0.0.1:4566)",
        )
        p.add_argument("--stack", default="hyperguard", help="CloudFormation stack name")
        p.add_argument("--json", action="store_true", help="machine-readable output")

    events = groups.add_parser("events", help="work with node-health events").add_subparsers(
        dest="cmd", required=True
    )
    p = events.add_parser("classify", help="classify event files, one JSON object per signal")
    p.add_argument("files", nargs="+")
    p.add_argument("--rebalance-action", default="ignore", choices=["ignore", "drain", "notify"])
    p.set_defaults(func=cmd_events_classify)

    twin = groups.add_parser("twin", help="the local twin").add_subparsers(
        dest="cmd", required=True
    )
    for name, func, text in (
        ("up", cmd_twin_up, "start the twin and serve until interrupted"),
        ("demo", cmd_twin_demo, "start a twin, run the demo scenario, print what happened"),
    ):
        p = twin.add_parser(name, help=text)
        p.add_argument("--port", type=int, default=4566, help="AWS emulator port")
        p.add_argument("--api-port", type=int, default=3000, help="HyperGuard API port")
        p.add_argument(
            "--time-scale", type=float, default=60.0, help="simulated seconds per wall-clock second"
        )
        p.add_argument("--nodes", type=int, default=16, help="HyperPod nodes to simulate")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)
    p = twin.add_parser(
        "scenario",
        help="run a measured scenario on a fresh twin (elastic-fault: one node fault under "
        "an elastic job, elastic_shrink against wait_for_repair)",
    )
    p.add_argument("name", choices=["elastic-fault"])
    p.add_argument("--port", type=int, default=0, help="AWS emulator port (0: any free)")
    p.add_argument("--api-port", type=int, default=0, help="HyperGuard API port (0: any free)")
    p.add_argument(
        "--time-scale", type=float, default=60.0, help="simulated seconds per wall-clock second"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_twin_scenario)
    for name, func, text in (
        ("status", cmd_twin_status, "what is deployed, what the twin emulates, counters"),
        ("nodes", cmd_twin_nodes, "the simulated cluster's nodes"),
    ):
        p = twin.add_parser(name, help=text)
        service_options(p)
        p.set_defaults(func=func)
    p = twin.add_parser("inject", help="put event files on the twin's EventBridge")
    p.add_argument("files", nargs="+")
    p.add_argument("--instance-id", help="retarget the events at this node")
    service_options(p)
    p.set_defaults(func=cmd_twin_inject)

    p = twin.add_parser("fault", help="break a simulated node; its health agent reports it")
    p.add_argument("instance_id")
    p.add_argument(
        "--kind",
        default="gpu",
        choices=["gpu", "persistent", "kernel"],
        help="gpu: a reboot cures it; persistent: only a replacement does; kernel: "
        "KernelReady=False, seen only through Kubernetes (a reboot cures it)",
    )
    service_options(p)
    p.set_defaults(func=cmd_twin_fault)

    add_jobs_parser(groups, service_options, _job_store)

    nodes = groups.add_parser("nodes", help="node actions").add_subparsers(
        dest="cmd", required=True
    )
    p = nodes.add_parser("veto", help="make every repair of a node wait for approval")
    p.add_argument("instance_id")
    p.add_argument("--reason", default="operator veto")
    p.add_argument("--lift", action="store_true", help="lift the veto")
    service_options(p)
    p.set_defaults(func=cmd_nodes_veto)

    incidents = groups.add_parser("incidents", help="incidents").add_subparsers(
        dest="cmd", required=True
    )
    for name, func, text in (
        ("approve", cmd_incidents_approve, "let a paused recovery proceed"),
        ("veto", cmd_incidents_veto, "stop a paused recovery: it escalates, node stays cordoned"),
        ("redrive", cmd_incidents_redrive, "run an escalated incident's recovery again"),
    ):
        p = incidents.add_parser(name, help=text)
        p.add_argument("incident_id")
        p.add_argument("--by", default=os.environ.get("USER", "operator"))
        p.add_argument("--reason", default="vetoed by an operator")
        service_options(p)
        p.set_defaults(func=func)
    p = incidents.add_parser("list", help="newest first")
    p.add_argument("--limit", type=int, default=100)
    service_options(p)
    p.set_defaults(func=cmd_incidents_list)
    p = incidents.add_parser("show", help="one incident with its signals")
    p.add_argument("incident_id")
    service_options(p)
    p.set_defaults(func=cmd_incidents_show)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from hyperguard.twin.client import TwinUnreachableError

    try:
        return int(args.func(args))
    except (CliError, TwinUnreachableError) as exc:
        print(f"hyperguard: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
