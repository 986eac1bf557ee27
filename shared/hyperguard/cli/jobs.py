"""`hyperguard jobs list [--json]`: jobs read straight from the JobsTable (for the lead to
wire into hyperguard.cli.main, like `incidents list`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from hyperguard.store.jobs import JobRecord, JobStore

COLUMNS = ["job_id", "name", "team", "replicas", "nodes", "status", "progress", "restarts"]


def job_rows(records: list[JobRecord]) -> list[dict[str, Any]]:
    """One row per job, newest submission first."""
    ordered = sorted(
        records, key=lambda r: (r.job.submitted_at is not None, r.job.submitted_at), reverse=True
    )
    return [
        {
            "job_id": r.job.job_id,
            "name": r.job.name or "-",
            "team": r.job.team,
            "nodes": ",".join(dict.fromkeys(r.job.nodes)) or "-",
            "status": r.job.status.value,
            "checkpoint_step": r.job.last_checkpoint.step if r.job.last_checkpoint else "-",
            "progress": _progress(r),
            "replicas": _replicas(r),
            "restarts": r.job.restart_count,
            "reason": r.reason,
        }
        for r in ordered
    ]


def _progress(record: JobRecord) -> str:
    """The last checkpoint's step, out of the training's length when the job said."""
    step = record.job.last_checkpoint.step if record.job.last_checkpoint else None
    if record.job.max_steps is None:
        return "-" if step is None else str(step)
    return f"{step or 0}/{record.job.max_steps}"


def _replicas(record: JobRecord) -> str:
    """Replicas held now, and the range an elastic job may run in."""
    job = record.job
    held = len(job.nodes) or "-"
    if job.elastic_policy is None:
        return f"{held}"
    return f"{held} ({job.elastic_policy.min_replicas}-{job.elastic_policy.max_replicas})"


def render(rows: list[dict[str, Any]]) -> str:
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in COLUMNS}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in COLUMNS)]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in COLUMNS) for r in rows]
    return "\n".join(lines)


def cmd_jobs_list(args: argparse.Namespace, store: JobStore) -> int:
    rows = job_rows(store.records())
    print(json.dumps(rows, indent=2) if args.json else render(rows))
    return 0


def add_jobs_parser(groups: Any, service_options: Any, store_for: Any) -> None:
    """`groups` is main's subparsers; `store_for(args)` builds the JobStore from the
    stack outputs (JobsTableName)."""
    jobs = groups.add_parser("jobs", help="training jobs").add_subparsers(dest="cmd", required=True)
    p = jobs.add_parser(
        "list", help="job, team, replicas, nodes, status, progress (last checkpoint), restarts"
    )
    service_options(p)
    p.set_defaults(func=lambda args: cmd_jobs_list(args, store_for(args)))
