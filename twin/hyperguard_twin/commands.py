"""`hyperguard twin …`: the local twin's commands, registered from the twin's side.

The product CLI (`hyperguard.cli.main`) imports no twin module: it adds the commands of
every `hyperguard.cli` entry point (pyproject.toml registers this module's `add_parsers`),
so the twin stays operator-side tooling the CLI knows only by that contract.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from functools import partial, wraps
from pathlib import Path
from typing import Any

from hyperguard.cli.options import (
    add_group,
    bounded_int,
    json_option,
    number_between,
    port,
    positive_float,
    positive_int,
    whole,
)
from hyperguard.cli.output import EXIT_FAILED, EXIT_OK, CliError, print_json, print_table, say
from hyperguard.cli.progress import progress

ROOT = Path(__file__).resolve().parents[2]


DEFAULT_TIME_SCALE = 60.0


def _start_twin(args: argparse.Namespace, **config: Any) -> Any:
    """A twin on the options' ports and clock (and `config`'s overrides), up and ready."""
    from hyperguard_twin.deploy import DeployError
    from hyperguard_twin.lambda_runtime import LayerBuildError
    from hyperguard_twin.runtime import Twin, TwinConfig, TwinError

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
    from hyperguard_twin.demo import next_steps, render, report_data, run_scenario

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
    from hyperguard_twin.report import write_report

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
    from hyperguard_twin.scenarios import elastic_fault

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
    from hyperguard_twin.proactive import proactive_move

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
    from hyperguard_twin.day import SIDES, TIME_SCALE, compare, day_in_the_life

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
    from hyperguard_twin import gameday

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


def cmd_twin_status(args: argparse.Namespace) -> int:
    status = args.service(args).twin_get("status")
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
    snapshot = args.service(args).twin_get("nodes")
    if args.json:
        print_json(snapshot)
    else:
        print_table(snapshot["nodes"], [(c, c.upper()) for c in NODE_COLUMNS])
    return EXIT_OK


def cmd_twin_inject(args: argparse.Namespace) -> int:
    from hyperguard_twin.inject import InjectError, put_entry, retarget

    service = args.service(args)
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

    answer = args.service(args).twin_get(f"kubeconfig?as={quote(args.as_function)}")
    print(answer["kubeconfig"], end="")
    return EXIT_OK


def cmd_twin_fault(args: argparse.Namespace) -> int:
    fault = args.service(args).twin_post(
        "fault", {"instance_id": args.instance_id, "kind": args.kind}
    )
    if args.json:
        print_json(fault)
    else:
        print(f"{fault['instance_id']}: {fault['kind']} fault set; its health agent reports it")
    return EXIT_OK


def _starts_a_twin(
    command: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """A command that starts a twin: a twin that could not finish what it was asked (a
    scenario past its limits) is the command's one-line failure, not a traceback."""

    @wraps(command)
    def run(args: argparse.Namespace) -> int:
        from hyperguard_twin.runtime import TwinError

        try:
            return command(args)
        except TwinError as exc:
            raise CliError(str(exc)) from exc

    return run


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


def add_parsers(
    groups: Any,
    service_options: Callable[[argparse.ArgumentParser], None],
    service: Callable[[argparse.Namespace], Any],
) -> None:
    """The `twin` command group (the `hyperguard.cli` entry point): `service` reaches the
    stack --endpoint/--stack name, as for every other command."""
    from hyperguard.planning import MAX_INSTANCES, MIN_RATE

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
        p.set_defaults(func=_starts_a_twin(func))
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
    p.set_defaults(func=_starts_a_twin(cmd_twin_scenario))
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
    p.set_defaults(func=_starts_a_twin(cmd_twin_gameday))
    for name, func, text in (
        ("status", cmd_twin_status, "what is deployed, where, what the twin emulates, counters"),
        ("nodes", cmd_twin_nodes, "the simulated cluster's nodes"),
    ):
        p = twin.add_parser(name, help=text)
        service_options(p)
        p.set_defaults(func=func, service=service, twin_only=True)
    p = twin.add_parser("inject", help="put event files on the twin's EventBridge")
    p.add_argument("files", nargs="+", help="event files (EventBridge JSON)")
    p.add_argument("--instance-id", help="retarget the events at this node of the twin")
    service_options(p)
    p.set_defaults(func=cmd_twin_inject, service=service, twin_only=True)

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
    p.set_defaults(func=cmd_twin_kubeconfig, service=service, twin_only=True)

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
    p.set_defaults(func=cmd_twin_fault, service=service, twin_only=True)
