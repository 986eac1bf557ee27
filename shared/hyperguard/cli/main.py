"""hyperguard — operator CLI for HyperGuard and its local twin.

Commands that read the service take --endpoint (default: the twin at
http://127.0.0.1:4566, or $HYPERGUARD_ENDPOINT; `aws` for a real deployment) and --stack.
Every command takes --json: then stdout holds JSON only. Exit status: 0 done, 1 the
command failed (one line on stderr), 2 usage error, 130 interrupted (docs/cli.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

# Only the standard library and these two light modules load before main() installs its
# Ctrl-C handling: everything heavier (pydantic, boto3, the twin) loads inside it, so an
# interruption while it loads is the one line `hyperguard: interrupted`, not a traceback.
from hyperguard.cli.options import (
    add_group,
    bounded_int,
    number_between,
    port,
    positive_float,
    positive_int,
    whole,
)
from hyperguard.cli.output import CliError, print_json, print_table, say
from hyperguard.cli.progress import progress

ROOT = Path(__file__).resolve().parents[3]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
"""Usage errors exit 2: argparse's own convention."""
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a writer whose reader went away (`| head`)."""


# ---- events -------------------------------------------------------------------------------
def _signal_json(name: str, s: Any) -> dict[str, Any]:
    return {
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


def cmd_events_classify(args: argparse.Namespace) -> int:
    """JSON Lines as each file is read; with --json, one JSON array at the end."""
    from hyperguard.events import ClassifyConfig, MalformedEventError, classify

    config = ClassifyConfig(rebalance_action=args.rebalance_action)
    failed = 0
    collected: list[dict[str, Any]] = []

    def emit(obj: dict[str, Any]) -> None:
        if args.json:
            collected.append(obj)
        else:
            print(json.dumps(obj))

    for name in args.files:
        try:
            event = json.loads(Path(name).read_text())
            if not isinstance(event, dict):
                raise ValueError("the file does not hold a JSON object")
            for s in classify(event, config):
                emit(_signal_json(name, s))
        except (OSError, ValueError, MalformedEventError) as exc:
            failed += 1
            emit({"file": name, "error": f"{type(exc).__name__}: {exc}"})
    if args.json:
        print_json(collected)
    return EXIT_FAILED if failed else EXIT_OK


# ---- twin ---------------------------------------------------------------------------------
DEFAULT_TIME_SCALE = 60.0


def _start_twin(args: argparse.Namespace, **config: Any) -> Any:
    """A twin on the options' ports and clock (and `config`'s overrides), up and ready."""
    from hyperguard.twin.deploy import DeployError
    from hyperguard.twin.lambda_runtime import LayerBuildError
    from hyperguard.twin.runtime import Twin, TwinConfig, TwinError

    config.setdefault("hyperpod_nodes", getattr(args, "nodes", 16))
    config.setdefault("node_recovery", args.node_recovery)
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
        twin.down()
        raise CliError(
            f"cannot serve on 127.0.0.1 (--port {args.port}, --api-port {args.api_port}): {exc}"
        ) from exc
    except (TwinError, DeployError, LayerBuildError) as exc:
        twin.down()
        raise CliError(f"the twin did not start: {exc}") from exc
    except KeyboardInterrupt:  # stopped while starting: its workers must not outlive it
        twin.down()
        raise
    return twin


def cmd_twin_up(args: argparse.Namespace) -> int:
    twin = _start_twin(args)
    status = twin.status()
    if args.json:
        print(
            json.dumps(
                {
                    "endpoint": twin.emulator.endpoint,
                    "api_endpoint": twin.api_endpoint,
                    "kubernetes_endpoint": status["kubernetes_endpoint"],
                    "stack": status["stack"],
                }
            )
        )
    else:
        print(f"HyperGuard twin up at {twin.emulator.endpoint}  (stack {status['stack']})")
        print(
            f"  API at {twin.api_endpoint}  (caller: X-HyperGuard-Principal header, default admin)"
        )
        print(
            f"  try: aws --endpoint-url {twin.emulator.endpoint} stepfunctions list-executions "
            f"--state-machine-arn {status['outputs']['NodeRecoveryStateMachineArn']}"
        )
        print(
            f"  emulator gaps the twin covers: {len(status['emulator_gaps'])} "
            "(hyperguard twin status)"
        )
    sys.stdout.flush()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Ctrl-C is how a twin is meant to stop: not an interruption (exit 0)
    with contextlib.suppress(KeyboardInterrupt):
        # A signal may land on any of the twin's threads; Python runs its handler only once
        # the main thread wakes, and an untimed wait never does: wake every second.
        while not stop.wait(SIGNAL_CHECK_S):
            pass
    twin.down()
    return EXIT_OK


SIGNAL_CHECK_S = 1.0


def cmd_twin_demo(args: argparse.Namespace) -> int:
    from hyperguard.twin.demo import next_steps, render, report_data, run_scenario

    # with --json, stdout carries the result only: the story goes to stderr
    tell: Callable[[str], None] = say if args.json else print
    tell(f"starting the twin on 127.0.0.1:{args.port} (real template.yaml on moto) ...")
    twin = _start_twin(args)
    try:
        status = twin.status()
        tell(
            f"  stack {status['stack']}: {len(status['resources'])} resources created, "
            f"{len(status['not_created'])} the emulator cannot create, covered by the twin "
            f"({', '.join(sorted(set(status['not_created'].values())))})"
        )
        instances = twin.cluster.instances()
        tell(
            f"  simulated cluster: {sum(i.platform == 'hyperpod' for i in instances)} HyperPod "
            f"nodes, {sum(i.platform == 'eks' for i in instances)} EKS burst nodes, "
            f"{len(twin.cluster.runs())} training jobs (submitted through the API)"
        )
        result = run_scenario(twin, ROOT / "tests" / "events", say=tell)
    finally:
        twin.down()
    tell(render(result))
    result["next_steps"] = next_steps(_cli_command())
    result["report"] = _write_report(args.report, report_data(result))
    if args.json:
        print_json(result)
    else:
        print_table(result["summary"], SUMMARY_COLUMNS, title="\nevent -> outcome")
    tell(f"\nreport: {result['report']} (open it in a browser; it needs no network)")
    tell("\nwhat to try next:\n" + "\n".join(f"  {line}" for line in result["next_steps"]))
    ok = result["settled"] and result["dlq_depth"] == 0 and not result["function_errors"]
    return EXIT_OK if ok else EXIT_FAILED


def _cli_command(argv0: str | None = None) -> str:
    """This CLI as a person can type it again here: `hyperguard` when that is what the
    shell finds, else the script's path (`make demo` runs `.venv/bin/hyperguard`, which is
    not on PATH unless the venv is activated)."""
    script = Path(argv0 or sys.argv[0])
    if script.name != "hyperguard":  # python -m hyperguard.cli.main
        return f"{sys.executable} -m hyperguard.cli.main"
    on_path = shutil.which("hyperguard")
    if on_path and Path(on_path).resolve() == script.resolve():
        return "hyperguard"
    return str(script)


def _write_report(path: str, data: dict[str, Any]) -> str:
    """The HTML report at `path`; its absolute path."""
    from hyperguard.twin.report import write_report

    try:
        return str(write_report(Path(path), data).resolve())
    except (OSError, RuntimeError) as exc:  # RuntimeError: plotly is not installed
        raise CliError(f"the report could not be written to {path}: {exc}") from exc


SUMMARY_COLUMNS = [
    ("event", "EVENT"),
    ("classification", "CLASSIFIED AS"),
    ("action", "ACTION"),
    ("outcome", "OUTCOME"),
]


def cmd_twin_scenario(args: argparse.Namespace) -> int:
    if args.name == "proactive-move":
        return _proactive_move(args)
    if args.name == "day-in-the-life":
        return _day_in_the_life(args)
    from hyperguard.twin.scenarios import elastic_fault

    with progress("elastic-fault", 2) as step:
        step("starting a twin")
        twin = _start_twin(args, hyperpod_nodes=8, burst_nodes=0, seed_jobs=False)
        step("a node fault under two elastic jobs, elastic_shrink and wait_for_repair")
        try:
            result = elastic_fault(twin)
        finally:
            twin.down()
    if args.json:
        print_json(result)
        return EXIT_OK
    rows = [{"strategy": name, **values} for name, values in result["strategies"].items()]
    columns = [
        "strategy",
        "lost_gpu_minutes",
        "replicas_min_seen",
        "replicas_end",
        "checkpoint_step_kept",
        "full_size_again_after_s",
    ]
    print_table(rows, [(c, c.upper()) for c in columns])
    return EXIT_OK


def _proactive_move(args: argparse.Namespace) -> int:
    from hyperguard.twin.proactive import proactive_move

    with progress("proactive-move", 2) as step:
        step("starting a twin")
        twin = _start_twin(args, hyperpod_nodes=6, burst_nodes=0, seed_jobs=False)
        step("a retirement announced ahead for a node under an elastic job")
        try:
            result = proactive_move(twin, ROOT / "tests" / "events")
        finally:
            twin.down()
    if args.json:
        print_json(result)
        return EXIT_OK
    keys = [
        "moved_before_deadline",
        "unplanned_downtime_s",
        "job_steps_lost",
        "planned_pause_s",
        "strategy_applied",
        "incident_status",
    ]
    print_table([{k: result[k] for k in keys}], [(k, k.upper()) for k in keys])
    return EXIT_OK


def _day_in_the_life(args: argparse.Namespace) -> int:
    from hyperguard.twin.day import SIDES, TIME_SCALE, compare, day_in_the_life

    if args.time_scale == DEFAULT_TIME_SCALE:  # a day at x60 would take 24 minutes a side
        args.time_scale = TIME_SCALE
    if args.side is not None:
        print_json(day_in_the_life(partial(_start_twin, args), args.side, hours=args.hours))
        return EXIT_OK
    runs = {}
    with progress("day-in-the-life", len(SIDES)) as step:
        for side in SIDES:  # each on a twin in a process of its own
            step(f"the {side} side's day at x{args.time_scale:g}, on a twin of its own")
            runs[side] = _one_side(args, side)
    result = compare(runs)
    if args.json:
        print_json(result)
        return EXIT_OK
    keys = [
        "gpu_hours_used",
        "idle_gpu_hours",
        "cost_usd",
        "burst_nodes_peak",
        "burst_nodes_at_end",
        "jobs_completed",
        "usd_per_used_gpu_hour",
    ]
    rows = [{"side": side, **{k: result[side][k] for k in keys}} for side in SIDES]
    print_table(rows, [("side", "SIDE"), *((k, k.upper()) for k in keys)])
    for basis, ratios in result["cost_ratio_to_on_demand"].items():
        against = ", ".join(f"{side} {ratio:.3f}" for side, ratio in ratios.items())
        print(f"cost over on-demand sized for the peak, {basis} prices: {against}")
    for side in SIDES:
        waits = ", ".join(
            f"{p} {s:.0f} s" for p, s in result[side]["avg_wait_s_by_priority"].items()
        )
        own = ", ".join(
            f"{p} {s:.2f} s" for p, s in result[side]["avg_admission_wall_s_by_priority"].items()
        )
        print(
            f"{side}: average wait by priority (simulated, submission to first step): {waits}; "
            f"HyperGuard's own admission time (wall clock): {own}"
        )
    return EXIT_OK


def _one_side(args: argparse.Namespace, side: str) -> dict[str, Any]:
    """One side of the day, in a process of its own: its JSON."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hyperguard.cli.main",
            "twin",
            "scenario",
            "day-in-the-life",
            "--side",
            side,
            "--port",
            str(args.port),
            "--api-port",
            str(args.api_port),
            "--time-scale",
            str(args.time_scale),
            "--hours",
            str(args.hours),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise CliError(f"the {side} day did not finish: {proc.stderr.strip()[-2000:]}")
    return dict(json.loads(proc.stdout[proc.stdout.index("{") :]))


