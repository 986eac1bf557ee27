"""`hyperguard views teams|classes|cluster|goodput`: the API's /views, computed the same way
(hyperguard.api.views) from the service's tables."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hyperguard.cli.options import add_group, bounded_int
from hyperguard.cli.output import CliError, print_json, print_table
from hyperguard.models import utcnow

GOODPUT_WINDOW_HOURS = (1, 720)
"""As the API's `window_hours` (hyperguard.api.views.GOODPUT_WINDOW_HOURS; not imported here:
the parser is built before any command runs, and the API's modules load lazily)."""
DEFAULT_GOODPUT_WINDOW_HOURS = 24


@dataclass(frozen=True)
class Deps:
    """How a command reaches the stores: `stores(args)` → (teams, jobs, nodes, catalogue)."""

    stores: Callable[[argparse.Namespace], tuple[Any, Any, Any, Any]]
    clock: Callable[[], datetime] = utcnow
    incidents: Callable[[argparse.Namespace], Any] | None = None
    """How `views goodput` reaches IncidentsTable (main gives the stack's, as `incidents`
    commands reach it)."""


def _incident_store(args: argparse.Namespace, deps: Deps) -> Any:
    if deps.incidents is None:
        raise CliError("views goodput: no incident store was given")
    return deps.incidents(args)


TEAM_COLUMNS = [
    ("team", "TEAM"),
    ("allocated_gpus", "ALLOCATED"),
    ("gpus_in_use", "ALLOCATED TO TASKS"),
    ("borrowed_gpus", "BORROWED"),
    ("limit_gpus", "LIMIT"),
    ("utilisation_pct", "UTILISATION %"),
    ("running_jobs", "RUNNING"),
    ("pending_jobs", "PENDING"),
    ("burst_usd_per_hour", "BURST $/H"),
    ("burst_gpus", "BURST GPUS"),
    ("gpu_hours_today", "GPU-H TODAY"),
]
CLASS_COLUMNS = [
    ("priority_class", "CLASS"),
    ("weight", "WEIGHT"),
    ("running", "RUNNING"),
    ("pending", "PENDING"),
    ("preempted", "PREEMPTED"),
    ("average_run_s", "AVG RUN S"),
    ("longest_run_s", "LONGEST RUN S"),
    ("average_wait_s", "AVG WAIT S"),
    ("longest_wait_s", "LONGEST WAIT S"),
]
CLUSTER_ROWS = [
    ("instances", "instances"),
    ("schedulable", "  schedulable"),
    ("pending_recovery", "  pending recovery"),
    ("unschedulable", "  unschedulable"),
    ("gpus", "GPUs installed"),
    ("gpus_in_use", "GPUs in use"),
    ("idle_gpus", "GPUs idle"),
    ("gpu_hours_installed_today", "GPU-hours installed today"),
    ("gpu_hours_in_use_today", "GPU-hours in use today"),
    ("idle_gpu_hours_today", "idle GPU-hours today"),
    ("running_jobs", "jobs running"),
    ("pending_jobs", "jobs pending"),
]
POOL_COLUMNS = [
    ("pool", "POOL"),
    ("kind", "KIND"),
    ("instance_type", "INSTANCE TYPE"),
    ("committed", "COMMITTED"),
    ("instances", "INSTANCES"),
    ("gpus", "GPUS"),
    ("gpus_in_use", "IN USE"),
    ("usd_per_hour", "$/H"),
    ("gpu_hours_installed_today", "GPU-H INSTALLED"),
    ("gpu_hours_in_use_today", "GPU-H IN USE"),
]

GOODPUT_JOB_COLUMNS = [
    ("team", "TEAM"),
    ("job", "JOB"),
    ("status", "STATUS"),
    ("gpus", "GPUS"),
    ("wall_h", "WALL H"),
    ("holding_h", "HOLDING H"),
    ("lost_h", "LOST H"),
    ("scheduling_goodput_pct", "SCHEDULING %"),
    ("runtime_goodput_pct", "RUNTIME %"),
    ("goodput_pct", "GOODPUT %"),
    ("faults", "FAULTS"),
    ("badput_gpu_min", "INCIDENT BADPUT GPU-MIN"),
]
GOODPUT_TEAM_COLUMNS = [
    ("team", "TEAM"),
    ("jobs", "JOBS"),
    ("wall_gpu_hours", "WALL GPU-H"),
    ("holding_gpu_hours", "HOLDING GPU-H"),
    ("productive_gpu_hours", "PRODUCTIVE GPU-H"),
    ("scheduling_goodput_pct", "SCHEDULING %"),
    ("runtime_goodput_pct", "RUNTIME %"),
    ("goodput_pct", "GOODPUT %"),
    ("detect_gpu_min", "DETECT GPU-MIN"),
    ("cordon_drain_gpu_min", "CORDON/DRAIN"),
    ("repair_gpu_min", "REPAIR"),
    ("resume_gpu_min", "RESUME"),
]


