"""The scheduler benchmark (bench/scheduler.py) in a tiny configuration, on a real
kube-apiserver and etcd (`make components`): it drives the real pass end to end and counts
the requests the API server answered, a lone submission is admitted by its own wake-up's
pass although the index lags, its growth measurement holds the table's history apart from
the active jobs, and the emulator speed-ups it installs keep moto's answers."""

from __future__ import annotations

import inspect
import threading
from typing import Any

import boto3
import pytest
from bench import scheduler

from hyperguard.concurrency import beside, bounded_map
from hyperguard.governance.jobs import JobLifecycle, SubmissionRules


def test_a_tiny_workload_goes_through_the_real_pass_and_is_counted() -> None:
    result = scheduler.run_shape("tiny", 1.0, "Disabled")

    assert result["all_jobs_finished"]
    assert result["admissions"] >= 20
    assert set(result["avg_time_to_admission_s"]) == {"small", "medium", "large"}
    calls = result["calls_per_pass"]
    assert calls["sagemaker:ListClusterNodes"] == 1.0
    assert calls["kubernetes:list nodes"] >= 1.0
    # Every job's run was created on the API server, and its end, which the bench's run
    # model wrote there, brought the run-ended wake-ups.
    assert round(calls["kubernetes:create hyperpodpytorchjobs"] * result["passes"]) >= 20
    assert result["wakeups_received"]["run ended"] > 0
    assert result["kubernetes_wall_s_per_pass"] > 0
    assert calls["dynamodb:TransactWriteItems"] > 0
    assert result["cpu_s_per_pass"] > 0
    # Each submission noted its wake-up; one was sent while none was pending (D169).
    woken = result["wakeups_received"]
    assert woken["job submitted"] + woken["job submitted (coalesced)"] == 20
    assert 1 <= woken["job submitted"] < 20
    checked = result["emulator_answers_checked"]
    assert all(checked[op] > 0 for op in ("BatchGetItem", "TransactWriteItems", "UpdateItem"))
    # Every step of a pass is charged where it runs: the lease's own writes, the snapshot's
    # reads, the admissions' transactions and dispatches, the pure decisions' CPU alone.
    profile = result["pass_profile"]
    assert set(profile) == set(scheduler.PASS_STEPS)
    assert profile["lease"]["calls_per_pass"] == {"dynamodb:UpdateItem": 2.0}
    assert profile["read"]["calls_per_pass"]["sagemaker:ListClusterNodes"] == 1.0
    assert profile["apply"]["calls_per_pass"]["dynamodb:TransactWriteItems"] > 0
    assert profile["apply"]["calls_per_pass"]["kubernetes:create hyperpodpytorchjobs"] > 0
    assert profile["plan"]["calls_per_pass"] == {} and profile["plan"]["cpu_s"] > 0
    assert profile["wake-up"]["virtual_s_per_pass"] >= 0.02  # the event source mapping's
    assert round(sum(step["share"] for step in profile.values()), 2) == 1.0


def test_a_run_puts_back_every_attribute_it_replaced_as_it_was() -> None:
    """The pass's steps are timed by wrapping the service's own methods, a staticmethod among
    them: after the run each is the service's again, the staticmethod still one (a later
    test's pass in the same process calls it)."""
    from hyperguard.governance.applier import PassApplier
    from hyperguard.governance.reader import SnapshotReader

    before = {
        (owner, name): inspect.getattr_static(owner, name)
        for owner, name in [(SnapshotReader, "bursts_in_flight"), (PassApplier, "admit")]
    }
    scheduler.run_shape("tiny", 1.0, "Disabled")
    for (owner, name), attribute in before.items():
        assert inspect.getattr_static(owner, name) is attribute
    patches = scheduler.Patches()

    class Base:
        inherited = 1

    class Derived(Base):
        pass

    patches.set(Derived, "inherited", 2)
    assert Derived.inherited == 2
    patches.undo()
    assert "inherited" not in vars(Derived) and Derived.inherited == 1


def test_a_lone_submission_is_admitted_by_the_pass_its_own_wake_up_starts() -> None:
    report = scheduler.lone_submissions()

    # Not by the next tick's pass, 8 to 54 s away, although the index lags the submission by
    # 0.5 s: each job is admitted alone, by a pass its submission's wake-up alone started.
    assert report["admitted_by"] == [["job submitted"]] * len(scheduler.LONE_AT)
    assert report["wakeups_received"]["job submitted"] == 6


def test_a_job_appears_in_the_live_index_only_after_the_modelled_lag() -> None:
    with scheduler.world(1, scheduler.Latencies(), "Disabled") as built:
        rules = SubmissionRules(True, frozenset(c.name for c in scheduler.CLASSES), 8)
        arrival = scheduler.Arrival(0.0, "fresh", built.teams[0], scheduler.CLASSES[0])
        job = scheduler._job(arrival, built.meter.now())
        scheduler.submit(built, JobLifecycle(built.jobs), job, rules, built.meter.t)

        assert built.jobs.active() == []
        assert [r.job.job_id for r in built.jobs.active(also=["fresh"])] == ["fresh"]
        built.meter.t += scheduler.Latencies().s("dynamodb:gsi-propagation")
        assert [r.job.job_id for r in built.jobs.active()] == ["fresh"]


