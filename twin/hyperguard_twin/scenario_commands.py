"""`hyperguard twin scenario …` and `hyperguard twin gameday`: the measured scenarios, each on
a fresh twin of its own (`hyperguard_twin.launch`), their figures as a table or JSON."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from functools import partial
from typing import Any

from hyperguard.cli.options import bounded_int, number_between, whole
from hyperguard.cli.output import EXIT_OK, CliError, print_json, print_table
from hyperguard.cli.progress import progress
from hyperguard_twin import launch


def cmd_twin_scenario(args: argparse.Namespace) -> int:
    if args.name == "proactive-move":
        return _proactive_move(args)
    if args.name == "day-in-the-life":
        return _day_in_the_life(args)
    from hyperguard_twin.scenarios import elastic_fault

    with progress("elastic-fault", 2) as step:
        step("starting a twin")
        twin = launch.start_twin(args, hyperpod_nodes=8, burst_nodes=0, seed_jobs=False)
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
        twin = launch.start_twin(args, hyperpod_nodes=6, burst_nodes=0, seed_jobs=False)
        step("a retirement announced ahead for a node under an elastic job")
        try:
            result = proactive_move(twin, launch.ROOT / "tests" / "events")
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

    if args.time_scale == launch.DEFAULT_TIME_SCALE:  # a day at x60 would take 24 minutes a side
        args.time_scale = TIME_SCALE
    if args.side is not None:
        print_json(day_in_the_life(partial(launch.start_twin, args), args.side, hours=args.hours))
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
        twin = launch.start_twin(
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
        result["report"] = launch.write_report(args.report, gameday.report_data(result))
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


def add_parsers(twin: Any) -> None:
    """`twin scenario` and `twin gameday`, in the `twin` group."""
    from hyperguard.planning import MAX_INSTANCES, MIN_RATE

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
    launch.twin_options(p, 0, 0)
    p.set_defaults(func=launch.starts_a_twin(cmd_twin_scenario))
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
    launch.twin_options(p, 0, 0)
    p.set_defaults(func=launch.starts_a_twin(cmd_twin_gameday))
