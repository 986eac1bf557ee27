"""Scheduler benchmark: the deployed scheduling pass in virtual time, on a real API server.

    python bench/scheduler.py [--shape small|cohort|baseline] [--fair-share Disabled|Enabled]
                              [--[no-]sensitivity]
    python bench/scheduler.py --growth 1000,10000,50000 [--growth-passes 5]
    python bench/scheduler.py --preemption

Prints one JSON object (progress goes to stderr).

What runs, unchanged: `SchedulerService.run_pass` with the real JobStore, TeamStore and
RepairPolicyStore on moto (in-process; tables from template.yaml), the real HyperPod adapter
against the emulator's SageMaker (ListClusterNodes answered by the twin's HyperPod
emulation, hyperguard_twin.aws and hyperguard_twin.cloud.hyperpod, on this bench's virtual
clock) and the real Kubernetes adapter (lightkube, over TLS) against a real upstream
kube-apiserver and etcd (the twin's `ControlPlane` with `api_only`: no controller,
scheduler, kubelet, Kueue or Karpenter runs), which serve the CRDs of an EKS cluster with
HyperPod task governance and Karpenter and judge the scheduler by HyperGuard's own RBAC
(deploy/kubernetes/hyperguard-rbac.yaml; the scheduler is a client certificate in its EKS
access entry's group, hyperguard-scheduler). Kueue's webhooks do not run: the Kueue objects
the scheduler keeps are stored as it writes them. One scheduler, as deployed: every team in
one cluster and one table, one pass at a time, each started by a batch of up to 10 wake-ups
from the FIFO queue (SchedulerQueueMapping BatchSize 10, reserved concurrency 1), which
hands the pass the jobs their bodies name as the handler does. Wake-ups come from the API
(one per submission, naming the job), from the in-cluster forwarder through EventBridge (one
per run that ends) and from the 1-minute tick.

The cluster's side is this bench's model, not the twin's controllers (they run on wall time,
and this bench runs on a virtual clock): the HyperPod nodes are registered as Node objects
once (the twin's kubelets' registration); a run starts when its object is created and ends
exactly its run time later, when the bench writes its status (Running at creation, Completed
at its end, as the HyperPod training operator writes them) through the API server as the
cluster's own identity, and the twin's forwarder code puts the run's end on the bus. A run
the service deletes first (a preemption) never ends. A run also ends while a pass runs: the
pass's list of the runs answers what the cluster holds at the virtual time it is sent, not
at the pass's start (D175).

Measured: every AWS call (botocore, by operation) and every Kubernetes request the real API
server answered (at the client's transport, by verb and resource as kube-apiserver names
them, with the objects a list returns), per pass and per admission; the CPU time of each pass
in this process (`time.process_time`) less the CPU spent inside the in-process emulators
(moto's backend and the twin's SageMaker, which stand for AWS's side of the calls and are
charged as modelled latency instead, and the bench's own counting of Kubernetes answers).
`cpu_s_per_pass` is the service's share, lightkube's TLS and decoding included;
`aws_emulator_cpu_s_per_pass` the rest: together, the process time around the pass. The API
server's own CPU is in its process and in neither; `kubernetes_wall_s_per_pass` is the wall
time the pass's Kubernetes requests took on this machine, reported, not charged.
`pass_profile`: where the passes' virtual time went, by step of the pass (PASS_STEPS: the
wake-up, the lease, the snapshot read, the reconcile, the pure decisions, the apply), each
step's modelled latency and service CPU and its calls by kind.

Modelled (virtual time): each call costs the latency in LATENCIES (the source beside each;
where AWS publishes no figure the number is an assumption and says so), Kubernetes requests
included; a pass also costs the event source mapping's time from message to handler; a job
submitted is in the table at once (a read by key finds it) but in a keys-only index's answers
only `gsi-propagation` later. Calls the service issues together (`hyperguard.concurrency`,
D162) really run on its threads; the clock then moves by the longest worker's modelled
latency, not their sum, and by all the CPU spent meanwhile (Python runs one thread at a time:
an upper bound on the time, since one thread's CPU could overlap another's wait).
`calls_issued_together_per_pass` counts those forks. The sensitivity table reruns the
workload with every modelled latency at 0.5x, 1x and 2x.

Emulator speed-ups (they change no answer the service gets, and are checked against moto's own
on the first answers, a page's first 20 items): DynamoDB item-operation responses dumped as
JSON instead of moto's shape walk; a keys-only index Query paged by its entries, as DynamoDB
pages it (moto pages by whole items: more calls than DynamoDB); a transaction saves the items it
names instead of deep-copying their tables.

Python's garbage collector walks the whole process; its CPU during a pass is charged where it
runs (`gc_cpu_s_per_pass`: the service's share is in its CPU, and so in the virtual time).
What moto keeps is frozen after each of its answers (`gc.freeze`), so that no collection of
the service's walks DynamoDB's tables, which a function's process never holds.

Workload (Kueue's scheduler-performance baseline, test/performance/scheduler/configs/
baseline/generator.yaml): per team (a Kueue ClusterQueue) 350 small / 100 medium / 50 large
jobs asking 1 / 5 / 20 GPUs, created every 100 / 500 / 1,200 ms, running 200 / 500 / 1,000 ms,
priorities 50 / 100 / 200 (HyperPod priority-class weights 25 / 50 / 100: only the order
matters); nominal quota 20 GPUs, borrow limit 100, lower-priority preemption within a team,
lent capacity reclaimed. A GPU is one replica (1 GPU per replica, p5.48xlarge, 8 per node), so
quota alone decides, as in Kueue's test, which has no nodes. Shapes: `baseline` 30 teams in one
600-GPU cluster (Kueue: 5 cohorts of 6), 15,000 jobs; `cohort` one Kueue cohort, 6 teams,
3,000 jobs; `small` (default) 6 teams, a tenth of the jobs (300).

Lone submissions (with every workload): one 1-GPU job at a time on an idle 6-team cluster,
at moments spread over the tick's minute; time to admission of each.

Mass preemption (`--preemption`, issue 38): 50 teams, 1,000 GPUs; at 0 s each team fills
its 20 GPUs with 20 one-GPU jobs of the lowest class (120 s each), at 100 s each asks for one
20-GPU job of the highest (1 s): every small job is a victim. Reported: the pass with the
most victims (its service CPU, virtual time, calls), victims by pass, and the invariants:
no job preempted twice, no team above its quota at any moment (from the jobs' histories).

Growth (`--growth N,...`): N finished jobs (Succeeded / Cancelled items cloned from jobs the
real lifecycle finished, written with BatchWriteItem) in a table that also holds a fixed active
set (24 jobs: 15 running, 9 waiting); then quiet passes: mean AWS calls and CPU per pass.
"""

from __future__ import annotations

import argparse
import functools
import gc
import heapq
import inspect
import json
import logging
import os
import platform
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2

if TYPE_CHECKING:
    from hyperguard.governance.jobs import JobLifecycle, SubmissionRules
    from hyperguard.governance.service import SchedulerService
    from hyperguard.models import Job
    from hyperguard.models.records import JobRecord
    from hyperguard.store import JobStore
    from hyperguard_twin.cloud.core import World as CloudWorld
    from hyperguard_twin.cluster import SimulatedCluster
    from hyperguard_twin.plane.kube import KubeClient
    from hyperguard_twin.plane.plane import ControlPlane

# Runnable as `python bench/scheduler.py` from a checkout without installing the package.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))

REGION = "us-east-1"
HYPERPOD = "bench-hyperpod"
EKS = "bench-eks"
INSTANCE_TYPE = "ml.p5.48xlarge"
GPUS_PER_NODE = 8
NOMINAL_GPUS = 20
BORROW_GPUS = 100
STEP_S = 0.1
"""One training step: a job asks for its run time in steps of this (max_steps)."""
TICK_S = 60.0
"""SchedulerTickRule: rate(1 minute)."""
ESM_BATCH = 10
"""SchedulerQueueMapping BatchSize (the maximum for a FIFO queue)."""
RUN_LIMIT_S = 4 * 3600.0
"""Virtual time after which a run that has not finished every job is cut short."""
LEASE_TTL_S = 86_400.0
KUEUE_BASELINE_COMMIT = "fab9b7ce708a583695ca1aaf921739e2066c2071"


@dataclass(frozen=True, slots=True)
class JobClass:
    name: str
    gpus: int
    priority_weight: int
    interval_s: float
    runtime_s: float
    per_team: int


CLASSES = (
    JobClass("small", 1, 25, 0.1, 0.2, 350),
    JobClass("medium", 5, 50, 0.5, 0.5, 100),
    JobClass("large", 20, 100, 1.2, 1.0, 50),
)
SHAPES = {"baseline": (30, 1.0), "cohort": (6, 1.0), "small": (6, 0.1), "tiny": (2, 0.02)}
"""Teams in the one cluster, and the fraction of Kueue's per-team job counts (`tiny` is the
smoke test's)."""
PROGRESS_EVERY = int(os.environ.get("BENCH_PROGRESS_EVERY", "10"))
"""A progress line on stderr every this many passes."""
LONG_SHAPES = frozenset({"baseline", "cohort"})
"""Shapes whose run takes hours here (BENCHMARKS.md): no sensitivity reruns unless asked."""


@dataclass(frozen=True, slots=True)
class Latency:
    base_ms: float
    per_object_ms: float = 0.0
    """Per object a list returns (Kubernetes lists)."""