def cmd_twin_gameday(args: argparse.Namespace) -> int:
    from hyperguard.twin import gameday

    strategies = list(dict.fromkeys(args.strategy or gameday.STRATEGIES))
    drawn = gameday.failures(args.instances, args.failure_rate, args.days, args.seed)
    # the twin's start, the jobs' first checkpoint, then each measured failure
    with progress("game day", 2 + min(args.measure, len(drawn))) as step:
        step("starting a twin")
        twin = _start_twin(
            args,
            hyperpod_nodes=gameday.nodes_for(strategies),
            burst_nodes=0,
            seed_jobs=False,
            timings=gameday.GAMEDAY_TIMINGS,
        )
        try:
            result = gameday.run(
                twin,
                instances=args.instances,
                failure_rate=args.failure_rate,
                days=args.days,
                strategies=strategies,
                measure=args.measure,
                seed=args.seed,
                step=step,
            )
        finally:
            twin.down()
    if args.report:
        result["report"] = _write_report(args.report, gameday.report_data(result))
    if args.json:
        print_json(result)
        return EXIT_OK
    print(
        f"{result['failures']} failures in {args.days:g} days on {args.instances} instances "
        f"at {args.failure_rate:g} per instance-hour (expected {result['expected_failures']}); "
        f"{result['measured_failures']} measured on the twin for each strategy, the rest "
        "charged their mean"
    )
    rows = [{"strategy": name, **values} for name, values in result["strategies"].items()]
    print_table(rows, GAMEDAY_COLUMNS)
    if args.report:
        print(f"report: {result['report']}")
    return EXIT_OK


