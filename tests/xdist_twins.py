"""How the Makefile's second run shares the cores: the long wall-bound work first, and never
more twins at once than `--twins-at-once`, the other workers on the tests without one.

An e2e module's twin mostly waits for its simulated clock (about half a core each), while an
integration test keeps a worker's control plane busy. With every worker on a twin the two
cores were a quarter to a third idle through the e2e modules, and the run's last 100 s went
to one test that waits for a controller (BENCHMARKS.md, 2026-11-30, "A worker more than
twins"). So a worker more than the twins: it takes the tests without a twin from the start,
and a worker without a twin takes one only while fewer than the cap are held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from xdist.scheduler import LoadGroupScheduling

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.workermanage import WorkerController

TWIN_TIER = "tests/e2e/"

LONGEST_FIRST = (
    "tests/e2e/test_burst.py",
    "tests/e2e/test_recovery.py",
    "tests/e2e/test_scenario_proactive.py",
    "tests/e2e/test_gameday.py",
    "tests/e2e/test_scenario_day.py",
    "tests/e2e/test_iam.py",
    "tests/e2e/test_cli.py",
    "tests/integration/test_twin_hyperpod_scaling.py::test_a_deleted_node_loses_its_pods",
    "tests/e2e/test_api_schema.py",
    "tests/e2e/test_rbac.py",
)
"""Run 2's units of more than a minute of wall time, longest first (a run of 2026-11-30 on
this 2-vCPU machine): started first, so that none is left to end alone. The deleted node's
test waits about a minute for kube-controller-manager's pod garbage collector (a pod whose
node has been gone 40 s, checked every 20 s), and took the run's last minute when it ran
last. A stale entry only costs order; an entry that names nothing fails
tests/unit/test_xdist_groups.py."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--twins-at-once",
        type=int,
        default=None,
        metavar="N",
        help="with -n and --dist loadgroup: at most N units of tests/e2e (each a twin) at "
        "once; the other workers take the rest. Default: no limit.",
    )


def longest_first(items: list[pytest.Item]) -> None:
    """Order `items` as LONGEST_FIRST says, every other test after them in collection order
    (a stable sort: the tests of a module keep their order)."""

    def rank(item: pytest.Item) -> int:
        for index, prefix in enumerate(LONGEST_FIRST):
            if item.nodeid == prefix or item.nodeid.startswith(f"{prefix}::"):
                return index
        return len(LONGEST_FIRST)

    items.sort(key=rank)


def make_scheduler(config: pytest.Config, log: Producer) -> LoadGroupScheduling | None:
    """The capped scheduler when `--twins-at-once` is given with `--dist loadgroup`."""
    cap = config.getoption("twins_at_once")
    if cap is None:
        return None
    if config.getoption("dist") != "loadgroup":
        raise pytest.UsageError("--twins-at-once needs --dist loadgroup")
    if cap < 1:
        raise pytest.UsageError(f"--twins-at-once must be at least 1, not {cap}")
    return TwinCappedScheduling(config, log, cap)


class TwinCappedScheduling(LoadGroupScheduling):  # type: ignore[misc]  # xdist: no types
    """xdist's load-group scheduling, in collection order (`--no-loadscope-reorder` or not),
    except that a unit of the twin tier goes only to a worker that holds one already (its
    twins run one after another) or while fewer than `cap` workers hold one. A worker that
    may not take one takes the first unit without a twin, or waits. Every finished test
    reconsiders every worker, as a twin's end can free a place.

    An xdist worker runs a test only once it knows the next one (or is told to stop), so
    that a module's fixtures are torn down after its last test: a worker's next unit is sent
    while it still runs its current one, and a worker holding a twin module may always be
    sent the next unit it can take."""

    def __init__(self, config: pytest.Config, log: Producer | None, cap: int) -> None:
        super().__init__(config, log)
        self.cap = cap

    def _holds_twin(self, node: WorkerController) -> bool:
        return any(
            scope.startswith(TWIN_TIER) and not all(tests.values())
            for scope, tests in self.assigned_work.get(node, {}).items()
        )

    def _next_scope(self, node: WorkerController) -> str | None:
        twin_allowed = self._holds_twin(node) or (
            sum(1 for other in self.nodes if self._holds_twin(other)) < self.cap
        )
        queue: dict[str, dict[str, bool]] = self.workqueue
        for scope in queue:
            if twin_allowed or not scope.startswith(TWIN_TIER):
                return scope
        return None

    def _assign_work_unit(self, node: WorkerController) -> None:
        assigned = self.assigned_work.setdefault(node, {})
        scope = self._next_scope(node)
        if scope is None:
            return
        work_unit = self.workqueue.pop(scope)
        assigned[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some(
            [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
        )

    def mark_test_complete(
        self, node: WorkerController, item_index: int, duration: float = 0
    ) -> None:
        super().mark_test_complete(node, item_index, duration)
        for other in self.nodes:
            if other is not node:
                self._reschedule(other)