_DDB = (
    "DynamoDB Developer Guide, 'What is Amazon DynamoDB?': 'single-digit millisecond "
    "performance at any scale' (https://docs.aws.amazon.com/amazondynamodb/latest/"
    "developerguide/Introduction.html); the figure inside that range is an assumption"
)
_DDB_MULTI = (
    "assumption: a request that reads or writes many items (a page of up to 1 MB, up to "
    "100 keys, a transaction's two phases) at twice a single-item request; " + _DDB
)
_GSI = (
    "AWS re:Post Knowledge Center 'dynamodb-missing-table-items-gsi': 'Write operations "
    "propagate to a GSI within 1 second' (https://repost.aws/knowledge-center/"
    "dynamodb-missing-table-items-gsi); 0.5 s typical is an assumption"
)
_K8S = (
    "assumption; kubernetes/community sig-scalability/slos/api_call_latency.md: the latency "
    "of a read-only call 'should be proportional to the amount of work to do (which is "
    "number of objects of a given type in a given scope) plus some constant overhead'"
)
_CONTROL = "assumption: AWS publishes no latency for SageMaker / EC2 control-plane reads"
_ESM = (
    "assumption for the time from a message to the handler's start; FIFO: BatchSize at most "
    "10, 'Batching window is not supported for FIFO queues' (https://docs.aws.amazon.com/"
    "lambda/latest/dg/services-sqs-parameters.html)"
)
_EVENTS = "assumption: AWS publishes no EventBridge delivery latency (PutEvents → SQS target)"
_SQS = "assumption: SQS SendMessage from the API function"

LATENCIES: dict[str, tuple[Latency, str]] = {
    "dynamodb:GetItem": (Latency(5), _DDB),
    "dynamodb:PutItem": (Latency(5), _DDB),
    "dynamodb:UpdateItem": (Latency(5), _DDB),
    "dynamodb:DeleteItem": (Latency(5), _DDB),
    "dynamodb:Query": (Latency(10), _DDB_MULTI),
    "dynamodb:Scan": (Latency(10), _DDB_MULTI),
    "dynamodb:BatchGetItem": (Latency(10), _DDB_MULTI),
    "dynamodb:BatchWriteItem": (Latency(10), _DDB_MULTI),
    "dynamodb:TransactWriteItems": (Latency(10), _DDB_MULTI),
    "dynamodb:gsi-propagation": (Latency(500), _GSI),
    "sagemaker:ListClusterNodes": (Latency(100), _CONTROL),
    "sagemaker:DescribeCluster": (Latency(100), _CONTROL),
    "ec2:DescribeInstanceTypes": (Latency(100), _CONTROL),
    "kubernetes:list": (Latency(10, 0.02), _K8S),
    "kubernetes:get": (Latency(10), _K8S),
    "kubernetes:create": (Latency(10), _K8S),
    "kubernetes:patch": (Latency(10), _K8S),
    "kubernetes:update": (Latency(10), _K8S),
    "kubernetes:delete": (Latency(10), _K8S),
    "lambda:sqs-to-handler": (Latency(20), _ESM),
    "sqs:SendMessage": (Latency(10), _SQS),
    "events:forwarder-to-queue": (Latency(500), _EVENTS),
}


class UnmodelledCallError(KeyError):
    """The service made a call the latency model has no figure for."""


class Latencies:
    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def ms(self, kind: str, objects: int = 0) -> float:
        try:
            latency, _ = LATENCIES[kind]
        except KeyError:
            raise UnmodelledCallError(kind) from None
        return (latency.base_ms + latency.per_object_ms * objects) * self.scale

    def s(self, kind: str, objects: int = 0) -> float:
        return self.ms(kind, objects) / 1000


EPOCH = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


@dataclass
class Fork:
    """Calls issued together: the thread that issued them, its lane's latency then, and the
    worker threads that ran them."""

    parent: int
    base: float
    workers: set[int] = field(default_factory=set)


class Meter:
    """The virtual clock, and what every pass costs.

    While `measuring`, each AWS call and Kubernetes request is counted and moves the clock
    by its modelled latency, and the CPU this process spent since the previous call — less
    the emulators' share — moves it by that much. Outside (setup, the API's submissions, the
    simulator's bookkeeping) calls are counted under `phase` and time stands still."""

    def __init__(self, latencies: Latencies) -> None:
        self.latencies = latencies
        self.t = 0.0
        self.phase = "setup"
        self.measuring = False
        self.calls: dict[str, Counter[str]] = defaultdict(Counter)
        self.kube_objects: Counter[str] = Counter()
        self.kube_wall_s: dict[str, float] = defaultdict(float)
        """Wall time of the Kubernetes requests (the real API server's answers), by phase:
        measured, not charged to the virtual clock (the model's latencies are)."""
        self.kube_wall_by_request: dict[str, float] = defaultdict(float)
        """The passes' share of it, by verb and resource."""
        self.kube_objects_by_request: Counter[str] = Counter()
        """The objects the passes' lists returned, by verb and resource."""
        self.emulator_cpu = 0.0
        self.service_cpu = 0.0
        self._mark = 0.0
        self._emulator_at_mark = 0.0
        self.step = "other"
        """Which step of a pass runs (PASS_STEPS): the virtual time it costs, modelled
        latency and service CPU, is charged to it."""
        self.step_latency_s: dict[str, float] = defaultdict(float)
        self.step_cpu_s: dict[str, float] = defaultdict(float)
        self.step_calls: dict[str, Counter[str]] = defaultdict(Counter)
        self.lock = threading.RLock()
        self._lanes: dict[int, float] | None = None
        """While the service issues calls together (`hyperguard.concurrency`): each worker
        thread's modelled latency since the outermost fork (None: no calls in flight
        together)."""
        self._depth = 0
        """Forks open: 2 while the calls of `concurrency.beside`'s chain are issued together."""
        self.forks = 0
        """How many times the service issued calls together while measured."""
        self.gc_s: dict[str, float] = defaultdict(float)
        """CPU of Python's garbage collector while measured, by whose CPU it was charged to:
        the service's, or the emulator's (a collection that started inside moto). The
        collector walks the whole process, moto's tables included, which a Lambda function's
        process would not hold (BENCHMARKS.md, "The garbage collector's share")."""
        self.full_collections = 0
        """Collections of the oldest generation while measured."""
        self._emulating = threading.local()
        self._gc_started = 0.0

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=self.lane_t())

    def lane_t(self) -> float:
        """The virtual time of the calling thread: within calls issued together, the fork's
        time plus the CPU since and the latency of this worker's own calls."""
        lanes = self._lanes
        return self.t + (lanes.get(threading.get_ident(), 0.0) if lanes is not None else 0.0)

    def fork(self) -> Fork:
        """The service issues calls together: from here each worker's latency is its own,
        starting from the forking thread's (a fork inside another's: `concurrency.beside`)."""
        with self.lock:
            self.sync()
            if self._lanes is None:
                self._lanes = {}
            self._depth += 1
            if self.measuring:
                self.forks += 1
            parent = threading.get_ident()
            return Fork(parent, self._lanes.get(parent, 0.0))

    def lane(self, fork: Fork) -> None:
        """The calling thread is one of `fork`'s workers."""
        with self.lock:
            ident = threading.get_ident()
            if ident not in fork.workers and self._lanes is not None:
                fork.workers.add(ident)
                self._lanes[ident] = fork.base

    def join(self, fork: Fork) -> None:
        """All the calls issued together are done: the forking thread waited for the longest
        of its workers and of its own calls meanwhile (their CPU was charged as it ran: Python
        runs one thread at a time). The outermost join moves the clock by that."""
        with self.lock:
            self.sync()
            lanes = self._lanes if self._lanes is not None else {}
            ends = [lanes.pop(ident) for ident in fork.workers if ident in lanes]
            end = max([*ends, lanes.get(fork.parent, fork.base)])
            self._depth -= 1
            if self._depth:  # inside another fork: the parent's lane goes on
                lanes[fork.parent] = end
                return
            self._lanes = None
            if self.measuring:
                self.t += end
                self.step_latency_s[self.step] += end

    def wall(self, at: datetime) -> datetime:
        return at

    def virtual(self, wall: datetime) -> datetime:
        return wall

    def at(self, t: float) -> datetime:
        return EPOCH + timedelta(seconds=t)

    def start(self) -> None:
        self.measuring = True
        self._mark = time.process_time()
        self._emulator_at_mark = self.emulator_cpu

    def stop(self) -> None:
        self._charge_cpu()
        self.measuring = False

    def sync(self) -> None:
        """Bring the clock up to now: before a call, so that what the call does on the other
        side happens at the right virtual time."""
        with self.lock:
            if self.measuring:
                self._charge_cpu()

    def _charge_cpu(self) -> None:
        now = time.process_time()
        cpu = (now - self._mark) - (self.emulator_cpu - self._emulator_at_mark)
        self.service_cpu += cpu
        self.step_cpu_s[self.step] += cpu
        self.t += cpu
        self._mark, self._emulator_at_mark = now, self.emulator_cpu

    def call(self, kind: str, objects: int = 0) -> None:
        with self.lock:
            self.calls[self.phase][kind] += 1
            if kind.startswith("kubernetes:"):
                self.kube_objects[self.phase] += objects
            if self.measuring:
                self._charge_cpu()
                latency = self.latencies.s(kind.split(" ")[0], objects)
                if self._lanes is not None:  # a worker's: the join charges the longest lane
                    lane = threading.get_ident()
                    self._lanes[lane] = self._lanes.get(lane, 0.0) + latency
                else:
                    self.t += latency
                    self.step_latency_s[self.step] += latency
                self.step_calls[self.step][kind] += 1

    @contextmanager
    def stepping(self, step: str) -> Iterator[None]:
        """Charge what runs inside to `step` (the CPU before it to the step before)."""
        self.sync()
        before, self.step = self.step, step
        try:
            yield
        finally:
            self.sync()
            self.step = before

    @contextmanager
    def emulating(self) -> Iterator[None]:
        """CPU that is not the service's: inside moto or the twin's SageMaker (AWS's side of a
        call), or the bench's own counting of Kubernetes answers. The calling thread's own
        CPU (`thread_time`): other threads may run meanwhile."""
        started = time.thread_time()
        try:
            with self.not_the_service():
                yield
        finally:
            spent = time.thread_time() - started
            with self.lock:
                self.emulator_cpu += spent

    @contextmanager
    def not_the_service(self) -> Iterator[None]:
        """This thread runs what is not the service's (its garbage collections are the
        emulator's), without touching the meter's lock: the cluster side's status writers
        run while the thread that waits for them holds it."""
        self._emulating.depth = getattr(self._emulating, "depth", 0) + 1
        try:
            yield
        finally:
            self._emulating.depth -= 1

    def collected(self, phase: str, info: dict[str, Any]) -> None:
        """`gc.callbacks`' hook: a collection's CPU, on the thread that runs it (one at a
        time), counted while measured, as the emulator's inside `emulating`."""
        if phase == "start":
            self._gc_started = time.thread_time()
            return
        if not self.measuring:
            return
        side = "emulator" if getattr(self._emulating, "depth", 0) else "service"
        self.gc_s[side] += time.thread_time() - self._gc_started
        self.full_collections += info["generation"] == 2