GAMEDAY_COLUMNS = [
    ("strategy", "STRATEGY"),
    ("downtime_per_failure_min", "MIN/FAILURE (MEASURED)"),
    ("formula_downtime_per_failure_min", "MIN/FAILURE (PLANNER)"),
    ("goodput_pct", "GOODPUT % (MEASURED)"),
    ("formula_goodput_pct", "GOODPUT % (PLANNER, SAME FAILURES)"),
    ("scheduling_goodput_pct", "SCHEDULING %"),
    ("runtime_goodput_pct", "RUNTIME %"),
]


def _service(args: argparse.Namespace) -> Any:
    from hyperguard.twin.client import ServiceClient

    return ServiceClient(args.endpoint, args.stack)


def cmd_twin_status(args: argparse.Namespace) -> int:
    status = _service(args).twin_get("status")
    if args.json:
        print_json(status)
        return EXIT_OK
    print(
        f"twin at {status['endpoint']}, stack {status['stack']}, up {status['uptime_s']} s, "
        f"time x{status['time_scale']}"
    )
    print(f"API at {status['api_endpoint']}")
    print(f"resources: {len(status['resources'])} created")
    for logical_id, kind in status["not_created"].items():
        print(f"  not created by the emulator: {logical_id} ({kind})")
    print("what the twin does where the emulator cannot:")
    for gap in status["emulator_gaps"]:
        print(f"  {gap['type']}: {gap['twin_does']}")
    kubernetes = status.get("kubernetes") or {}
    print(f"Kubernetes at {status.get('kubernetes_endpoint')}, the upstream components:")
    for component in kubernetes.get("components", []):
        state = "running" if component.get("running") else "stopped"
        print(f"  {component['name']} {component['version']} ({component['module']}), {state}")
    print("where the twin is still kinder than a real cluster:")
    for leniency in status.get("leniencies", []):
        print(f"  {leniency['emulates']}: {leniency['lenient']}")
    print(f"invocations: {status['invocations']}  errors: {status['function_errors']}")
    print(f"queues: {status['queue_depth']}  executions: {status['executions']}")
    return EXIT_OK


