"""`hyperguard incidents …` and `hyperguard nodes veto|reliability`: what recovery did, and how
each node fares, as people read it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from hyperguard.cli.deps import Deps
from hyperguard.cli.executions import STATE_COLUMNS, describe, fold_poll_loop
from hyperguard.cli.options import add_group, bounded_int, positive_int
from hyperguard.cli.output import CliError, print_json, print_renderable, print_table, table

LIST_COLUMNS = [
    ("incident_id", "INCIDENT"),
    ("instance_id", "NODE"),
    ("kind", "KIND"),
    ("severity", "SEVERITY"),
    ("opened_at", "OPENED"),
    ("status", "STATUS"),
    ("outcome", "OUTCOME"),
    ("signal_count", "SIGNALS"),
]


def outcome(incident: dict[str, Any]) -> str:
    """How the incident ended, or what is under way: the resolution when it is closed (a
    node that recovered on its own reads so, not as the repair once planned)."""
    if incident.get("resolution"):
        return str(incident["resolution"])
    if incident.get("status") == "needs_operator":
        notes = incident.get("notes") or []
        return f"escalated: {notes[-1]}" if notes else "escalated"
    action = incident.get("action")
    return f"{action} under way" if action else f"{incident.get('repair')} planned"


def subject(incident: dict[str, Any]) -> str:
    """What the incident is about: its node, or for a stall (D117) its job."""
    if incident.get("instance_id") or not incident.get("jobs"):
        return str(incident.get("instance_id", ""))
    return f"job {incident['jobs'][0]['job_id']}"


def list_rows(incidents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i | {"outcome": outcome(i), "instance_id": subject(i)} for i in incidents]


def timeline(incident: dict[str, Any]) -> list[dict[str, Any]]:
    """Each milestone (seconds after the first signal), in the order they happened."""
    milestones = sorted(incident.get("timings", {}).items(), key=lambda kv: kv[1])
    return [
        {"milestone": name.removeprefix("signal_to_").removesuffix("_s"), "after_s": seconds}
        for name, seconds in milestones
    ]


OTHER_REPAIRERS = {
    "hyperpod": "repaired by HyperPod's automatic node recovery",
    "karpenter": "repaired by Karpenter's node repair",
    "eks": "repaired by EKS node auto-repair",
    "nth": "drained by the AWS Node Termination Handler",
}
"""An incident's `repaired_by` other than HyperGuard, as `incidents show` says it (D148)."""