class Patches:
    """Attributes of botocore, moto and the service replaced while a run lasts, and put back
    after it exactly as they were: the descriptor itself (a staticmethod stays one), and an
    attribute the owner inherited is removed again rather than copied onto it."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any, bool]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        own = vars(owner)
        self._undo.append((owner, name, own.get(name), name in own))
        setattr(owner, name, value)

    def undo(self) -> None:
        while self._undo:
            owner, name, value, owned = self._undo.pop()
            if owned:
                setattr(owner, name, value)
            else:
                delattr(owner, name)


class IndexLag:
    """When an item's entry appears in a keys-only index: `gsi-propagation` after the item's
    first write. Only a submission creates a `Live` entry (a job leaves the index once, when
    it ends, and never comes back), so submissions are what is delayed; reads by key see the
    item at once."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.appears_at: dict[str, float] = {}

    def written(self, key: str, at: float) -> None:
        self.appears_at[key] = at + self.meter.latencies.s("dynamodb:gsi-propagation")

    def indexed(self, key: str) -> bool:
        return self.appears_at.get(key, 0.0) <= self.meter.lane_t()


@contextmanager
def emulation(meter: Meter, lag: IndexLag) -> Iterator[Counter[str]]:
    """The meter, the index lag and the emulator speed-ups, in place for one run. Yields the
    emulator answers compared with moto's own, by operation."""
    patches, checks = Patches(), Counter[str]()
    try:
        install_aws_meter(patches, meter)
        install_emulated_dynamodb(patches, checks, lag)
        install_pass_steps(patches, meter)
        install_fork_join(patches, meter)
        gc.callbacks.append(meter.collected)
        yield checks
    finally:
        if meter.collected in gc.callbacks:
            gc.callbacks.remove(meter.collected)
        patches.undo()