NODE_COLUMNS = [
    "instance_id",
    "platform",
    "pool",
    "instance_type",
    "capacity_type",
    "status",
    "schedulable",
]


def cmd_twin_nodes(args: argparse.Namespace) -> int:
    snapshot = _service(args).twin_get("nodes")
    if args.json:
        print_json(snapshot)
    else:
        print_table(snapshot["nodes"], [(c, c.upper()) for c in NODE_COLUMNS])
    return EXIT_OK


def cmd_twin_inject(args: argparse.Namespace) -> int:
    from hyperguard.twin.inject import InjectError, put_entry, retarget

    service = _service(args)
    status = service.twin_get("status")
    if args.instance_id:
        known = {n["instance_id"] for n in service.twin_get("nodes")["nodes"]}
        if args.instance_id not in known:
            raise CliError(
                f"no node {args.instance_id} in the twin (hyperguard twin nodes lists them)"
            )
    cluster = status["outputs"].get("HyperPodClusterName")
    events = service.client("events")
    results: list[dict[str, Any]] = []
    for name in args.files:
        try:
            event = json.loads(Path(name).read_text())
            if args.instance_id:
                event = retarget(event, args.instance_id, cluster)
            entry = put_entry(event, status["outputs"]["EventBusName"])
        except (OSError, json.JSONDecodeError, InjectError) as exc:
            raise CliError(f"{name}: {exc}") from exc
        put = events.put_events(Entries=[entry])["Entries"][0]
        result = {"file": name, "event_id": put.get("EventId"), "error": put.get("ErrorCode")}
        results.append(result)
        if not args.json:
            outcome = f"error {result['error']}" if result["error"] else result["event_id"]
            print(f"{name}: {outcome}")
    if args.json:
        print_json(results)
    return EXIT_FAILED if any(r["error"] for r in results) else EXIT_OK


