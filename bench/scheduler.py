"""Admission-engine benchmark in virtual time, shaped like Kueue's scheduler performance
baseline (kubernetes-sigs/kueue test/performance/scheduler).

    python bench/scheduler.py --shape baseline|large

Prints one JSON object. The workload (per shape):

* baseline: 5 cohorts of 6 teams; per team 350 small / 100 medium / 50 large jobs asking
  1 / 5 / 20 GPUs, created every 100 / 500 / 1,200 ms and running 200 / 500 / 1,000 ms.
* large: 1,000 teams (5 cohorts of 200) and 50,000 jobs: the same mix scaled to 35 / 10 / 5
  jobs per team, to show how the cost of a pass grows with the number of teams.

Every team has a nominal quota of 20 GPUs, may borrow up to 100 more (AbsoluteBorrowLimits),
lends what it does not use, preempts its own lower-priority jobs and reclaims lent capacity.
A cohort is one cluster whose installed capacity is the sum of its teams' quotas. Kueue's
priorities 50 / 100 / 200 become priority-class weights 25 / 50 / 100 (HyperPod weights stop
at 100; only the order matters). FairShare defaults to Disabled because Kueue's baseline runs
classic (non fair-sharing) preemption.

Virtual time: a pass starts when something changed (a job arrived or finished, or the previous
pass's decisions were applied) and the previous pass is over. It costs the modelled AWS
latencies below plus the measured CPU time of `schedule`; its decisions take effect when it
ends. A preempted job restarts from scratch when admitted again.

Kueue's published baseline, for comparison (not a target): 351 s total, 55.9 % minimum team
usage, average admission 16.5 s (large) / 76.8 s (medium) / 215 s (small).
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Runnable as `python bench/scheduler.py` from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from hyperguard.catalogue import InstanceSpec, StaticCatalogue
from hyperguard.governance import GovernanceState, Workload, schedule
from hyperguard.governance.decisions import DecisionKind, Decisions
from hyperguard.models.governance import (
    ComputeQuota,
    SchedulerConfig,
    accelerator_share,
)

PASS_WAKE_MS = 20.0
"""Per pass: an EventBridge/DynamoDB-stream triggered Lambda invocation on a warm container
plus reading the snapshot (a DynamoDB Query), typically 10-30 ms."""
WRITE_MS = 8.0
"""Per decision: one DynamoDB conditional write (single-digit ms inside a Region)."""
WRITE_CONCURRENCY = 1
"""Writes issued one after another (a single-threaded handler); raise to model a pool."""

INSTANCE_TYPE = "ml.p5.48xlarge"
# EC2 DescribeInstanceTypes' figures for p5.48xlarge: 8 GPUs, 192 vCPUs, 2 TiB.
CATALOGUE = StaticCatalogue({"p5.48xlarge": InstanceSpec(8, 192, 2_097_152)})
GPUS_PER_INSTANCE = 8
NOMINAL_GPUS = 20
BORROW_GPUS = 100


@dataclass(frozen=True, slots=True)
class JobClass:
    name: str
    gpus: int
    priority_weight: int
    interval_s: float
    runtime_s: float
    per_team_baseline: int


CLASSES = (
    JobClass("small", 1, 25, 0.1, 0.2, 350),
    JobClass("medium", 5, 50, 0.5, 0.5, 100),
    JobClass("large", 20, 100, 1.2, 1.0, 50),
)
SHAPES = {"baseline": (5, 6, 1.0), "large": (5, 200, 0.1)}
"""cohorts, teams per cohort, fraction of the baseline per-team job counts."""


@dataclass(slots=True)
class JobRecord:
    job_id: str
    team: str
    job_class: JobClass
    created_at: float
    admitted_at: float | None = None
    started_at: float | None = None
    generation: int = 0
    done: bool = False


@dataclass
class CohortResult:
    end_s: float
    passes: int
    preemptions: int
    admissions: int
    writes: int
    cpu_s: float
    admission_wait: dict[str, list[float]]
    team_gpu_seconds: dict[str, float]
    shrinks: int = 0
    dropped: int = 0


def team_quota(team: str, cluster_arn: str) -> ComputeQuota:
    return ComputeQuota.model_validate(
        {
            "Name": team,
            "ClusterArn": cluster_arn,
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [
                    {"InstanceType": INSTANCE_TYPE, "Accelerators": NOMINAL_GPUS}
                ],
                "ResourceSharingConfig": {
                    "Strategy": "LendAndBorrow",
                    "AbsoluteBorrowLimits": [
                        {"InstanceType": INSTANCE_TYPE, "Accelerators": BORROW_GPUS}
                    ],
                },
                "PreemptTeamTasks": "LowerPriority",
            },
            "ComputeQuotaTarget": {"TeamName": team},
        }
    )


def run_cohort(
    cohort: int,
    teams: int,
    scale: float,
    fair_share: str,
    write_ms: float,
    wake_ms: float,
    concurrency: int,
    charge_cpu: bool,
) -> CohortResult:
    cluster_arn = f"arn:aws:sagemaker:us-east-1:123456789012:cluster/cohort{cohort:07d}"
    names = [f"c{cohort}-team-{i}" for i in range(teams)]
    scheduler = SchedulerConfig.model_validate(
        {
            "PriorityClasses": [{"Name": c.name, "Weight": c.priority_weight} for c in CLASSES],
            "FairShare": fair_share,
            "IdleResourceSharing": "Enabled",
        }
    )
    instances = teams * NOMINAL_GPUS // GPUS_PER_INSTANCE
    state = GovernanceState(
        [team_quota(n, cluster_arn) for n in names],
        scheduler,
        {INSTANCE_TYPE: instances},
        CATALOGUE,
    )
    spec = CATALOGUE.spec(INSTANCE_TYPE)
    per_replica = {c.name: accelerator_share(spec, c.gpus) for c in CLASSES}

    records: dict[str, JobRecord] = {}
    arrivals: list[tuple[float, str]] = []
    for team in names:
        for job_class in CLASSES:
            for index in range(round(job_class.per_team_baseline * scale)):
                job_id = f"{team}-{job_class.name}-{index}"
                created = round(index * job_class.interval_s, 6)
                records[job_id] = JobRecord(job_id, team, job_class, created)
                arrivals.append((created, job_id))
    arrivals.sort()
    completions: list[tuple[float, int, str]] = []
    gpu_seconds: dict[str, float] = defaultdict(float)
    waits: dict[str, list[float]] = {c.name: [] for c in CLASSES}

    def stop(record: JobRecord, at: float) -> None:
        assert record.started_at is not None
        gpu_seconds[record.team] += record.job_class.gpus * (at - record.started_at)
        record.started_at = None

    finished = 0

    def take_completions(until: float) -> bool:
        nonlocal finished
        changed = False
        while completions and completions[0][0] <= until:
            at, generation, job_id = heapq.heappop(completions)
            record = records[job_id]
            if record.generation != generation or record.done:
                continue
            stop(record, at)
            record.done = True
            finished += 1
            state.remove(job_id)
            changed = True
        return changed

    next_arrival = 0
    clock = 0.0
    dirty = False
    passes = preemptions = admissions = writes = shrinks = dropped = 0
    cpu_total = 0.0
    while finished < len(records):
        if not dirty:
            upcoming = [
                t
                for t in (
                    arrivals[next_arrival][0] if next_arrival < len(arrivals) else None,
                    completions[0][0] if completions else None,
                )
                if t is not None
            ]
            if not upcoming:
                raise RuntimeError(f"cohort {cohort} stalled: {len(records) - finished} left")
            clock = max(clock, min(upcoming))
        while next_arrival < len(arrivals) and arrivals[next_arrival][0] <= clock:
            job_id = arrivals[next_arrival][1]
            record = records[job_id]
            state.add(
                Workload(
                    job_id,
                    record.team,
                    INSTANCE_TYPE,
                    per_replica[record.job_class.name],
                    1,
                    record.job_class.name,
                    record.created_at,
                )
            )
            next_arrival += 1
        take_completions(clock)
        if finished == len(records):
            break
        state.now = clock
        started = time.process_time()
        decisions = schedule(state)
        cpu = time.process_time() - started
        cpu_total += cpu
        passes += 1
        batches = -(-decisions.write_count // concurrency)
        end = clock + (wake_ms + batches * write_ms) / 1000 + (cpu if charge_cpu else 0.0)
        dirty = take_completions(end)
        state.now = end
        applied = apply_decisions(state, decisions, records, stop, end)
        for job_id in applied.started:
            record = records[job_id]
            heapq.heappush(
                completions, (end + record.job_class.runtime_s, record.generation, job_id)
            )
            record.admitted_at = end
            record.started_at = end
        admissions += len(applied.started)
        preemptions += applied.preempted
        shrinks += applied.shrunk
        dropped += applied.dropped
        writes += decisions.write_count
        dirty = dirty or bool(decisions.actions)
        clock = end
    for record in records.values():
        assert record.admitted_at is not None
        waits[record.job_class.name].append(record.admitted_at - record.created_at)
    return CohortResult(
        end_s=clock,
        passes=passes,
        preemptions=preemptions,
        admissions=admissions,
        writes=writes,
        cpu_s=cpu_total,
        admission_wait=waits,
        team_gpu_seconds={n: gpu_seconds[n] for n in names},
        shrinks=shrinks,
        dropped=dropped,
    )


@dataclass(slots=True)
class Applied:
    started: list[str] = field(default_factory=list)
    preempted: int = 0
    shrunk: int = 0
    dropped: int = 0


def apply_decisions(
    state: GovernanceState,
    decisions: Decisions,
    records: dict[str, JobRecord],
    stop: Callable[[JobRecord, float], None],
    at: float,
) -> Applied:
    """What the caller's conditional writes do: a decision about a job that finished while
    the pass ran fails its condition and is dropped."""
    applied = Applied()
    for decision in decisions.actions:
        record = records[decision.job_id]
        if record.done:
            applied.dropped += 1
            continue
        state.apply_one(decision)
        if decision.kind is DecisionKind.ADMIT:
            applied.started.append(decision.job_id)
        elif decision.kind is DecisionKind.PREEMPT:
            stop(record, at)
            record.generation += 1
            applied.preempted += 1
        elif decision.kind is DecisionKind.SHRINK:
            applied.shrunk += 1
    return applied


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="baseline")
    parser.add_argument("--fair-share", choices=["Enabled", "Disabled"], default="Disabled")
    parser.add_argument("--pass-wake-ms", type=float, default=PASS_WAKE_MS)
    parser.add_argument("--write-ms", type=float, default=WRITE_MS)
    parser.add_argument("--write-concurrency", type=int, default=WRITE_CONCURRENCY)
    parser.add_argument(
        "--no-cpu-in-virtual-time",
        action="store_true",
        help="do not add the measured engine CPU time to the virtual clock (deterministic)",
    )
    args = parser.parse_args(argv)
    cohorts, teams, scale = SHAPES[args.shape]
    wall = time.perf_counter()
    results = [
        run_cohort(
            cohort,
            teams,
            scale,
            args.fair_share,
            args.write_ms,
            args.pass_wake_ms,
            args.write_concurrency,
            not args.no_cpu_in_virtual_time,
        )
        for cohort in range(cohorts)
    ]
    total_virtual = max(r.end_s for r in results)
    waits: dict[str, list[float]] = defaultdict(list)
    for result in results:
        for name, values in result.admission_wait.items():
            waits[name].extend(values)
    usage = [
        seconds / total_virtual / NOMINAL_GPUS
        for result in results
        for seconds in result.team_gpu_seconds.values()
    ]
    admissions = sum(r.admissions for r in results)
    cpu = sum(r.cpu_s for r in results)
    print(
        json.dumps(
            {
                "shape": args.shape,
                "cohorts": cohorts,
                "teams": cohorts * teams,
                "jobs": sum(len(v) for v in waits.values()),
                "total_virtual_s": round(total_virtual, 3),
                "avg_admission_s": {
                    name: round(sum(v) / len(v), 3) for name, v in sorted(waits.items())
                },
                "min_team_usage": round(min(usage), 4),
                "avg_team_usage": round(sum(usage) / len(usage), 4),
                "cpu_s_per_admission": round(cpu / admissions, 7),
                "cpu_s_per_pass": round(cpu / sum(r.passes for r in results), 7),
                "engine_cpu_s": round(cpu, 3),
                "passes": sum(r.passes for r in results),
                "admissions": admissions,
                "preemptions": sum(r.preemptions for r in results),
                "shrinks": sum(r.shrinks for r in results),
                "conditional_writes": sum(r.writes for r in results),
                "decisions_dropped_job_finished": sum(r.dropped for r in results),
                "modeled_latency": {
                    "pass_wake_ms": args.pass_wake_ms,
                    "write_ms": args.write_ms,
                    "write_concurrency": args.write_concurrency,
                    "cpu_in_virtual_time": not args.no_cpu_in_virtual_time,
                },
                "fair_share": args.fair_share,
                "wall_s": round(time.perf_counter() - wall, 2),
                "kueue_published_baseline": {
                    "total_s": 351,
                    "min_usage": 0.559,
                    "avg_admission_s": {"large": 16.5, "medium": 76.8, "small": 215},
                },
            }
        )
    )


if __name__ == "__main__":
    main()
