"""The pass's running accounts, as values (`governance.decide` threads them): which node has
how many accelerators free (`Occupancy`), and what each team's jobs cost and hold on burst
capacity (`BurstSpend`).

Each decision that takes or gives back capacity returns a new value, so that a trial (an
admission with its victims) is a value the decision keeps or drops, and nothing is mutated
behind another decision's back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from hyperguard.catalogue import InstanceCatalogue, ml_name
from hyperguard.governance.placement import Pool, pool_of
from hyperguard.models import Job, Node, NodeStatus
from hyperguard.models.records import JobRecord
from hyperguard.policies.burst import BurstPolicy, PoolKind, added_by_burst


def usable(node: Node) -> bool:
    return node.status is NodeStatus.RUNNING and node.healthy and node.schedulable


def cordoned(nodes: Iterable[Node], ids: Collection[str]) -> list[Node]:
    """`nodes`, those of `ids` unschedulable."""
    return [
        n.model_copy(update={"schedulable": False}) if n.instance_id in ids else n for n in nodes
    ]


def admissible_capacity(
    nodes: Iterable[Node], spares: Collection[str]
) -> tuple[Counter[str], Counter[str]]:
    """Usable instances per `ml.` instance type that a pass may admit into (hot spares held
    back): all of them, and those on HyperPod, the only ones a HyperPod-only job can use."""
    usable_nodes = [n for n in nodes if usable(n) and n.instance_id not in spares]
    return (
        Counter(ml_name(n.instance_type) for n in usable_nodes),
        Counter(ml_name(n.instance_type) for n in usable_nodes if n.platform == "hyperpod"),
    )


def per_replica(job: Job, catalogue: InstanceCatalogue) -> int:
    """Accelerators one replica of the job holds on its node."""
    return job.accelerators_per_replica or catalogue.spec(job.instance_type).accelerators


@dataclass(frozen=True, slots=True)
class Occupancy:
    """Free accelerators per usable node; hot spares held back (they count as full)."""

    nodes: Mapping[str, Node]
    free: Mapping[str, int]
    spares: frozenset[str] = frozenset()

    @classmethod
    def of(cls, nodes: Iterable[Node], holding: Iterable[tuple[Sequence[str], int]]) -> Occupancy:
        """The usable nodes, less what `holding` takes: the nodes of each job that holds
        capacity, and its accelerators per replica."""
        found = {n.instance_id: n for n in nodes if usable(n)}
        empty = cls(found, {i: n.accelerators for i, n in found.items()})
        free = dict(empty.free)
        for placed, per in holding:
            _take(free, placed, per)
        return replace(empty, free=free)

    def reserve_spares(self, wanted: Mapping[str, int], lemons: Collection[str] = ()) -> Occupancy:
        """Up to `wanted[pool]` idle nodes per pool held back (lowest ids first, so that the
        same nodes stay spares from pass to pass). Never a lemon: recovery does not move a
        job onto one (D87), so holding it back would leave the pool a spare short (D91)."""
        free, spares = dict(self.free), set(self.spares)
        for pool, count in wanted.items():
            idle = sorted(
                i
                for i, node in self.nodes.items()
                if pool_of(node)[0] == pool and free[i] == node.accelerators and i not in lemons
            )
            for instance_id in idle[:count]:
                spares.add(instance_id)
                free[instance_id] = 0
        return replace(self, free=free, spares=frozenset(spares))

    def take(self, nodes: Iterable[str], per: int) -> Occupancy:
        free = dict(self.free)
        _take(free, nodes, per)
        return replace(self, free=free)

    def give(self, nodes: Iterable[str], per: int) -> Occupancy:
        free = dict(self.free)
        for node in nodes:
            if node in free and node not in self.spares:
                free[node] += per
        return replace(self, free=free)

    def pools(self, per: int, committed: Collection[str] = ()) -> list[Pool]:
        """The pools and their free accelerators in whole replicas of `per`; `committed`:
        the pools whose capacity is already paid for."""
        free: Counter[tuple[str, PoolKind, str, int]] = Counter()
        for instance_id, node in self.nodes.items():
            name, kind = pool_of(node)
            key = (name, kind, node.instance_type, node.accelerators)
            free[key] += self.free[instance_id] // per * per
        return [
            Pool(name, kind, itype, amount, per_instance, committed=name in committed)
            for (name, kind, itype, per_instance), amount in free.items()
        ]

    def choose(self, pool: str, per: int, replicas: int) -> tuple[list[str], Occupancy]:
        """Best fit: the fullest nodes that still take a replica, then by id; and what is
        left free after them. The pool must have the room (`room`)."""
        free = dict(self.free)
        chosen: list[str] = []
        for _ in range(replicas):
            fitting = [
                i for i, node in self.nodes.items() if pool_of(node)[0] == pool and free[i] >= per
            ]
            best = min(fitting, key=lambda i: (free[i], i))
            free[best] -= per
            chosen.append(best)
        return chosen, replace(self, free=free)

    def room(self, pool: str, per: int) -> int:
        """Replicas of `per` the pool still takes."""
        return sum(
            free // per
            for instance_id, free in self.free.items()
            if pool_of(self.nodes[instance_id])[0] == pool
        )

    def busy(self) -> set[str]:
        """Nodes some job takes accelerators of."""
        return {i for i, node in self.nodes.items() if self.free[i] < node.accelerators}


def _take(free: dict[str, int], nodes: Iterable[str], per: int) -> None:
    for node in nodes:
        if node in free:
            free[node] -= per


@dataclass(frozen=True, slots=True)
class BurstSpend:
    """USD per hour (at the burst policy's prices) and GPUs per team of the jobs on burst
    capacity: those holding it when the pass began, plus those the pass places there."""

    usd: Mapping[str, float] = field(default_factory=dict)
    gpus: Mapping[str, float] = field(default_factory=dict)

    def add(self, team: str, usd: float, gpus: float) -> BurstSpend:
        if not gpus:
            return self
        return BurstSpend(
            {**self.usd, team: self.usd.get(team, 0.0) + usd},
            {**self.gpus, team: self.gpus.get(team, 0.0) + gpus},
        )


@dataclass(frozen=True, slots=True)
class BurstMeter:
    """Prices what a job holds of burst capacity: all of an EKS pool, its share of HyperPod
    nodes a burst added."""

    policy: BurstPolicy
    nodes: Mapping[str, Node]
    catalogue: InstanceCatalogue

    def held(
        self, job: Job, kind: str | PoolKind | None, pool: str | None, nodes: Sequence[str]
    ) -> tuple[float, float]:
        """USD per hour and GPUs of the burst capacity `job` holds on `nodes` of `pool`
        (placed as `kind`, or before kinds were recorded, as its first node's)."""
        first = self.nodes.get(nodes[0]) if nodes else None
        per_instance = (
            first.accelerators
            if first is not None
            else self.catalogue.spec(job.instance_type).accelerators
        )

        def added(instance_id: str) -> bool:
            return added_by_burst(self.nodes.get(instance_id))

        return self.policy.held_on_burst(
            kind,
            pool,
            job.instance_type,
            nodes,
            per_replica(job, self.catalogue) * len(nodes),
            per_instance,
            added,
        )

    def spend(self, holding: Iterable[JobRecord]) -> BurstSpend:
        """What the jobs holding capacity spend on burst capacity, each priced as the pool
        kind it was placed as (before kinds were recorded: its first node's)."""
        spend = BurstSpend()
        for record in holding:
            job = record.job
            node = self.nodes.get(job.nodes[0]) if job.nodes else None
            kind = record.pool_kind or (pool_of(node)[1] if node is not None else None)
            usd, gpus = self.held(job, kind, job.pool, job.nodes)
            spend = spend.add(job.team, usd, gpus)
        return spend