def cmd_twin_kubeconfig(args: argparse.Namespace) -> int:
    from urllib.parse import quote

    answer = _service(args).twin_get(f"kubeconfig?as={quote(args.as_function)}")
    print(answer["kubeconfig"], end="")
    return EXIT_OK


def cmd_twin_fault(args: argparse.Namespace) -> int:
    fault = _service(args).twin_post("fault", {"instance_id": args.instance_id, "kind": args.kind})
    if args.json:
        print_json(fault)
    else:
        print(f"{fault['instance_id']}: {fault['kind']} fault set; its health agent reports it")
    return EXIT_OK


# ---- the service's stores -----------------------------------------------------------------
def _job_store(args: argparse.Namespace) -> Any:
    from hyperguard.store import JobStore

    return JobStore(_service(args).outputs["JobsTableName"])


def _incident_store(args: argparse.Namespace) -> Any:
    from hyperguard.store import IncidentStore

    outputs = _service(args).outputs
    return IncidentStore(outputs["IncidentsTableName"], outputs["NodesTableName"])


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


def _view_stores(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """What the views read: teams, jobs, nodes and EC2's instance figures."""
    from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
    from hyperguard.store import JobStore, NodeStore, TeamStore

    outputs = _service(args).outputs
    return (
        TeamStore(outputs["TeamsTableName"]),
        JobStore(outputs["JobsTableName"]),
        NodeStore(outputs["NodesTableName"]),
        Ec2InstanceCatalogue(),
    )


def _ids(kind: str, args: argparse.Namespace, limit: int) -> list[str]:
    """The service's newest `limit` job or incident ids, newest first (shell completion)."""
    from hyperguard.cli.jobs import newest_first

    if kind == "jobs":
        return [r.job.job_id for r in newest_first(_job_store(args).records())][:limit]
    return [i.incident_id for i in _incident_store(args).recent(limit)]


# ---- parser -------------------------------------------------------------------------------
def _version() -> str:
    try:
        return version("hyperguard")
    except PackageNotFoundError:
        return "unknown (not installed)"


def json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON only on stdout")


def service_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--endpoint",
        help="twin URL, or 'aws' (default $HYPERGUARD_ENDPOINT or http://127.0.0.1:4566)",
    )
    p.add_argument("--stack", default="hyperguard", help="CloudFormation stack name")
    json_option(p)


def twin_options(
    p: argparse.ArgumentParser,
    default_port: int,
    default_api_port: int,
    node_recovery: str = "None",
) -> None:
    """`node_recovery`: the default of --node-recovery (`twin up`'s is AWS's own default;
    the demo and the measured scenarios show and measure HyperGuard's own repair)."""
    p.add_argument(
        "--node-recovery",
        choices=["Automatic", "None"],
        default=node_recovery,
        help="the simulated HyperPod cluster's NodeRecovery: Automatic (HyperPod reboots or "
        "replaces what its health agent finds faulty; HyperGuard defers those repairs unless "
        f"its repair policy owns them) or None (default {node_recovery})",
    )
    p.add_argument(
        "--port", type=port, default=default_port, help="AWS emulator port (0: any free)"
    )
    p.add_argument(
        "--api-port",
        type=port,
        default=default_api_port,
        help="HyperGuard API port (0: any free)",
    )
    p.add_argument(
        "--time-scale",
        type=positive_float,
        default=DEFAULT_TIME_SCALE,
        help="simulated seconds per wall-clock second (> 0; day-in-the-life: 240 unless set)",
    )
    json_option(p)