def cmd_teams(args: argparse.Namespace, deps: Deps) -> int:
    from hyperguard.api.views import read_team_views

    teams, jobs, nodes, catalogue = deps.stores(args)
    views = read_team_views(teams, jobs, nodes, catalogue, deps.clock())
    rows = [v.model_dump(mode="json") for v in views]
    if args.json:
        print_json({"teams": rows})
    else:
        print_table(rows, TEAM_COLUMNS)
    return 0


def cmd_classes(args: argparse.Namespace, deps: Deps) -> int:
    from hyperguard.api.views import read_priority_class_views

    teams, jobs, _nodes, _catalogue = deps.stores(args)
    view = read_priority_class_views(teams, jobs, deps.clock()).model_dump(mode="json")
    if args.json:
        print_json(view)
        return 0
    rows = [
        {**c, "priority_class": c["priority_class"] or "(none)"} for c in view["priority_classes"]
    ]
    print_table(rows, CLASS_COLUMNS, title=f"run and wait times since {view['since']}")
    return 0


def cmd_cluster(args: argparse.Namespace, deps: Deps) -> int:
    from hyperguard.api.views import read_cluster_view

    teams, jobs, nodes, catalogue = deps.stores(args)
    view = read_cluster_view(teams, nodes, jobs, catalogue, deps.clock()).model_dump(mode="json")
    if args.json:
        print_json(view)
        return 0
    flat = {**view, **view["instances_by_health"]}
    rows = [{"figure": label, "value": flat[key]} for key, label in CLUSTER_ROWS]
    by_status = ", ".join(f"{k} {v}" for k, v in sorted(view["instances_by_status"].items()))
    rows.insert(1, {"figure": "  by status", "value": by_status})
    print_table(
        rows, [("figure", "FIGURE"), ("value", "VALUE")], title=f"today from {view['day_start']}"
    )
    print_table(view["pools"], POOL_COLUMNS, title="by pool (cost at the burst policy's prices)")
    return 0


def cmd_goodput(args: argparse.Namespace, deps: Deps) -> int:
    from hyperguard.api.views import read_goodput_view

    _teams, jobs, _nodes, catalogue = deps.stores(args)
    incidents = _incident_store(args, deps)
    view = read_goodput_view(
        jobs, incidents, catalogue, deps.clock(), args.window_hours
    ).model_dump(mode="json")
    if args.json:
        print_json(view)
        return 0
    rows = [
        {
            **j,
            "job": j["name"] or j["job_id"],
            "wall_h": round(j["wall_s"] / 3600, 2),
            "holding_h": round(j["holding_s"] / 3600, 2),
            "lost_h": round(j["lost_s"] / 3600, 2),
            "badput_gpu_min": round(sum(b["total_gpu_min"] for b in j["badput"]), 2)
            if j["badput"]
            else None,
        }
        for j in view["jobs"]
    ]
    since = f"since {view['window_start']}"
    print_table(view["teams"], GOODPUT_TEAM_COLUMNS, title=f"goodput per team {since}")
    print_table(rows, GOODPUT_JOB_COLUMNS, title=f"goodput per job {since}")
    return 0


def add_parsers(
    groups: Any, service_options: Callable[[argparse.ArgumentParser], None], deps: Deps
) -> None:
    views = add_group(groups, "views", "utilisation as task governance shows it (docs/api.md)")
    for name, func, text in (
        (
            "teams",
            cmd_teams,
            "per team: GPUs allocated, allocated to tasks, borrowed, utilisation %%",
        ),
        (
            "classes",
            cmd_classes,
            "per priority class: running, pending, preempted; run and wait times (24 h)",
        ),
        (
            "cluster",
            cmd_cluster,
            "instances by health; GPUs installed, in use, idle; idle GPU-hours today",
        ),
    ):
        p = views.add_parser(name, help=text)
        service_options(p)
        p.set_defaults(func=lambda args, f=func: f(args, deps))
    p = views.add_parser(
        "goodput",
        help="per job and team: scheduling, runtime and overall goodput; badput per incident",
    )
    p.add_argument(
        "--window-hours",
        type=bounded_int(*GOODPUT_WINDOW_HOURS),
        default=DEFAULT_GOODPUT_WINDOW_HOURS,
        metavar="H",
        help="the last H hours (1-720, default 24)",
    )
    service_options(p)
    p.set_defaults(func=lambda args: cmd_goodput(args, deps))