def render_incident(detail: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.text import Text

    header = [
        f"incident {detail['incident_id']}  "
        f"{'node ' if detail['instance_id'] else ''}{subject(detail)}  "
        f"cluster {detail['cluster']}",
        f"{detail['kind']} ({detail['severity']}), repair {detail['repair']}: {detail['reason']}",
        f"status {detail['status']}, outcome {outcome(detail)}",
        f"opened {detail['opened_at']}, first signal {detail['first_signal_at']}, "
        f"{detail['signal_count']} signal(s) from {', '.join(detail.get('sources', [])) or '-'}",
    ]
    if detail.get("replacement_instance_id"):
        header.append(f"replacement {detail['replacement_instance_id']}")
    other = OTHER_REPAIRERS.get(detail.get("repaired_by") or "")
    if other:
        header.append(f"{other} (HyperGuard deferred)")
    header += [f"  HyperPod: {line}" for line in detail.get("repair_events") or []]
    parts: list[Any] = [Text("\n".join(header))]
    parts.append(table(timeline(detail), [("milestone", "MILESTONE"), ("after_s", "AFTER (S)")]))
    execution = detail.get("execution")
    if execution:
        parts.append(
            table(
                fold_poll_loop(execution["states"]),
                STATE_COLUMNS,
                title=f"execution {execution['status']}: {detail['execution_arn']}",
            )
        )
    if detail.get("jobs"):
        parts.append(
            table(
                detail["jobs"],
                [
                    ("job_id", "JOB"),
                    ("strategy", "STRATEGY"),
                    ("checkpoint_step", "CHECKPOINT"),
                    ("resumed", "RESUMED"),
                    ("outcome", "OUTCOME"),
                ],
                title="jobs on the node" if detail["instance_id"] else "the job",
            )
        )
    if detail.get("notes"):
        parts.append(Text("notes:\n" + "\n".join(f"  {n}" for n in detail["notes"])))
    return Group(*parts)


def cmd_list(args: argparse.Namespace, deps: Deps) -> int:
    incidents = [i.model_dump(mode="json") for i in deps.incidents(args).recent(args.limit)]
    if args.json:
        print_json(incidents)
    else:
        print_table(list_rows(incidents), LIST_COLUMNS)
    return 0


def cmd_show(args: argparse.Namespace, deps: Deps) -> int:
    store = deps.incidents(args)
    incident = store.get(args.incident_id)
    if incident is None:
        raise CliError(f"no incident {args.incident_id} (hyperguard incidents list shows them)")
    detail = incident.model_dump(mode="json", exclude={"task_token", "wait_token"}) | {
        "signals": store.signals(args.incident_id),
        "timeline": timeline(incident.model_dump(mode="json")),
        "execution": (
            describe(deps.service(args).client("stepfunctions"), incident.execution_arn)
            if incident.execution_arn
            else None
        ),
    }
    if args.json:
        print_json(detail)
    else:
        print_renderable(render_incident(detail))
    return 0


def _operator_call(args: argparse.Namespace, deps: Deps, action: str, *call_args: Any) -> int:
    from hyperguard.recovery.operator import OperatorActionError

    try:
        result = getattr(deps.operator(args), action)(*call_args)
    except OperatorActionError as exc:
        raise CliError(str(exc)) from exc
    if args.json:
        print_json(result)
    else:
        print(", ".join(f"{k}: {v}" for k, v in result.items()))
    return 0


RELIABILITY_COLUMNS = [
    ("instance_id", "NODE"),
    ("logical_id", "SLOT"),
    ("pool", "POOL"),
    ("incidents", "FAULTS"),
    ("causes", "CAUSES"),
    ("mtbf_hours", "MTBF (H)"),
    ("last_incident_at", "LAST FAULT"),
    ("lemon", "LEMON"),
]
MAX_RELIABILITY_NODES = 500
"""As the API's `limit` (hyperguard.api.reliability.MAX_NODES; the API's modules load lazily)."""


def reliability_rows(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        node
        | {
            "causes": ", ".join(f"{kind} x{n}" for kind, n in node["causes"].items()),
            "lemon": "LEMON" if node["lemon"] else "",
        }
        for node in view["nodes"]
    ]


def cmd_reliability(args: argparse.Namespace, deps: Deps) -> int:
    from hyperguard.cli.api import ServiceApi

    view = ServiceApi(deps.service(args)).call("GET", f"/nodes/reliability?limit={args.limit}")
    if args.json:
        print_json(view)
        return 0
    threshold = view["lemon_incident_threshold"]
    rule = f"{threshold} faults make a lemon" if threshold else "lemons are off"
    print_table(
        reliability_rows(view),
        RELIABILITY_COLUMNS,
        title=f"{view['faults']} node faults on {view['nodes_with_faults']} nodes in the last "
        f"{view['window_days']} days, {view['lemons']} lemon(s) ({rule})",
    )
    if view["truncated"]:
        print("only the window's newest incidents were counted (docs/operations.md)")
    return 0


def add_parsers(
    groups: Any, service_options: Callable[[argparse.ArgumentParser], None], deps: Deps
) -> None:
    nodes = add_group(groups, "nodes", "node actions")
    p = nodes.add_parser("veto", help="make every repair of a node wait for approval")
    p.add_argument("instance_id", help="the node's EC2 instance id")
    p.add_argument("--reason", default="operator veto", help="why (kept with the node)")
    p.add_argument("--lift", action="store_true", help="lift the veto")
    service_options(p)
    p.set_defaults(
        func=lambda a: _operator_call(
            a, deps, "veto_node", a.instance_id, None if a.lift else a.reason
        )
    )

    p = nodes.add_parser(
        "reliability",
        help="each node's faults, causes and MTBF over the lemon window, repeat offenders "
        "first (GET /nodes/reliability, admin)",
    )
    p.add_argument(
        "--limit",
        type=bounded_int(1, MAX_RELIABILITY_NODES),
        default=50,
        help=f"at most this many nodes (1-{MAX_RELIABILITY_NODES}, default 50)",
    )
    service_options(p)
    p.set_defaults(func=lambda a: cmd_reliability(a, deps))

    incidents = add_group(groups, "incidents", "incidents: what recovery did, and decisions")
    for name, text in (
        ("approve", "let a paused recovery proceed"),
        ("veto", "stop a paused recovery: it escalates, node stays cordoned"),
        ("redrive", "run an escalated incident's recovery again"),
    ):
        p = incidents.add_parser(name, help=text)
        p.add_argument("incident_id", help="the incident (hyperguard incidents list)")
        if name != "redrive":
            p.add_argument(
                "--by",
                default=os.environ.get("USER", "operator"),
                help="who decides (default $USER)",
            )
        if name == "veto":
            p.add_argument("--reason", default="vetoed by an operator", help="why")
        service_options(p)
    incidents.choices["approve"].set_defaults(
        func=lambda a: _operator_call(a, deps, "approve", a.incident_id, a.by)
    )
    incidents.choices["veto"].set_defaults(
        func=lambda a: _operator_call(a, deps, "veto", a.incident_id, a.by, a.reason)
    )
    incidents.choices["redrive"].set_defaults(
        func=lambda a: _operator_call(a, deps, "redrive", a.incident_id)
    )
    p = incidents.add_parser("list", help="incidents newest first, with how each ended")
    p.add_argument(
        "--limit", type=positive_int, default=100, help="at most this many (default 100)"
    )
    service_options(p)
    p.set_defaults(func=lambda a: cmd_list(a, deps))
    p = incidents.add_parser(
        "show", help="one incident as a timeline: milestones, execution states, jobs, notes"
    )
    p.add_argument("incident_id", help="the incident (hyperguard incidents list)")
    service_options(p)
    p.set_defaults(func=lambda a: cmd_show(a, deps))