def install_aws_meter(patches: Patches, meter: Meter) -> None:
    """Count every botocore call by operation, and time moto's backend as the emulator."""
    from botocore.client import BaseClient
    from moto.core.botocore_stubber import BotocoreStubber

    make_api_call = BaseClient._make_api_call

    def counted(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        meter.sync()
        try:
            return make_api_call(client, operation, params)
        finally:
            meter.call(f"{client.meta.service_model.service_name}:{operation}")

    stub = BotocoreStubber.__call__
    one_at_a_time = threading.RLock()  # AWS applies each request atomically; moto does not

    def emulated(self: BotocoreStubber, *args: Any, **kwargs: Any) -> Any:
        with one_at_a_time, meter.emulating():
            try:
                return stub(self, *args, **kwargs)
            finally:
                # What moto keeps (the tables' items, thousands written a pass) is left out
                # of every later collection: a function's process never holds DynamoDB's
                # tables, yet the young collection that ends a pass walked them (about 0.07 s
                # of a baseline pass). What the service made before the call is frozen too:
                # reference counting frees it as before, and the collection that ends the
                # pass misses only the service's own survivors (BENCHMARKS.md, "The
                # emulator's heap out of the service's collections").
                gc.freeze()

    patches.set(BaseClient, "_make_api_call", counted)
    patches.set(BotocoreStubber, "__call__", emulated)


def install_fork_join(patches: Patches, meter: Meter) -> None:
    """The calls the service issues together (`hyperguard.concurrency.bounded_map`'s pool):
    the meter forks as the pool starts and joins once every call is done, so that a pass
    waits for the longest worker's modelled latency, not for their sum (D162)."""
    from hyperguard import concurrency

    class MeteredPool(ThreadPoolExecutor):
        def __enter__(self) -> MeteredPool:
            self.fork = meter.fork()
            return self

        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            fork = self.fork

            def run() -> Any:
                meter.lane(fork)
                return fn(*args, **kwargs)

            return super().submit(run)

        def __exit__(self, *exc: object) -> None:
            try:
                self.shutdown(wait=True)
            finally:
                meter.join(self.fork)

    patches.set(concurrency, "ThreadPoolExecutor", MeteredPool)


PASS_STEPS = ("wake-up", "lease", "read", "reconcile", "plan", "apply", "other")
"""A pass's steps, in the order it takes them: the wake-up (the event source mapping's
delivery of the batch, and the handler reading the jobs its bodies name), then as
`SchedulerService._pass` takes them: the lease (acquired and released), the snapshot read
(and the burst executions in flight), the reconcile (its writes and the snapshot's
refresh), the pure decisions, the admissions and capacity they apply; "other" is what runs
between them."""


def install_pass_steps(patches: Patches, meter: Meter) -> None:
    """Charge each step of a pass to its name: the service's own methods, wrapped."""
    from hyperguard.governance import service
    from hyperguard.governance.applier import PassApplier
    from hyperguard.governance.reader import SnapshotReader
    from hyperguard.store.teams import TeamStore

    def charged(step: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def stepped(*args: Any, **kwargs: Any) -> Any:
            with meter.stepping(step):
                return function(*args, **kwargs)

        return stepped

    steps: list[tuple[Any, str, str]] = [
        (TeamStore, "acquire_lease", "lease"),
        (TeamStore, "release_lease", "lease"),
        (SnapshotReader, "read", "read"),
        (SnapshotReader, "bursts_in_flight", "read"),
        (PassApplier, "reconcile", "reconcile"),
        (SnapshotReader, "refresh", "reconcile"),
        (service, "plan_reconcile", "plan"),
        (service, "plan_admission", "plan"),
        (service, "wants_burst", "plan"),
        (service, "plan_capacity", "plan"),
        (PassApplier, "admit", "apply"),
        (PassApplier, "scale", "apply"),
    ]
    for owner, name, step in steps:
        wrapped = charged(step, getattr(owner, name))
        if isinstance(inspect.getattr_static(owner, name), staticmethod):
            wrapped = staticmethod(wrapped)
        patches.set(owner, name, wrapped)


def kubernetes_by_request(meter: Meter, passes: int, most: int = 6) -> dict[str, Any]:
    """The passes' Kubernetes requests that took the API server the most wall time, per
    pass: that wall time (measured, not charged) and the objects their lists returned."""
    n = max(passes, 1)
    return {
        kind: {
            "wall_s": round(wall / n, 4),
            "objects": round(meter.kube_objects_by_request[kind] / n, 1),
        }
        for kind, wall in sorted(meter.kube_wall_by_request.items(), key=lambda kv: -kv[1])[:most]
    }


def pass_profile(meter: Meter, passes: int) -> dict[str, Any]:
    """Where the passes' virtual time went, by step: modelled latency of its calls (and the
    calls, by kind) and the service's CPU."""
    total = sum(meter.step_latency_s.values()) + sum(meter.step_cpu_s.values())
    profile = {}
    for step in PASS_STEPS:
        latency, cpu = meter.step_latency_s[step], meter.step_cpu_s[step]
        calls = meter.step_calls[step]
        profile[step] = {
            "virtual_s_per_pass": round((latency + cpu) / max(passes, 1), 4),
            "share": round((latency + cpu) / total, 4) if total else 0.0,
            "latency_s": round(latency, 3),
            "cpu_s": round(cpu, 4),
            "calls_per_pass": {
                kind: round(n / max(passes, 1), 2) for kind, n in calls.most_common()
            },
        }
    return profile


def install_emulated_dynamodb(patches: Patches, checks: Counter[str], lag: IndexLag) -> None:
    """The emulator's DynamoDB (hyperguard_twin.dynamodb: answers dumped in wire form,
    keys-only index pages, item-level transaction rollback), with `lag` deciding when an
    entry appears in the index; a keys-only answer that differs from moto's stops the run."""
    from hyperguard_twin.dynamodb import replacements

    for owner, name, value in replacements(checks, indexed=lag.indexed, strict=True):
        patches.set(owner, name, value)


NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


def kube_request(method: str, path: str, watch: bool = False) -> tuple[str, str]:
    """(verb, resource[/subresource]) of a request, as kube-apiserver's RequestInfo names
    them (staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go)."""
    parts = [p for p in path.split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # /api/v1, /apis/<group>/<version>
    if parts[:1] == ["namespaces"] and len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
        parts = parts[2:]
    resource = parts[0] if parts else "?"
    named = len(parts) > 1
    if len(parts) > 2:
        resource += f"/{parts[2]}"
    verbs = {
        "GET": "watch" if watch else "get" if named else "list",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }
    return verbs.get(method, method.lower()), resource


class MeteredTransport(httpx2.BaseTransport):
    """The service's Kubernetes client's transport: each request goes to the real
    kube-apiserver; the meter counts it by verb and resource (and the objects a list
    returns) and adds up its wall time. Each run created is reported to the run model, and
    before a list of runs the runs due to have ended by then end (`RunModel.end_due`)."""

    def __init__(self, inner: httpx2.BaseTransport, meter: Meter, runs: RunModel) -> None:
        self.inner = inner
        self.meter = meter
        self.runs = runs

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.meter.sync()
        watch = request.url.params.get("watch") in ("true", "1")
        verb, resource = kube_request(request.method, request.url.path, watch)
        if verb == "list" and resource in RUN_RESOURCES:
            self.runs.end_due(self.meter.lane_t())
        started = time.perf_counter()
        response = self.inner.handle_request(request)
        response.read()
        took = time.perf_counter() - started
        with self.meter.lock, self.meter.emulating():
            ok = response.status_code < 300
            answer = json.loads(response.content) if ok and verb in ("list", "create") else {}
            if verb == "create" and resource in RUN_RESOURCES:
                self.runs.created(answer)
        objects = len(answer.get("items") or [])
        with self.meter.lock:
            self.meter.kube_wall_s[self.meter.phase] += took
            if self.meter.phase == "pass":
                self.meter.kube_wall_by_request[f"{verb} {resource}"] += took
                self.meter.kube_objects_by_request[f"{verb} {resource}"] += objects
        self.meter.call(f"kubernetes:{verb} {resource}", objects)
        return response

    def close(self) -> None:
        self.inner.close()


RUN_RESOURCES = frozenset({"hyperpodpytorchjobs", "jobs"})
STATUS_WRITERS = 8
"""Status writes of the cluster's side (runs started, runs ended) sent together. One at a time,
each waited about 3.5 ms for kube-apiserver (most of it the server's CPU: a write of a
HyperPodPyTorchJob's status is checked against the whole CRD's schema); with the server's work
overlapped, about 2 ms (BENCHMARKS.md, "The bench's own wall time"). Only the bench's wall
time changes: the writes are the cluster's, never charged to a pass."""


class RunModel:
    """The cluster's side of the runs the service dispatches, as this bench models it: a run
    starts when its object is created and ends exactly its run time later. The bench then
    writes what the HyperPod training operator would (the run's status: Running, then
    Completed) through the API server as the cluster's own identity, and HyperGuard's
    in-cluster forwarder's own tracker (`hyperguard.forwarder.RunTracker`, the code its
    Deployment runs) decides the event for the run's end, which `put` hands to EventBridge. A
    run deleted before its end (a preemption) never ends.

    A run ends at its virtual time even while a pass runs: a pass's list of the runs answers
    what the cluster holds at the moment it is sent (`end_due`), as the API server would,
    not what it held when the pass began (D175)."""

    def __init__(
        self,
        meter: Meter,
        kube: KubeClient,
        world: CloudWorld,
        put: Callable[[dict[str, Any]], None],
        runtime_of: dict[str, float],
    ) -> None:
        from hyperguard.events.kubernetes import JOB_STATUS_CHANGED
        from hyperguard.forwarder import RunTracker, entries

        self.meter = meter
        self.kube = kube
        self.world = world
        self.put = put
        self.tracker = RunTracker()
        self.entries = functools.partial(
            entries, cluster=EKS, bus="service", kind=JOB_STATUS_CHANGED
        )
        self.runtime_of = runtime_of
        self.ends: list[tuple[float, str, str]] = []
        """When each run ends, with its namespace and name (a heap)."""
        self._started: list[tuple[float, str, str]] = []
        self._writers = ThreadPoolExecutor(STATUS_WRITERS, thread_name_prefix="bench-cluster")

    def close(self) -> None:
        self._writers.shutdown()

    def created(self, run: dict[str, Any]) -> None:
        from hyperguard.cluster.workloads import JOB_ID_ANNOTATION

        meta = run.get("metadata") or {}
        if run.get("kind") != "HyperPodPyTorchJob":
            raise NotImplementedError(f"the bench models HyperPod runs only, not {run.get('kind')}")
        job_id = (meta.get("annotations") or {}).get(JOB_ID_ANNOTATION)
        if job_id in self.runtime_of:
            at, key = self.meter.lane_t(), (meta["namespace"], meta["name"])
            self._started.append((at, *key))
            heapq.heappush(self.ends, (at + self.runtime_of[job_id] + 1e-5, *key))

    def start_created(self) -> None:
        """Mark the runs created since the last call Running, as of their creation."""
        writes = []
        for at, namespace, name in self._started:
            stamp = self.world.stamp(self.meter.at(at))
            running = _condition("Running", True, "Running", stamp)
            writes.append((namespace, name, {"startTime": stamp, "conditions": [running]}))
        self._write(writes)
        self._started.clear()

    def next_end(self) -> float:
        return self.ends[0][0] if self.ends else float("inf")

    def end_due(self, t: float) -> int:
        """End every run due to have ended by virtual time `t`, as the cluster's side, not the
        pass's: neither its CPU (the status writers' threads' included) nor its requests are
        charged to the pass that lists the runs. A run created since the last
        `start_created` (by the pass now running) is not ended before it is marked Running.
        How many ended."""
        pending = {(namespace, name) for _, namespace, name in self._started}
        due = []
        with self.meter.lock, self.meter.emulating():
            while self.ends and self.ends[0][0] <= t and self.ends[0][1:] not in pending:
                due.append(heapq.heappop(self.ends))
            if due:
                self.meter.emulator_cpu += self._end(due)
        return len(due)

    def end_through(
        self, until: float, before: float, at_each: Callable[[float], None] = lambda _at: None
    ) -> int:
        """End, in order, every run due at or before `until` and before `before` (at least
        the next one): the caller knows nothing else happens until then. `at_each` is told
        each end's time before its event is put. How many ended."""
        due = [heapq.heappop(self.ends)]
        while self.ends and self.ends[0][0] <= until and self.ends[0][0] < before:
            due.append(heapq.heappop(self.ends))
        self._end(due, at_each)
        return len(due)

    def _end(
        self, due: list[tuple[float, str, str]], at_each: Callable[[float], None] = lambda _at: None
    ) -> float:
        """These runs have completed (those not deleted first): their status writes sent
        together, then each written run, in order, handed to the forwarder's tracker. The
        writers' CPU."""
        writes = []
        for at, namespace, name in due:
            stamp = self.world.stamp(self.meter.at(at))
            conditions = [
                _condition("Running", False, "Completed", stamp),
                _condition("Completed", True, "Completed", stamp),
            ]
            writes.append((namespace, name, {"completionTime": stamp, "conditions": conditions}))
        runs, cpu = self._write(writes)
        for (at, _, _), run in zip(due, runs, strict=True):
            at_each(at)
            if run is not None:
                for entry in self.entries(self.tracker.observe("MODIFIED", run)):
                    self.put(entry)
        return cpu

    def _write(
        self, writes: list[tuple[str, str, dict[str, Any]]]
    ) -> tuple[list[dict[str, Any] | None], float]:
        """Status writes, STATUS_WRITERS at a time: the runs as written (None: deleted
        first), in order, and the CPU the writers' threads spent."""

        def one(write: tuple[str, str, dict[str, Any]]) -> tuple[dict[str, Any] | None, float]:
            started = time.thread_time()
            with self.meter.not_the_service():
                run = self._status(*write)
            return run, time.thread_time() - started

        done = list(self._writers.map(one, writes))
        return [run for run, _ in done], sum(cpu for _, cpu in done)

    def _status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any] | None:
        from hyperguard_twin.plane.kube import HYPERPOD_PYTORCH_JOBS, KubeApiError

        try:
            return self.kube.patch(
                HYPERPOD_PYTORCH_JOBS, name, {"status": status}, namespace, subresource="status"
            )
        except KubeApiError as error:
            if error.code == 404:
                return None
            raise


def _condition(kind: str, true: bool, reason: str, at: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True" if true else "False",
        "reason": reason,
        "message": "",
        "lastTransitionTime": at,
    }


# -- the world: tables, cluster, service -----------------------------------------------------


@dataclass
class World:
    meter: Meter
    tables: dict[str, str]
    service: SchedulerService
    cluster: SimulatedCluster
    jobs: JobStore
    teams: list[str]
    wakes: list[tuple[float, str, str]]
    """Queued wake-ups: when each becomes visible, who sent it, and its message body (a
    heap: FIFO order is time order)."""
    runs: RunModel
    runtime_of: dict[str, float]
    emulator_checks: Counter[str]
    """Emulator answers compared with moto's own, by operation."""
    index_lag: IndexLag
    wake_sources: Counter[str] = field(default_factory=Counter)
    """Wake-ups received by the passes, by sender."""


def _quota(team: str, cluster_arn: str) -> Any:
    from hyperguard.models.governance import ComputeQuota

    return ComputeQuota.model_validate(
        {
            "Name": f"{team}-quota",
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


@contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """The service logs to stdout, which carries this script's JSON: warnings and worse go to
    stderr while a run lasts."""
    from hyperguard.observability import logger

    level = logger.log_level
    streams = [h for h in logger.handlers if isinstance(h, logging.StreamHandler)]
    before = [h.stream for h in streams]
    logger.setLevel("WARNING")
    for handler in streams:
        handler.setStream(sys.stderr)
    try:
        yield
    finally:
        logger.setLevel(level)
        for handler, stream in zip(streams, before, strict=True):
            handler.setStream(stream)


@contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """Environment variables set (None: unset) while a run lasts."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def _emulated_aws(meter: Meter, lag: IndexLag) -> Iterator[Counter[str]]:
    """moto in-process, with fresh clients, the meter, the index lag and the emulator
    speed-ups."""
    from moto import mock_aws

    from hyperguard import aws

    with ExitStack() as stack:
        stack.enter_context(
            _environment(
                AWS_ACCESS_KEY_ID="bench",
                AWS_SECRET_ACCESS_KEY="bench",
                AWS_DEFAULT_REGION=REGION,
                AWS_REGION=REGION,
                AWS_ENDPOINT_URL=None,
            )
        )
        stack.enter_context(_logs_to_stderr())
        stack.callback(aws.forget_clients)
        aws.forget_clients()
        stack.enter_context(mock_aws())
        yield stack.enter_context(emulation(meter, lag))


def _configure(tables: dict[str, str], teams: list[str], cluster_arn: str, fair_share: str) -> Any:
    """Every team's quota and the scheduler policy, as an administrator sets them."""
    from hyperguard.models.governance import SchedulerConfig
    from hyperguard.store import TeamStore

    store = TeamStore(tables["TeamsTable"])
    for team in teams:
        store.put_quota(_quota(team, cluster_arn), target_version=None)
    config = {
        "PriorityClasses": [{"Name": c.name, "Weight": c.priority_weight} for c in CLASSES],
        "FairShare": fair_share,
        "IdleResourceSharing": "Enabled",
    }
    store.put_scheduler_config(SchedulerConfig.model_validate(config), target_version=None)
    return store


@contextmanager
def _api_server() -> Iterator[ControlPlane]:
    """Upstream etcd and kube-apiserver only (`hyperguard_twin.plane`, `api_only`), serving
    the CRDs of an EKS cluster with HyperPod task governance and Karpenter, with HyperGuard's
    RBAC applied as the install guide says (deploy/kubernetes/hyperguard-rbac.yaml)."""

    from hyperguard_twin.plane.components import ensure_built
    from hyperguard_twin.plane.plane import ControlPlane
    from hyperguard_twin.plane.settings import PlaneSettings

    built = ensure_built(ROOT, only=("kube", "etcd", "kueue", "karpenter"))
    plane = ControlPlane(built, PlaneSettings(cluster_name=EKS, api_only=True))
    plane.start()
    try:
        admin = plane.client()
        admin.apply_file(ROOT / "deploy" / "kubernetes" / "hyperguard-rbac.yaml")
        yield plane
    finally:
        plane.stop()


def _scheduler_client(plane: ControlPlane, meter: Meter, runs: RunModel) -> Any:
    """lightkube's Client as the scheduler function has it, but for the identity: a client
    certificate in the scheduler's Kubernetes group (hyperguard-scheduler, its EKS access
    entry's) instead of an EKS token, so that RBAC judges it as it judges the function."""
    import ssl

    from lightkube import Client, KubeConfig
    from lightkube.config.models import Cluster, User

    from hyperguard.cluster.kubernetes import FIELD_MANAGER

    identity = plane.pki.client("bench-scheduler", "hyperguard-bench", "hyperguard-scheduler")
    context = ssl.create_default_context(cafile=str(plane.pki.ca))
    context.load_cert_chain(str(identity.cert), str(identity.key))
    transport = MeteredTransport(httpx2.HTTPTransport(verify=context), meter, runs)
    config = KubeConfig.from_one(cluster=Cluster(server=plane.endpoint), user=User())
    return Client(config=config, transport=transport, trust_env=False, field_manager=FIELD_MANAGER)


@contextmanager
def world(teams: int, latencies: Latencies, fair_share: str) -> Iterator[World]:
    """The service as deployed, on the emulator and a real API server, with a `teams`-team
    cluster (20 GPUs each)."""
    import boto3

    from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
    from hyperguard.cluster.hyperpod import HyperPodAdapter
    from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
    from hyperguard.cluster.kubernetes import KubernetesAdapter
    from hyperguard.governance.service import SchedulerService
    from hyperguard.store import JobStore
    from hyperguard_twin import aws as twin_aws
    from hyperguard_twin.cluster import Effect, SimulatedCluster
    from hyperguard_twin.deploy import create_tables, load_template

    meter = Meter(latencies)
    lag = IndexLag(meter)
    wakes: list[tuple[float, str, str]] = []
    runtime_of: dict[str, float] = {}

    def put(entry: dict[str, Any]) -> None:
        """The in-cluster forwarder's event for a run that ended: EventBridge puts it on the
        scheduler's queue (JobStatusRule)."""
        delivered = meter.t + latencies.s("events:forwarder-to-queue")
        heapq.heappush(wakes, (delivered, "run ended", json.dumps(_eventbridge(entry))))

    def effect(_done: Effect) -> None:
        """The simulated cloud's other events (health agents'): none reaches the scheduler."""

    with ExitStack() as stack:
        plane = stack.enter_context(_api_server())
        checks = stack.enter_context(_emulated_aws(meter, lag))
        tables = create_tables(
            load_template(ROOT / "template.yaml"), boto3.client("dynamodb"), "bench-"
        )
        admin = plane.client()
        cluster = SimulatedCluster(
            meter, admin, effects=effect, hyperpod_cluster=HYPERPOD, eks_cluster=EKS
        )
        twin_aws.attach(cluster)
        stack.callback(twin_aws.attach, None)
        runs = RunModel(meter, admin, cluster.world, put, runtime_of)
        stack.callback(runs.close)
        kube = stack.enter_context(_scheduler_client(plane, meter, runs))
        names = [f"team-{i:02d}" for i in range(teams)]
        cluster.add_instance_group("workers", INSTANCE_TYPE, teams * NOMINAL_GPUS // GPUS_PER_NODE)
        team_store = _configure(tables, names, cluster.cluster_arn, fair_share)
        catalogue = Ec2InstanceCatalogue()
        jobs = JobStore(tables["JobsTable"])
        service = SchedulerService(
            jobs=jobs,
            teams=team_store,
            gateway=HyperPodEksGateway(
                HyperPodAdapter(HYPERPOD, catalogue=catalogue, sleep=lambda _s: None),
                KubernetesAdapter(EKS, client=kube),
            ),
            catalogue=catalogue,
            cluster=HYPERPOD,
            clock=meter.now,
            # The lease counts real seconds, and a pass here takes far longer in real time
            # than in virtual time (the emulators' share): it must not expire mid-pass.
            lease_ttl_s=LEASE_TTL_S,
        )
        yield World(
            meter=meter,
            tables=tables,
            service=service,
            cluster=cluster,
            jobs=jobs,
            teams=names,
            wakes=wakes,
            runs=runs,
            runtime_of=runtime_of,
            emulator_checks=checks,
            index_lag=lag,
        )


def _eventbridge(entry: dict[str, Any]) -> dict[str, Any]:
    """The event EventBridge delivers to the queue for a PutEvents entry (or the tick's, for
    none)."""
    return {
        "version": "0",
        "source": entry.get("Source", "aws.events"),
        "detail-type": entry.get("DetailType", "Scheduled Event"),
        "detail": json.loads(entry.get("Detail", "{}")),
    }


def submit(
    built: World, lifecycle: JobLifecycle, job: Job, rules: SubmissionRules, at: float
) -> str | None:
    """What the API function does for a new job at virtual time `at`: write it (its `Live`
    entry appears later), then note the wake-up on the lease item naming it (D169). The
    wake-up's message body when none was pending, else None (no message is sent)."""
    from hyperguard.messaging import WakeupMessage

    lifecycle.submit(job, principal="bench", rules=rules)
    built.index_lag.written(job.job_id, at)
    if not built.service.teams.note_wakeup(HYPERPOD, job.job_id, at):
        return None
    return WakeupMessage(reason="job submitted", job_id=job.job_id).model_dump_json(
        exclude_none=True
    )


# -- the baseline workload, pass by pass ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    job_id: str
    team: str
    job_class: JobClass


def arrivals(teams: Sequence[str], fraction: float = 1.0) -> list[Arrival]:
    return sorted(
        (
            Arrival(round(index * c.interval_s, 6), f"{team}-{c.name}-{index:03d}", team, c)
            for team in teams
            for c in CLASSES
            for index in range(max(1, round(c.per_team * fraction)))
        ),
        key=lambda a: (a.at, a.job_id),
    )


@dataclass
class PassSample:
    start: float
    end: float
    calls: Counter[str]
    kube_objects: int
    cpu_s: float
    emulator_cpu_s: float
    gc_s: dict[str, float]
    """The collector's CPU within `cpu_s` ("service") and `emulator_cpu_s` ("emulator")."""
    full_collections: int
    kube_wall_s: float
    """Wall time of the pass's Kubernetes requests to the real API server."""
    admitted: int
    succeeded: int
    conflicts: int
    preempted: int = 0
    woken_by: tuple[str, ...] = ()
    """The sources of the wake-ups that started the pass ("tick", "job submitted", ...)."""


@dataclass
class Timeline:
    passes: list[PassSample] = field(default_factory=list)
    finished_at: float | None = None
    backlog: int = 0
    """Wake-ups queued, and due, when the last job finished."""


def run_one_pass(built: World, bodies: Sequence[str] = ()) -> PassSample:
    """One pass started by the wake-ups with these message bodies, as the handler starts it."""
    from hyperguard.messaging import woken_jobs

    meter = built.meter
    before = Counter(meter.calls["pass"])
    objects = meter.kube_objects["pass"]
    cpu, emulator = meter.service_cpu, meter.emulator_cpu
    gc_before, full_before = dict(meter.gc_s), meter.full_collections
    kube_wall = meter.kube_wall_s["pass"]
    start = meter.t
    meter.phase = "pass"
    meter.start()
    with meter.stepping("wake-up"):
        named = woken_jobs(bodies)
    result = built.service.run_pass(named)
    meter.stop()
    meter.phase = "sim"
    built.runs.start_created()
    return PassSample(
        start=start,
        end=meter.t,
        calls=Counter(meter.calls["pass"]) - before,
        kube_objects=meter.kube_objects["pass"] - objects,
        cpu_s=meter.service_cpu - cpu,
        emulator_cpu_s=meter.emulator_cpu - emulator,
        gc_s={k: v - gc_before.get(k, 0.0) for k, v in meter.gc_s.items()},
        full_collections=meter.full_collections - full_before,
        kube_wall_s=meter.kube_wall_s["pass"] - kube_wall,
        admitted=len(result.admitted),
        succeeded=len(result.succeeded),
        conflicts=result.conflicts,
        preempted=len(result.preempted),
    )


def _job(arrival: Arrival, submitted_at: datetime) -> Any:
    from hyperguard.models import Job

    c = arrival.job_class
    return Job(
        job_id=arrival.job_id,
        team=arrival.team,
        priority_class=c.name,
        instance_type=INSTANCE_TYPE,
        accelerators_per_replica=1,
        replicas=c.gpus,
        max_steps=round(c.runtime_s / STEP_S),
        image="bench/trainer:1",
        submitted_at=submitted_at,
    )


def simulate(
    built: World,
    work: list[Arrival],
    limit_s: float,
    progress: Callable[[str], None] | None = None,
) -> Timeline:
    """Submissions at their creation times, wake-ups through the FIFO queue, one pass at a
    time, until every job has succeeded (or `limit_s` of virtual time has passed)."""
    from hyperguard.governance.jobs import JobLifecycle, SubmissionRules

    meter, latencies, wakes = built.meter, built.meter.latencies, built.wakes
    api_clock = [meter.now()]
    api = JobLifecycle(built.jobs, clock=lambda: api_clock[0])
    rules = SubmissionRules(True, frozenset(c.name for c in CLASSES), GPUS_PER_NODE)
    # The API function writes the job, notes the wake-up, then sends it if none was pending.
    wake_after = (
        latencies.s("dynamodb:PutItem")
        + latencies.s("dynamodb:UpdateItem")
        + latencies.s("sqs:SendMessage")
    )
    writes = sorted(work, key=lambda a: (a.at, a.job_id))
    for arrival in work:
        built.runtime_of[arrival.job_id] = arrival.job_class.runtime_s
    first_tick = meter.t - meter.t % TICK_S + TICK_S
    tick = json.dumps(_eventbridge({}))
    for k in range(int(limit_s // TICK_S) + 1):
        heapq.heappush(wakes, (first_tick + k * TICK_S, "tick", tick))
    timeline = Timeline()
    next_write, pass_free, finished = 0, meter.t, 0
    end = meter.t + limit_s
    meter.phase = "sim"
    while finished < len(work):
        due = (
            writes[next_write].at if next_write < len(writes) else float("inf"),
            built.runs.next_end(),
            max(pass_free, wakes[0][0]) if wakes else float("inf"),
        )
        at = min(due)
        if at > end:
            break
        if at == due[0]:
            arrival = writes[next_write]
            next_write += 1
            api_clock[0] = meter.at(arrival.at)
            meter.phase = "api"
            body = submit(built, api, _job(arrival, api_clock[0]), rules, arrival.at)
            if body is not None:
                heapq.heappush(wakes, (arrival.at + wake_after, "job submitted", body))
            else:
                built.wake_sources["job submitted (coalesced)"] += 1
            meter.phase = "sim"
        elif at == due[1]:
            # Every run due before the next submission and before the next pass can start
            # ends now, together: the first end's event can start that pass no sooner than
            # the forwarder's delivery after it, and an end at the pass's time comes first.
            first_event = at + latencies.s("events:forwarder-to-queue")
            next_wake = wakes[0][0] if wakes else float("inf")
            next_pass = max(pass_free, min(next_wake, first_event))

            def ended_at(t: float) -> None:
                meter.t = max(meter.t, t)

            built.runs.end_through(min(next_pass, end), due[0], ended_at)
        else:
            meter.t = max(meter.t, at)
            bodies: list[str] = []
            sources: list[str] = []
            while wakes and wakes[0][0] <= meter.t and len(bodies) < ESM_BATCH:
                _, source, body = heapq.heappop(wakes)
                built.wake_sources[source] += 1
                bodies.append(body)
                sources.append(source)
            meter.t += latencies.s("lambda:sqs-to-handler")
            meter.step_latency_s["wake-up"] += latencies.s("lambda:sqs-to-handler")
            built.cluster.advance()
            sample = replace(run_one_pass(built, bodies), woken_by=tuple(sorted(set(sources))))
            timeline.passes.append(sample)
            finished += sample.succeeded
            pass_free = meter.t
            if progress is not None and len(timeline.passes) % PROGRESS_EVERY == 0:
                progress(
                    f"pass {len(timeline.passes)}: {meter.t:.1f} s virtual, "
                    f"{finished}/{len(work)} jobs done, {sample.end - sample.start:.2f} s pass, "
                    f"{sum(sample.calls.values())} calls, {sample.admitted} admitted, "
                    f"CPU {sample.cpu_s:.2f} s service + {sample.emulator_cpu_s:.2f} s AWS emulator"
                )
    timeline.finished_at = meter.t if finished == len(work) else None
    timeline.backlog = sum(1 for t, *_ in wakes if t <= meter.t)
    return timeline


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _per_pass(samples: Sequence[PassSample]) -> dict[str, Any]:
    """Calls per pass, by AWS operation and Kubernetes verb/resource, and per admission."""
    calls: Counter[str] = Counter()
    for sample in samples:
        calls.update(sample.calls)
    aws = sum(n for k, n in calls.items() if not k.startswith("kubernetes:"))
    kube = sum(n for k, n in calls.items() if k.startswith("kubernetes:"))
    admitted = sum(s.admitted for s in samples)
    n = max(len(samples), 1)
    return {
        "passes": len(samples),
        "admissions": admitted,
        "conflicts": sum(s.conflicts for s in samples),
        "aws_calls_per_pass": round(aws / n, 2),
        "aws_calls_per_admission": round(aws / admitted, 2) if admitted else None,
        "kubernetes_calls_per_pass": round(kube / n, 2),
        "kubernetes_objects_listed_per_pass": round(sum(s.kube_objects for s in samples) / n, 1),
        "cpu_s_per_pass": round(_mean([s.cpu_s for s in samples]), 5),
        "cpu_s_per_admission": round(sum(s.cpu_s for s in samples) / admitted, 5)
        if admitted
        else None,
        "aws_emulator_cpu_s_per_pass": round(_mean([s.emulator_cpu_s for s in samples]), 5),
        "gc_cpu_s_per_pass": {
            side: round(_mean([s.gc_s.get(side, 0.0) for s in samples]), 5)
            for side in ("service", "emulator")
        },
        "full_collections": sum(s.full_collections for s in samples),
        "kubernetes_wall_s_per_pass": round(_mean([s.kube_wall_s for s in samples]), 5),
        "calls_per_pass": {k: round(v / n, 3) for k, v in sorted(calls.items())},
    }


def admission_waits(records: Sequence[JobRecord]) -> dict[str, float]:
    """Seconds from each job's submission to its last admission (jobs never admitted left
    out), from the jobs' own histories."""
    from hyperguard.models.records import JobEvent

    waits = {}
    for record in records:
        admissions = [e.at for e in record.history if e.event is JobEvent.ADMITTED]
        if admissions and record.job.submitted_at is not None:
            waits[record.job.job_id] = (admissions[-1] - record.job.submitted_at).total_seconds()
    return waits


def outcome(built: World, work: list[Arrival], timeline: Timeline) -> dict[str, Any]:
    """Kueue's measures from the jobs' own histories: time to (last) admission per class,
    usage of the teams' nominal quota (GPU-seconds held, admission to end, over the run)."""
    from hyperguard.models.records import JobEvent

    built.meter.phase = "report"
    records = built.jobs.records()
    classes = {a.job_id: a.job_class for a in work}
    waits: dict[str, list[float]] = defaultdict(list)
    for job_id, wait in admission_waits(records).items():
        waits[classes[job_id].name].append(wait)
    held: dict[str, float] = defaultdict(float)
    preemptions = 0
    for record in records:
        job = record.job
        c = classes[job.job_id]
        admitted: datetime | None = None
        for entry in record.history:
            if entry.event is JobEvent.ADMITTED:
                admitted = entry.at
            elif admitted is not None and entry.event in (JobEvent.PREEMPTED, JobEvent.FINISHED):
                held[job.team] += c.gpus * (entry.at - admitted).total_seconds()
                admitted = None
            preemptions += entry.event is JobEvent.PREEMPTED
    total = timeline.finished_at or built.meter.t
    nominal = NOMINAL_GPUS * total
    durations = [s.end - s.start for s in timeline.passes]
    return {
        "total_virtual_s": round(total, 2),
        "all_jobs_finished": timeline.finished_at is not None,
        "avg_time_to_admission_s": {
            c.name: round(_mean(waits[c.name]), 2) for c in CLASSES if waits[c.name]
        },
        "usage_of_nominal_quota": round(sum(held.values()) / (nominal * len(built.teams)), 4),
        "min_team_usage": round(min(held.get(t, 0.0) for t in built.teams) / nominal, 4),
        "preemptions": preemptions,
        "pass_virtual_s": {
            "mean": round(_mean(durations), 4),
            "p50": round(statistics.median(durations), 4) if durations else None,
            "max": round(max(durations, default=0.0), 4),
        },
        "wakeups_received": dict(sorted(built.wake_sources.items())),
        "wakeups_queued_when_done": timeline.backlog,
    }


def run_shape(shape: str, scale: float, fair_share: str) -> dict[str, Any]:
    teams, fraction = SHAPES[shape]
    with world(teams, Latencies(scale), fair_share) as built:
        work = arrivals(built.teams, fraction)
        wall = time.perf_counter()

        def progress(line: str) -> None:
            print(f"[x{scale} {time.perf_counter() - wall:5.0f} s wall] {line}", file=sys.stderr)

        timeline = simulate(built, work, limit_s=RUN_LIMIT_S, progress=progress)
        return {
            "latency_scale": scale,
            **outcome(built, work, timeline),
            **_per_pass(timeline.passes),
            "pass_profile": pass_profile(built.meter, len(timeline.passes)),
            "kubernetes_by_request_per_pass": kubernetes_by_request(
                built.meter, len(timeline.passes)
            ),
            "calls_issued_together_per_pass": round(
                built.meter.forks / max(len(timeline.passes), 1), 2
            ),
            "emulator_answers_checked": dict(built.emulator_checks),
            "wall_s": round(time.perf_counter() - wall, 1),
        }


# -- mass preemption ---------------------------------------------------------------------------

PREEMPTION_TEAMS = 50
PREEMPTION_CLASSES = (
    JobClass("small", 1, 25, 0.0, 120.0, NOMINAL_GPUS),
    JobClass("large", NOMINAL_GPUS, 100, 0.0, 1.0, 1),
)
"""Each team fills its quota with 1-GPU low-priority jobs at once, then asks for one
high-priority job of its whole quota: every small job of the team is its victim."""
LARGE_AT_S = 100.0
"""When the urgent jobs arrive: once every small job runs (the service took 60-90 s of virtual
time to submit and admit the 1,000 on 2026-11-28: at 60 s half of them ran, so a pass had 500
victims, not the 1,000 this shape stands for), and before the first of them ends (120 s)."""


def preemption_arrivals(teams: Sequence[str]) -> list[Arrival]:
    small, large = PREEMPTION_CLASSES
    fill = [
        Arrival(0.0, f"{team}-small-{index:03d}", team, small)
        for team in teams
        for index in range(small.per_team)
    ]
    urgent = [Arrival(LARGE_AT_S, f"{team}-large", team, large) for team in teams]
    return sorted(fill + urgent, key=lambda a: (a.at, a.job_id))


def peak_held(records: Sequence[JobRecord], gpus: Mapping[str, int]) -> dict[str, int]:
    """The most GPUs each team held at once, from the jobs' admissions and their ends."""
    from hyperguard.models.records import JobEvent

    changes: list[tuple[datetime, int, str]] = []
    for record in records:
        holding = False
        for entry in record.history:
            if entry.event in (JobEvent.ADMITTED, JobEvent.RESTARTED) and not holding:
                changes.append((entry.at, gpus[record.job.job_id], record.job.team))
                holding = True
            elif entry.event in (JobEvent.PREEMPTED, JobEvent.FINISHED) and holding:
                changes.append((entry.at, -gpus[record.job.job_id], record.job.team))
                holding = False
    held: Counter[str] = Counter()
    peak: dict[str, int] = {}
    for _, delta, team in sorted(changes, key=lambda c: (c[0], c[1])):  # ends first
        held[team] += delta
        peak[team] = max(peak.get(team, 0), held[team])
    return peak


def preemption(teams: int = PREEMPTION_TEAMS) -> dict[str, Any]:
    """Issue 38's mass preemption: the pass with the most victims, its CPU, virtual time and
    calls; and the invariants: no job preempted twice, no team above its quota."""
    from hyperguard.models.records import JobEvent

    with world(teams, Latencies(), "Disabled") as built:
        work = preemption_arrivals(built.teams)
        wall = time.perf_counter()

        def progress(line: str) -> None:
            print(f"[preemption {time.perf_counter() - wall:5.0f} s wall] {line}", file=sys.stderr)

        timeline = simulate(built, work, limit_s=RUN_LIMIT_S, progress=progress)
        built.meter.phase = "report"
        records = built.jobs.records()
        heaviest = max(timeline.passes, key=lambda sample: sample.preempted)
        preempted = Counter(
            r.job.job_id for r in records for e in r.history if e.event is JobEvent.PREEMPTED
        )
        gpus = {a.job_id: a.job_class.gpus for a in work}
        peak = peak_held(records, gpus)
        aws = sum(n for k, n in heaviest.calls.items() if not k.startswith("kubernetes:"))
        return {
            "teams": teams,
            "gpus": teams * NOMINAL_GPUS,
            "jobs": len(work),
            "all_jobs_finished": timeline.finished_at is not None,
            "total_virtual_s": round(timeline.finished_at or built.meter.t, 2),
            "victims": sum(preempted.values()),
            "victims_by_pass": [s.preempted for s in timeline.passes if s.preempted],
            "heaviest_pass": {
                "victims": heaviest.preempted,
                "admitted": heaviest.admitted,
                "virtual_s": round(heaviest.end - heaviest.start, 3),
                "service_cpu_s": round(heaviest.cpu_s, 3),
                "aws_emulator_cpu_s": round(heaviest.emulator_cpu_s, 3),
                "kubernetes_wall_s": round(heaviest.kube_wall_s, 3),
                "aws_calls": aws,
                "kubernetes_calls": sum(heaviest.calls.values()) - aws,
                "calls": dict(sorted(heaviest.calls.items())),
            },
            "preempted_more_than_once": sorted(j for j, n in preempted.items() if n > 1),
            "teams_above_quota": sorted(t for t, held in peak.items() if held > NOMINAL_GPUS),
            "peak_gpus_held": max(peak.values(), default=0),
            **{k: v for k, v in _per_pass(timeline.passes).items() if k != "calls_per_pass"},
            "calls_issued_together_per_pass": round(
                built.meter.forks / max(len(timeline.passes), 1), 2
            ),
            "wall_s": round(time.perf_counter() - wall, 1),
        }


# -- lone submissions: time to admission on an idle cluster ---------------------------------

LONE_AT = tuple(15.0 + 97.0 * k for k in range(6))
"""When the lone jobs are submitted: 97 s apart, so at 15, 52, 29, 6, 43 and 20 s past the
tick."""


def lone_submissions(scale: float = 1.0) -> dict[str, Any]:
    """One 1-GPU job at a time on an idle cluster: the pass its own wake-up starts admits
    it, unless that pass cannot see it; then the next wake-up (on an idle cluster, the
    tick) does."""
    with world(GROWTH_TEAMS, Latencies(scale), "Disabled") as built:
        work = [
            Arrival(at, f"lone-{k}", built.teams[k % len(built.teams)], CLASSES[0])
            for k, at in enumerate(LONE_AT)
        ]
        timeline = simulate(built, work, limit_s=LONE_AT[-1] + 2 * TICK_S)
        built.meter.phase = "report"
        waits = admission_waits(built.jobs.records())
        ordered = [round(waits[a.job_id], 3) for a in work]
        admitting = [p for p in timeline.passes if p.admitted]
        return {
            "submitted_s_past_tick": [round(at % TICK_S, 1) for at in LONE_AT],
            "admitted_by": [list(p.woken_by) for p in admitting],
            "time_to_admission_s": ordered,
            "mean_s": round(_mean(ordered), 3),
            "max_s": max(ordered),
            "passes": len(timeline.passes),
            "wakeups_received": dict(sorted(built.wake_sources.items())),
        }


# -- growth: a pass's cost against the jobs the table has ever held --------------------------

GROWTH_TEAMS = 6
ACTIVE_PER_TEAM = 4
ACTIVE_REPLICAS = 8
"""The fixed active set: 24 jobs of 8 GPUs on a 120-GPU cluster, 15 running, 9 waiting."""


def _wire_client() -> Any:
    """A DynamoDB client that takes items in wire form (the stores' resource client would
    serialise `{"S": ...}` as a map)."""
    import boto3

    return boto3.client("dynamodb", region_name=REGION)


def _finished_templates(built: World) -> list[dict[str, Any]]:
    """Items of jobs the real lifecycle finished: two that ran and succeeded (submitted, then
    admitted, dispatched and finished by passes on the simulated cluster) and one cancelled
    while pending. Their wire form is what the seeding clones."""
    from hyperguard.governance.jobs import JobLifecycle, SubmissionRules

    team = built.teams[0]
    ran = [Arrival(0.0, f"template-{c.name}", team, c) for c in CLASSES[:2]]
    timeline = simulate(built, ran, limit_s=3 * TICK_S)
    assert timeline.finished_at is not None, "the template jobs did not finish"
    lifecycle = JobLifecycle(built.jobs, clock=built.meter.now)
    rules = SubmissionRules(True, frozenset(c.name for c in CLASSES), GPUS_PER_NODE)
    cancelled = Arrival(built.meter.t, "template-cancelled", team, CLASSES[0])
    submit(built, lifecycle, _job(cancelled, built.meter.now()), rules, built.meter.t)
    outcome, _ = lifecycle.cancel(cancelled.job_id, principal="bench")
    assert outcome.applied
    ddb = _wire_client()
    return [
        ddb.get_item(TableName=built.tables["JobsTable"], Key={"job_id": {"S": a.job_id}})["Item"]
        for a in (*ran, cancelled)
    ]


def _seed(built: World, templates: list[dict[str, Any]], first: int, last: int) -> None:
    """Finished jobs `first`..`last - 1`, cloned from `templates` with their own id, team and
    submission time, written 25 to a BatchWriteItem. moto re-sums an item's size at every
    attribute it stores (quadratic in the attributes); the clones of items it already
    accepted skip that check."""
    from moto.dynamodb.models.dynamo_type import LimitedSizeDict

    ddb = _wire_client()
    table = built.tables["JobsTable"]
    requests = []
    for index in range(first, last):
        item = dict(templates[index % len(templates)])
        item["job_id"] = {"S": f"history-{index:07d}"}
        item["team"] = {"S": built.teams[index % len(built.teams)]}
        item["submitted_at"] = {"S": (EPOCH - timedelta(minutes=index)).isoformat()}
        requests.append({"PutRequest": {"Item": item}})
    unchecked = Patches()
    unchecked.set(LimitedSizeDict, "__setitem__", dict.__setitem__)
    try:
        for start in range(0, len(requests), 25):
            batch = {table: requests[start : start + 25]}
            while batch:
                batch = ddb.batch_write_item(RequestItems=batch).get("UnprocessedItems") or {}
    finally:
        unchecked.undo()


def _active_set(built: World) -> int:
    """Submit the active set and run passes until one admits nothing."""
    from hyperguard.governance.jobs import JobLifecycle, SubmissionRules

    lifecycle = JobLifecycle(built.jobs, clock=built.meter.now)
    rules = SubmissionRules(True, frozenset(c.name for c in CLASSES), GPUS_PER_NODE)
    count = 0
    for team in built.teams:
        for index in range(ACTIVE_PER_TEAM):
            c = CLASSES[index % len(CLASSES)]
            job = _job(Arrival(built.meter.t, f"{team}-active-{index}", team, c), built.meter.now())
            job = job.model_copy(update={"replicas": ACTIVE_REPLICAS, "max_steps": None})
            submit(built, lifecycle, job, rules, built.meter.t)
            count += 1
    built.meter.t += built.meter.latencies.s("dynamodb:gsi-propagation")
    for _ in range(10):
        if run_one_pass(built).admitted == 0:
            break
    return count


def growth(sizes: Sequence[int], passes: int) -> dict[str, Any]:
    with world(GROWTH_TEAMS, Latencies(1.0), "Disabled") as built:
        templates = _finished_templates(built)
        active = _active_set(built)
        built.meter.phase = "seed"
        rows = []
        held = len(templates)
        for size in sorted(sizes):
            seeding = time.perf_counter()
            built.meter.phase = "seed"
            _seed(built, templates, held, size)
            held = max(held, size)
            seeded_s = time.perf_counter() - seeding
            samples = [run_one_pass(built) for _ in range(passes)]
            row = _per_pass(samples)
            rows.append(
                {
                    "jobs": held,
                    "aws_calls_per_pass": row["aws_calls_per_pass"],
                    "cpu_s_per_pass": row["cpu_s_per_pass"],
                    "aws_emulator_cpu_s_per_pass": row["aws_emulator_cpu_s_per_pass"],
                    "kubernetes_calls_per_pass": row["kubernetes_calls_per_pass"],
                    "kubernetes_wall_s_per_pass": row["kubernetes_wall_s_per_pass"],
                    "pass_virtual_s": round(_mean([s.end - s.start for s in samples]), 4),
                    "calls_per_pass": row["calls_per_pass"],
                    "seed_wall_s": round(seeded_s, 1),
                }
            )
        return {
            "growth": rows,
            "active_jobs": active,
            "passes_per_size": passes,
            "teams": len(built.teams),
            "emulator_answers_checked": dict(built.emulator_checks),
        }


# -- Kueue's published baseline, and what differs ---------------------------------------------

KUEUE_BASELINE = {
    "source": "kubernetes-sigs/kueue test/performance/scheduler/configs/baseline/rangespec.yaml",
    "commit": KUEUE_BASELINE_COMMIT,
    "commit_date": "2026-05-13",
    "commit_title": "Graduate SchedulingEquivalenceHashing to beta (#11097)",
    "read_at": "ff69552e79ad21652c36caa97038382e55625cf7 (2026-08-22), file unchanged since",
    "thresholds": {
        "cmd.maxWallMs": 425_000,
        "clusterQueueClassesMinUsage.cq": 50,
        "wlClassesMaxAvgTimeToAdmissionMs": {"large": 23_000, "medium": 90_000, "small": 260_000},
    },
    "quoted": [
        "# Average value 351116.4 (+/- 0.9%), setting at +20%",
        "# Average value 55.9 (+/- 1.1%) with SchedulingEquivalenceHashing enabled",
        "# Average value 16501 (+/- 13%) with SchedulingEquivalenceHashing enabled, setting at "
        "+40%.",
        "# Average value 76768 (+/- 2%), setting at +20%",
        "# Average value 215468 (+/- 2%), setting at +20% accounting for observed failures",
    ],
    "averages": {
        "wall_s": 351.1,
        "usage_of_nominal_quota": 0.559,
        "avg_time_to_admission_s": {"large": 16.5, "medium": 76.8, "small": 215.5},
    },
}
DIFFERENCES = [
    "Kueue: 5 cohorts of 6 ClusterQueues, each cohort lending only within its 120 CPUs; here "
    "every team is in one cluster of the same total (a HyperPod cluster is one pool), so any "
    "team may borrow from any other",
    "Kueue's figures are wall-clock times of minimalkueue on an envtest API server (its CI "
    "machine); these are virtual times: modelled call latencies plus this machine's measured "
    "CPU",
    "Kueue's runner finishes a workload its run time after admission; here the run starts "
    "when the pass dispatches it, ends its run time later (also while a pass runs: D175), "
    "and its quota is freed by the first pass whose list of the runs shows it ended",
    "Kueue's test has no nodes; here each GPU is a 1-GPU replica placed on an 8-GPU node, so "
    "placement never refuses what quota admits",
    "priorities 50 / 100 / 200 become HyperPod priority-class weights 25 / 50 / 100",
]


def _machine() -> dict[str, Any]:
    memory_kb = 0
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        first = meminfo.read_text().splitlines()[0].split()
        memory_kb = int(first[1]) if first[0] == "MemTotal:" else 0
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(memory_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _modelled() -> dict[str, Any]:
    return {
        "latency_ms": {
            kind: (
                latency.base_ms
                if not latency.per_object_ms
                else f"{latency.base_ms} + {latency.per_object_ms} per object listed"
            )
            for kind, (latency, _) in LATENCIES.items()
        },
        "sources": {kind: source for kind, (_, source) in LATENCIES.items()},
    }


SENSITIVITY = (0.5, 1.0, 2.0)
SENSITIVITY_KEYS = (
    "total_virtual_s",
    "avg_time_to_admission_s",
    "usage_of_nominal_quota",
    "passes",
    "pass_virtual_s",
)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--fair-share", choices=["Enabled", "Disabled"], default="Disabled")
    parser.add_argument(
        "--sensitivity",
        action=argparse.BooleanOptionalAction,
        help="also run at 0.5x and 2x the modelled latencies (default: for the shapes that "
        "take minutes, not for cohort and baseline, which take hours)",
    )
    parser.add_argument(
        "--growth",
        metavar="N,N,...",
        help="finished jobs in the table for each measurement (instead of a workload)",
    )
    parser.add_argument("--growth-passes", type=int, default=5)
    parser.add_argument(
        "--preemption",
        action="store_true",
        help="mass preemption instead of a workload shape: each of 50 teams fills its quota "
        "with small low-priority jobs, then asks for one high-priority job of all of it",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    about = {
        "command": "python bench/scheduler.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": datetime.now(UTC).date().isoformat(),
        "machine": _machine(),
    }
    if args.growth:
        sizes = [int(n) for n in args.growth.split(",")]
        report = {**growth(sizes, args.growth_passes), **about, "modelled": _modelled()}
    elif args.preemption:
        report = {**about, "preemption": preemption(), "modelled": _modelled()}
    else:
        sensitivity = args.sensitivity
        if sensitivity is None:
            sensitivity = args.shape not in LONG_SHAPES
        scales = SENSITIVITY if sensitivity else (1.0,)
        runs = {scale: run_shape(args.shape, scale, args.fair_share) for scale in scales}
        teams, fraction = SHAPES[args.shape]
        report = {
            **about,
            "shape": {
                "name": args.shape,
                "teams": teams,
                "gpus": teams * NOMINAL_GPUS,
                "jobs": len(arrivals([f"t{i}" for i in range(teams)], fraction)),
                "fair_share": args.fair_share,
            },
            "result": runs[1.0],
            "lone_submissions": lone_submissions(),
            "sensitivity": [
                {"latency_scale": scale, **{k: runs[scale][k] for k in SENSITIVITY_KEYS}}
                for scale in scales
            ],
            "kueue_published_baseline": KUEUE_BASELINE,
            "comparable_with_kueue": args.shape == "baseline",
            "differences_from_kueue": DIFFERENCES,
            "modelled": _modelled(),
        }
    report["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
