"""`hyperguard jobs list|show`: jobs read straight from the JobsTable."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hyperguard.cli.options import add_group
from hyperguard.cli.output import CliError, print_json, print_renderable, print_table, table
from hyperguard.models import Job, JobStatus
from hyperguard.models.records import JobRecord

if TYPE_CHECKING:  # the store (boto3, the codec) loads when a command reads jobs, not for --help
    from hyperguard.store.jobs import JobStore

COLUMNS = [
    ("job_id", "JOB_ID"),
    ("name", "NAME"),
    ("team", "TEAM"),
    ("source", "SOURCE"),
    ("replicas", "REPLICAS"),
    ("nodes", "NODES"),
    ("status", "STATUS"),
    ("progress", "PROGRESS"),
    ("restarts", "RESTARTS"),
    ("reason", "REASON"),
]


def newest_first(records: list[JobRecord]) -> list[JobRecord]:
    """Newest submission first (jobs without a submission time last)."""
    return sorted(
        records, key=lambda r: (r.job.submitted_at is not None, r.job.submitted_at), reverse=True
    )


def job_rows(records: list[JobRecord]) -> list[dict[str, Any]]:
    """One row per job, newest submission first."""
    return [job_row(r) for r in newest_first(records)]


def job_row(record: JobRecord) -> dict[str, Any]:
    """`reason` says why a job waits or was preempted (empty while nothing needs saying)."""
    job = record.job
    return {
        "job_id": job.job_id,
        "name": job.name or "-",
        "team": job.team,
        "source": _source(job),
        "nodes": list(dict.fromkeys(job.nodes)),
        "status": job.status.value,
        "checkpoint_step": job.last_checkpoint.step if job.last_checkpoint else "-",
        "progress": _progress(record),
        "replicas": _replicas(record),
        "restarts": job.restart_count,
        "reason": record.reason,
    }


def _source(job: Job) -> str:
    """Where the job came from: `api`, or the object a team applied (`cluster:Job/name`)."""
    held = job.cluster_object
    return job.source.value if held is None else f"{job.source.value}:{held.kind}/{held.name}"


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


def fold_checkpoints(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A job's history with each run of consecutive checkpoint entries as one row: when the
    first came, how many, and the first and last step (a long run writes hundreds)."""
    folded: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []

    def flush() -> None:
        if len(run) == 1:
            folded.append(run[0])
        elif run:
            first, last = run[0], run[-1]
            steps = f"{first.get('reason', '')} ... {last.get('reason', '')}"
            folded.append(first | {"event": f"checkpoint (x{len(run)})", "reason": steps})
        run.clear()

    for entry in history:
        if entry.get("event") == "checkpoint":
            run.append(entry)
            continue
        flush()
        folded.append(entry)
    flush()
    return folded


def runs(job: Job) -> str:
    """What the job's pods run: the short form's image and command, or its own pod
    template's containers (the first is the training container), service account and
    volumes."""
    if not job.pod_template:
        return " ".join([job.image, *job.command]) or "-"
    spec = job.pod_template.get("spec") or {}
    containers = ", ".join(
        f"{c.get('name')} ({c.get('image')})" for c in spec.get("containers") or []
    )
    parts = [f"its pod template: containers {containers}"]
    if spec.get("serviceAccountName"):
        parts.append(f"service account {spec['serviceAccountName']}")
    if spec.get("volumes"):
        parts.append("volumes " + ", ".join(str(v.get("name")) for v in spec["volumes"]))
    return "; ".join(parts)


def render_job(record: JobRecord) -> Any:
    from rich.console import Group
    from rich.text import Text

    row = job_row(record)
    lines = [
        f"job {row['job_id']} ({row['name']}), team {row['team']}: {row['status']}",
        f"source {row['source']}",
        f"replicas {row['replicas']} on {', '.join(row['nodes']) or '-'}",
        f"progress {row['progress']}, restarts {row['restarts']}",
        f"runs {runs(record.job)}",
    ]
    if record.reason:
        lines.append(f"reason: {record.reason}")
    if record.slow is not None and record.job.status is JobStatus.RUNNING:
        lines.append(f"{record.slow.reason} (since {record.slow.since.isoformat()})")
    for label, at in (
        ("submitted", record.job.submitted_at),
        ("first admitted", record.first_admitted_at),
        ("started", record.started_at),
        ("ended", record.ended_at),
    ):
        if at is not None:
            lines.append(f"{label} {at.isoformat()}")
    history = fold_checkpoints([e.model_dump(mode="json") for e in record.history])
    return Group(
        Text("\n".join(lines)),
        table(
            history,
            [("at", "AT"), ("event", "EVENT"), ("status", "STATUS"), ("reason", "REASON")],
            title="history",
        ),
    )


def cmd_jobs_list(args: argparse.Namespace, store: JobStore) -> int:
    rows = job_rows(store.records())
    if args.json:
        print_json(rows)
    else:
        print_table(rows, COLUMNS)
    return 0


def cmd_jobs_show(args: argparse.Namespace, store: JobStore) -> int:
    record = store.record(args.job_id)
    if record is None:
        raise CliError(f"no job {args.job_id} (hyperguard jobs list shows them)")
    if args.json:
        print_json(record.model_dump(mode="json"))
    else:
        print_renderable(render_job(record))
    return 0


def add_jobs_parser(
    groups: Any,
    service_options: Callable[[argparse.ArgumentParser], None],
    store_for: Callable[[argparse.Namespace], JobStore],
) -> Any:
    """`groups` is main's subparsers; `store_for(args)` builds the JobStore from the
    stack outputs (JobsTableName). Returns the group's subparsers (cli.api adds to it)."""
    jobs = add_group(groups, "jobs", "training jobs")
    p = jobs.add_parser(
        "list",
        help="job, team, replicas, nodes, status, progress (last checkpoint), restarts, "
        "and why it waits or was preempted",
    )
    service_options(p)
    p.set_defaults(func=lambda args: cmd_jobs_list(args, store_for(args)))
    p = jobs.add_parser("show", help="one job: where it runs, its progress and its history")
    p.add_argument("job_id", help="the job (hyperguard jobs list)")
    service_options(p)
    p.set_defaults(func=lambda args: cmd_jobs_show(args, store_for(args)))
    return jobs