def test_a_pass_makes_the_same_calls_however_many_finished_jobs_the_table_holds() -> None:
    report = scheduler.growth([10, 300], passes=2)

    fewer, more = report["growth"]
    assert (fewer["jobs"], more["jobs"]) == (10, 300)
    assert more["aws_calls_per_pass"] == fewer["aws_calls_per_pass"]
    assert report["active_jobs"] == 24


def _item(client: Any, table: str, job_id: str) -> dict[str, Any] | None:
    item: dict[str, Any] | None = client.get_item(
        TableName=table, Key={"job_id": {"S": job_id}}, ConsistentRead=True
    ).get("Item")
    return item


def test_a_cancelled_transaction_puts_back_the_items_it_touched() -> None:
    with scheduler.world(1, scheduler.Latencies(), "Disabled") as built:
        client = boto3.client("dynamodb", region_name=scheduler.REGION)
        table = built.tables["JobsTable"]
        client.put_item(TableName=table, Item={"job_id": {"S": "kept"}, "n": {"N": "1"}})
        update = {
            "TableName": table,
            "Key": {"job_id": {"S": "kept"}},
            "UpdateExpression": "SET n = :two",
            "ExpressionAttributeValues": {":two": {"N": "2"}},
        }
        created = {"TableName": table, "Item": {"job_id": {"S": "new"}}}
        refused = {
            "TableName": table,
            "Key": {"job_id": {"S": "absent"}},
            "ConditionExpression": "attribute_exists(job_id)",
        }
        try:
            client.transact_write_items(
                TransactItems=[{"Update": update}, {"Put": created}, {"ConditionCheck": refused}]
            )
        except client.exceptions.TransactionCanceledException:
            pass
        else:
            raise AssertionError("the transaction was not cancelled")

        assert _item(client, table, "kept") == {"job_id": {"S": "kept"}, "n": {"N": "1"}}
        assert _item(client, table, "new") is None


def test_calls_issued_together_cost_the_longest_worker_not_their_sum() -> None:
    """The service's calls issued together (D162) move the virtual clock by the longest
    worker's modelled latency; the same calls in line by their sum."""
    meter = scheduler.Meter(scheduler.Latencies())
    patches = scheduler.Patches()
    scheduler.install_fork_join(patches, meter)
    barrier = threading.Barrier(4, timeout=10)  # each of the 4 workers takes one call

    def get(_: int) -> None:
        barrier.wait()
        meter.call("dynamodb:GetItem")  # 5 ms modelled

    try:
        meter.start()
        bounded_map(get, range(4), limit=4)
        together = meter.step_latency_s["other"]
        bounded_map(lambda _: meter.call("dynamodb:GetItem"), range(4), limit=1)
        meter.stop()
    finally:
        patches.undo()
    assert together == pytest.approx(0.005)
    assert meter.step_latency_s["other"] - together == pytest.approx(0.020)
    assert meter.calls["setup"]["dynamodb:GetItem"] == 8 and meter.forks == 1
    assert meter.t >= 0.025


@pytest.mark.parametrize(
    ("others", "expected_s"), [("sagemaker:ListClusterNodes", 0.1), ("dynamodb:GetItem", 0.02)]
)
def test_a_chain_beside_other_calls_costs_the_longer_of_the_two(
    others: str, expected_s: float
) -> None:
    """`concurrency.beside` (D193): a chain (a GetItem, four Queries issued together, a
    GetItem: 20 ms modelled) while another call is in flight costs the longer of the chain
    and that call, not their sum; the chain's own fork inside the other counts once."""
    meter = scheduler.Meter(scheduler.Latencies())
    patches = scheduler.Patches()
    scheduler.install_fork_join(patches, meter)
    barrier = threading.Barrier(4, timeout=10)  # each of the 4 Queries on a thread of its own

    def query(_: int) -> None:
        barrier.wait()
        meter.call("dynamodb:Query")  # 10 ms modelled

    def chain() -> None:
        meter.call("dynamodb:GetItem")
        bounded_map(query, range(4), limit=4)
        meter.call("dynamodb:GetItem")

    try:
        meter.start()
        beside(chain, [lambda: meter.call(others)])
        meter.stop()
    finally:
        patches.undo()
    assert meter.step_latency_s["other"] == pytest.approx(expected_s)
    assert meter.forks == 2 and meter.t >= expected_s


def test_mass_preemption_takes_every_small_job_once_and_no_team_above_its_quota() -> None:
    report = scheduler.preemption(teams=2)

    assert report["all_jobs_finished"] and report["jobs"] == 42
    assert report["victims"] == 40  # every small job gave way to its team's large one
    assert report["heaviest_pass"]["victims"] == max(report["victims_by_pass"]) >= 20
    assert report["heaviest_pass"]["service_cpu_s"] > 0
    assert report["preempted_more_than_once"] == [] and report["teams_above_quota"] == []
    assert report["peak_gpus_held"] == scheduler.NOMINAL_GPUS