def build_parser() -> argparse.ArgumentParser:
    from hyperguard.cli import (
        admin,
        api,
        completion,
        executions,
        incidents,
        preflight,
        views,
        watch,
    )
    from hyperguard.cli.deps import Deps
    from hyperguard.cli.jobs import add_jobs_parser
    from hyperguard.cli.plan import add_plan_parser
    from hyperguard.planner import MAX_INSTANCES, MIN_RATE

    parser = argparse.ArgumentParser(
        prog="hyperguard",
        description=__doc__.split("\n")[0],
        epilog="exit status: 0 done, 1 the command failed, 2 usage error, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"hyperguard {_version()}")
    parser.set_defaults(func=None, help_of=parser)
    groups = parser.add_subparsers(dest="group", metavar="GROUP", title="command groups")

    events = add_group(groups, "events", "work with node-health events (offline)")
    p = events.add_parser(
        "classify", help="classify event files: one JSON object per signal (JSON Lines)"
    )
    p.add_argument("files", nargs="+", help="event files (EventBridge JSON)")
    p.add_argument(
        "--rebalance-action",
        default="ignore",
        choices=["ignore", "drain", "notify"],
        help="what an EC2 rebalance recommendation calls for (default ignore)",
    )
    p.add_argument("--json", action="store_true", help="one JSON array instead of JSON Lines")
    p.set_defaults(func=cmd_events_classify)

    twin = add_group(groups, "twin", "the local twin")
    for name, func, text in (
        ("up", cmd_twin_up, "start the twin and serve until interrupted"),
        ("demo", cmd_twin_demo, "start a twin, run the demo scenario, print what happened"),
    ):
        p = twin.add_parser(name, help=text)
        twin_options(p, 4566, 3000, node_recovery="Automatic" if name == "up" else "None")
        p.add_argument(
            "--nodes", type=positive_int, default=16, help="HyperPod nodes to simulate (>= 1)"
        )
        if name == "demo":
            p.add_argument(
                "--report",
                default="hyperguard-demo.html",
                help="where to write the HTML report (default hyperguard-demo.html)",
            )
        p.set_defaults(func=func)
    p = twin.add_parser(
        "scenario",
        help="run a measured scenario on a fresh twin (elastic-fault: one node fault under "
        "an elastic job, elastic_shrink against wait_for_repair; proactive-move: an AWS "
        "Health retirement announced ahead for a node under an elastic job; day-in-the-life: "
        "a simulated day of demand, hybrid burst and elastic against static allocation and "
        "on-demand sized for the peak)",
    )
    p.add_argument(
        "name",
        choices=["elastic-fault", "proactive-move", "day-in-the-life"],
        help="the scenario",
    )
    p.add_argument(
        "--side",
        choices=["hybrid", "static", "on_demand"],
        help="day-in-the-life: run one side only and print its JSON (default: all three, each "
        "in a process of its own)",
    )
    p.add_argument(
        "--hours",
        type=bounded_int(1, 24),
        default=24,
        help="day-in-the-life: the day's length, 1-24 (default 24); a shorter day scales every "
        "arrival and job by hours/24, the cluster's own timings unchanged",
    )
    twin_options(p, 0, 0)
    p.set_defaults(func=cmd_twin_scenario)
    p = twin.add_parser(
        "gameday",
        help="weeks of node failures at a given rate: each strategy's job through the real "
        "workflows on a fresh twin, measured downtime and goodput beside the planner's",
    )
    p.add_argument(
        "--instances",
        type=bounded_int(1, MAX_INSTANCES),
        default=256,
        help="instances the training run spans (default 256)",
    )
    p.add_argument(
        "--failure-rate",
        type=number_between(MIN_RATE, 1),
        default=0.0005,
        help="failures per instance-hour, a fraction (default 0.0005 = 0.05 %%)",
    )
    p.add_argument(
        "--days",
        type=number_between(0.01, 365),
        default=30,
        help="the period the failures are drawn over (default 30)",
    )
    p.add_argument(
        "--strategy",
        action="append",
        choices=["auto", "wait_for_repair", "hot_spare", "elastic_shrink"],
        help="a strategy to run (repeat for more; default all four, side by side)",
    )
    p.add_argument(
        "--measure",
        type=bounded_int(1, 50),
        default=3,
        help="failures taken through the twin per strategy (1-50, default 3); the rest "
        "are charged the mean measured downtime",
    )
    p.add_argument("--seed", type=whole, default=0, help="the failure times' seed (default 0)")
    p.add_argument("--report", help="also write an HTML report (charts) to this path")
    twin_options(p, 0, 0)
    p.set_defaults(func=cmd_twin_gameday)
    for name, func, text in (
        ("status", cmd_twin_status, "what is deployed, where, what the twin emulates, counters"),
        ("nodes", cmd_twin_nodes, "the simulated cluster's nodes"),
    ):
        p = twin.add_parser(name, help=text)
        service_options(p)
        p.set_defaults(func=func, twin_only=True)
    p = twin.add_parser("inject", help="put event files on the twin's EventBridge")
    p.add_argument("files", nargs="+", help="event files (EventBridge JSON)")
    p.add_argument("--instance-id", help="retarget the events at this node of the twin")
    service_options(p)
    p.set_defaults(func=cmd_twin_inject, twin_only=True)

    p = twin.add_parser(
        "kubeconfig",
        help="a kubeconfig that authenticates to the twin's Kubernetes as a function does",
    )
    p.add_argument(
        "--as",
        dest="as_function",
        required=True,
        metavar="FUNCTION",
        help="the function's logical id in template.yaml (SchedulerFunction, RecoveryFunction, "
        "...): the token is signed with its role, RBAC answers as it answers the function",
    )
    service_options(p)
    p.set_defaults(func=cmd_twin_kubeconfig, twin_only=True)

    p = twin.add_parser("fault", help="break a simulated node; its health agent reports it")
    p.add_argument("instance_id", help="the node (hyperguard twin nodes)")
    p.add_argument(
        "--kind",
        default="gpu",
        choices=["gpu", "persistent", "kernel"],
        help="gpu: a reboot cures it; persistent: only a replacement does; kernel: "
        "KernelReady=False, seen only through Kubernetes (a reboot cures it)",
    )
    service_options(p)
    p.set_defaults(func=cmd_twin_fault, twin_only=True)

    jobs = add_jobs_parser(groups, service_options, _job_store)
    api.add_parsers(groups, jobs, service_options, lambda args: api.ServiceApi(_service(args)))
    admin.add_parsers(groups, service_options, lambda args: api.ServiceApi(_service(args)))
    add_plan_parser(groups, lambda args: (_incident_store(args), _view_stores(args)[2]))
    views.add_parsers(groups, service_options, views.Deps(_view_stores, incidents=_incident_store))
    deps = Deps(_service, _incident_store, _operator)
    incidents.add_parsers(groups, service_options, deps)
    executions.add_parsers(groups, service_options, deps)
    watch.add_parser(groups, service_options, deps)
    p = groups.add_parser(
        "preflight",
        help="check the account and cluster against what HyperGuard needs (read only)",
        description="Each check a line: pass, warn or fail, what was found and the fix. "
        "Exit 1 when one fails.",
    )
    service_options(p)

    def run_preflight(args: argparse.Namespace) -> int:
        service = _service(args)
        return preflight.cmd_preflight(args, service, api.ServiceApi(service))

    p.set_defaults(func=run_preflight)
    completion.add_parser(groups, parser, service_options, _ids)
    return parser


def _runtime_errors() -> tuple[type[BaseException], ...]:
    """What a command may fail with that is the world's doing, not a bug: one line each. An
    error whose module the command never loaded cannot have been raised, so none is loaded
    here: `--help` and a usage error (SystemExit) stay as quick as the parser."""
    errors: list[type[BaseException]] = [CliError]
    for module, names in (
        ("hyperguard.twin.client", ("TwinUnreachableError",)),
        ("hyperguard.twin.runtime", ("TwinError",)),  # a scenario that did not finish in its limits
        ("botocore.exceptions", ("BotoCoreError", "ClientError")),
    ):
        loaded = sys.modules.get(module)
        errors += [getattr(loaded, name) for name in names if loaded is not None]
    return tuple(errors)


def _one_line(exc: BaseException) -> str:
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def _needs_the_twin(args: argparse.Namespace) -> bool:
    """A twin-only command (its control API) aimed at a real deployment."""
    from hyperguard.twin.client import default_endpoint

    return (
        bool(getattr(args, "twin_only", False)) and (args.endpoint or default_endpoint()) == "aws"
    )


def main(argv: list[str] | None = None) -> int:
    # A shell starts a background job (`hyperguard twin up &`) with SIGINT ignored, and
    # Python then leaves it so: Ctrl-C / `kill -INT` must stop every command all the same.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.func is None:  # `hyperguard` or `hyperguard GROUP`: what there is to run
            args.help_of.print_help()
            return EXIT_OK
        if getattr(args, "api_port", 0) and args.api_port == getattr(args, "port", 0):
            parser.error(f"--port and --api-port are both {args.port}: give two ports")
        if _needs_the_twin(args):  # a usage error, but one line: the options are each fine
            print(
                "hyperguard: this command needs the local twin, not --endpoint aws", file=sys.stderr
            )
            return EXIT_USAGE
        code = int(args.func(args))
        sys.stdout.flush()  # a reader gone away shows here, not at interpreter exit
        return code
    except KeyboardInterrupt:
        print("hyperguard: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's last flush does not complain too.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except _runtime_errors() as exc:
        print(f"hyperguard: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
