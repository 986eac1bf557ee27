"""`hyperguard twin …`: the local twin's commands, registered from the twin's side.

The product CLI (`hyperguard.cli.main`) imports no twin module: it adds the commands of
every `hyperguard.cli` entry point (twin/pyproject.toml registers this module's
`add_parsers`), so the twin stays operator-side tooling the CLI knows only by that contract.
Here: `twin up` and `twin demo`, and the commands that talk to a running twin (status, nodes,
inject, kubeconfig, fault); the measured scenarios are `hyperguard_twin.scenario_commands`,
and starting a twin `hyperguard_twin.launch`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyperguard.cli.options import add_group, positive_int
from hyperguard.cli.output import EXIT_FAILED, EXIT_OK, CliError, print_json, print_table, say
from hyperguard_twin import launch, scenario_commands


def cmd_twin_up(args: argparse.Namespace) -> int:
    twin = launch.start_twin(args)
    # Before the twin is reported up: whoever waits for that may stop it at once, and a
    # SIGTERM before the handler ended the process at once, without `down()`.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
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
    twin = launch.start_twin(args)
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
        result = run_scenario(twin, launch.ROOT / "tests" / "events", say=tell)
    finally:
        twin.down()
    tell(render(result))
    result["next_steps"] = next_steps(_cli_command())
    result["report"] = launch.write_report(args.report, report_data(result))
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


SUMMARY_COLUMNS = [
    ("event", "EVENT"),
    ("classification", "CLASSIFIED AS"),
    ("action", "ACTION"),
    ("outcome", "OUTCOME"),
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


def add_parsers(
    groups: Any,
    service_options: Callable[[argparse.ArgumentParser], None],
    service: Callable[[argparse.Namespace], Any],
) -> None:
    """The `twin` command group (the `hyperguard.cli` entry point): `service` reaches the
    stack --endpoint/--stack name, as for every other command."""
    twin = add_group(groups, "twin", "the local twin")
    for name, func, text in (
        ("up", cmd_twin_up, "start the twin and serve until interrupted"),
        ("demo", cmd_twin_demo, "start a twin, run the demo scenario, print what happened"),
    ):
        p = twin.add_parser(name, help=text)
        launch.twin_options(p, 4566, 3000, node_recovery="Automatic" if name == "up" else "None")
        p.add_argument(
            "--nodes", type=positive_int, default=16, help="HyperPod nodes to simulate (>= 1)"
        )
        if name == "demo":
            p.add_argument(
                "--report",
                default="hyperguard-demo.html",
                help="where to write the HTML report (default hyperguard-demo.html)",
            )
        p.set_defaults(func=launch.starts_a_twin(func))
    scenario_commands.add_parsers(twin)
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
