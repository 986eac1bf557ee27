"""Burst to EKS end to end on the twin: the scheduler starts BurstCapacity for a job only
installed capacity holds back; the workflow creates Karpenter NodeClaims through the
Kubernetes API, the twin's Karpenter launches them (or EC2 has no capacity), the job runs on
the new nodes, and the scheduler releases them once idle past the cooldown."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.conftest import ROOT
from tests.deadlines import loaded
from tests.e2e.conftest import running_twin
from tests.e2e.http import Http, member
from tests.e2e.pod_templates import TEMPLATE, assert_carries_the_template, prepare_team
from tests.e2e.test_faults import BURST, AimedFaults

from hyperguard.cluster.workloads import JOB_ID_LABEL, JOB_NAME_LABEL, job_name, team_namespace
from hyperguard.models.nodes import BURST_LABEL
from hyperguard.store import NodeStore
from hyperguard_twin.cloud.training_run import Interruption, Progress, interruptions
from hyperguard_twin.inject import put_entry, retarget
from hyperguard_twin.plane.kube import JOBS, NODECLAIMS, NODEPOOLS, PODS, resource, wait_for
from hyperguard_twin.runtime import Twin
from hyperguard_twin.service_users import fast_burst_policy

TEAM = "alpha"
SERVICES = resource("v1", "services")
ENDPOINT_SLICES = resource("discovery.k8s.io/v1", "endpointslices")
EVENTS = ROOT / "tests" / "events"


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    # Two HyperPod nodes and an empty burst pool: the Karpenter NodePool exists, no nodes.
    with running_twin(hyperpod_nodes=2, burst_nodes=0, seed_jobs=False) as running:
        yield running


@pytest.fixture(scope="module")
def http(twin: Twin) -> Http:
    api = Http(twin.api_endpoint)
    assert api("PUT", "/principals", {"principal_arn": member(TEAM), "team": TEAM})[0] in (200, 201)
    # A quota larger than HyperPod: what is beyond the 16 installed GPUs waits for capacity.
    assert api.quota(TEAM, 48, strategy="DontLend", borrow=None) == 201
    config = {"PriorityClasses": [{"Name": "low", "Weight": 10}]}
    assert api("PUT", "/scheduler-config", config)[0] == 200
    for _ in range(2):
        api.submit(TEAM, 8)  # production fills HyperPod
    api.wait({j["job_id"]: "Running" for j in api("GET", "/jobs")[1]["jobs"]})
    return api


ACTIVE = ("Pending", "Admitted", "Running", "Preempted", "Suspended")


def active_jobs(http: Http) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    for status in ACTIVE:
        jobs += http("GET", f"/jobs?team={TEAM}&status={status}&limit=100")[1]["jobs"]
    return jobs


@pytest.fixture(autouse=True)
def isolated(twin: Twin, http: Http) -> Iterator[None]:
    """Each test starts with HyperPod full of production work and no burst node, and its own
    jobs are cancelled when it ends, passed or failed, so that no test waits on another's."""
    held = {n for j in active_jobs(http) if j["status"] == "Running" for n in j["nodes"]}
    fillers = [http.submit(TEAM, 8) for _ in set(hyperpod_instances(twin)) - held]
    http.wait(dict.fromkeys(fillers, "Running"), timeout_s=90)
    keep = {j["job_id"] for j in active_jobs(http)}
    yield
    for job in active_jobs(http):
        if job["job_id"] not in keep:
            http("DELETE", f"/jobs/{job['job_id']}")
    until(
        lambda: not twin.kube.list_objects(NODECLAIMS, label_selector=BURST_LABEL),
        "the test's burst nodes to be released",
        timeout_s=120,
    )


def set_policy(twin: Twin, http: Http, **capacity: Any) -> dict[str, Any]:
    body = fast_burst_policy(twin.config.time_scale).model_dump(mode="json", by_alias=True)
    body["capacity"].update(capacity)
    status, stored = http("PUT", "/policies/burst", body)
    assert status == 200, stored
    return dict(stored)


def executions(twin: Twin) -> list[dict[str, Any]]:
    assert twin.deployment is not None
    sfn = twin.client("stepfunctions")
    arn = twin.deployment.outputs["BurstCapacityStateMachineArn"]
    listed = sfn.list_executions(stateMachineArn=arn)["executions"]
    return [sfn.describe_execution(executionArn=e["executionArn"]) for e in listed]


def until(condition: Callable[[], Any], what: str, timeout_s: float = 90) -> Any:
    return wait_for(condition, loaded(timeout_s), what, interval_s=0.3)


def after_more_passes(twin: Twin, passes: int = 3) -> None:
    """Return once the scheduler has run `passes` more times: a check that nothing happened
    is only worth something after the passes that could have made it happen."""
    assert twin.runtime is not None
    invocations = twin.runtime.invocations
    target = invocations["SchedulerFunction"] + passes
    until(lambda: invocations["SchedulerFunction"] >= target, f"{passes} more scheduler passes")


def ended(twin: Twin, job_ids: set[str]) -> dict[str, Any] | None:
    """The burst execution for exactly these jobs, once it has ended."""
    for execution in executions(twin):
        request = json.loads(execution["input"])["request"]
        if {j["jobId"] for j in request["jobs"]} == job_ids and execution["status"] != "RUNNING":
            return execution
    return None


def hyperpod_instances(twin: Twin) -> list[str]:
    return [i.instance_id for i in twin.cluster.instances() if i.platform == "hyperpod"]


def burst_instances(twin: Twin) -> list[str]:
    return [
        i.instance_id
        for i in twin.cluster.instances()
        if i.nodeclaim is not None and i.nodeclaim.startswith("hg-burst-")
    ]


def test_a_development_job_bursts_onto_new_nodes_and_they_go_once_idle(
    twin: Twin, http: Http
) -> None:
    set_policy(twin, http)
    # The job brings its own pod template (FSx claim, /dev/shm, service account, env, EFA):
    # every field of it reaches the batch Job and its pods on Karpenter's new nodes.
    prepare_team(twin.kube, TEAM)
    status, body = http(
        "POST",
        "/jobs",
        {
            "team": TEAM,
            "instance_type": "ml.p5.48xlarge",
            "replicas": 2,
            "priority_class": "low",
            "template": "development",
            "pod_template": TEMPLATE,
        },
        principal=member(TEAM),
    )
    assert status == 201, body
    job = str(body["job_id"])
    http.wait({job: "Running"}, timeout_s=90)
    record = http("GET", f"/jobs/{job}")[1]
    assert record["pool"] == "gpu-burst-on-demand"
    assert sorted(record["nodes"]) == sorted(burst_instances(twin))
    execution = until(lambda: ended(twin, {job}), "the burst to end")
    assert execution["status"] == "SUCCEEDED"
    output = json.loads(execution["output"])
    assert output["outcome"] == "ready"
    assert output["plan"]["nodes"] == 2
    assert output["plan"]["options"][0]["capacityType"] == "on-demand"
    assert sorted(output["instance_ids"]) == sorted(record["nodes"])
    service = rendezvous_of(twin, job)
    assert twin.deployment is not None
    inventory = NodeStore(twin.deployment.outputs["NodesTableName"])
    until(lambda: len(inventory.many(record["nodes"])) == 2, "the inventory to hold the nodes")

    assert http("DELETE", f"/jobs/{job}")[0] == 200
    until(lambda: not burst_instances(twin), "the idle burst nodes to be released")
    assert http.status_of(job) == "Cancelled"
    # The scheduler marked each node it gave back, with its deployed role: what the node
    # reports while it goes is its departure, not a fault (D208).
    assert all(n.released_at is not None for n in inventory.many(record["nodes"]))
    # The run's Service goes with its Job (the garbage collector, by its owner reference).
    until(
        lambda: twin.kube.get(SERVICES, service, team_namespace(TEAM)) is None,
        "the run's Service to go with its Job",
    )


def rendezvous_of(twin: Twin, job_id: str) -> str:
    """A running burst run's pods carry the job's template and find each other: its headless
    Service, owned by its Job, lists every replica's pod with its hostname (the EndpointSlice
    kube-controller-manager keeps), and each pod has torchrun's variables naming rank 0 there.
    Returns the Service's name."""
    namespace = team_namespace(TEAM)
    [run] = twin.kube.list_objects(
        JOBS, namespace, label_selector=f"{JOB_ID_LABEL}={job_name(job_id)}"
    )
    name = run["metadata"]["name"]
    service = twin.kube.get(SERVICES, name, namespace)
    assert service is not None and service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["ownerReferences"][0]["uid"] == run["metadata"]["uid"]

    def hostnames() -> list[str] | None:
        slices = twin.kube.list_objects(
            ENDPOINT_SLICES, namespace, label_selector=f"kubernetes.io/service-name={name}"
        )
        found = sorted(e.get("hostname", "") for s in slices for e in s.get("endpoints") or [])
        return found if found == [f"{name}-0", f"{name}-1"] else None

    until(hostnames, "the run's EndpointSlice to list both replicas by hostname")
    pods = twin.kube.list_objects(PODS, namespace, label_selector=f"{JOB_NAME_LABEL}={name}")
    assert len(pods) == 2
    assert_carries_the_template(run["spec"]["template"]["spec"], job_id)
    for pod in pods:
        assert_carries_the_template(pod["spec"], job_id)
        assert pod["spec"]["subdomain"] == name and pod["spec"]["hostname"].startswith(name)
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert (env["MASTER_ADDR"], env["WORLD_SIZE"]) == (f"{name}-0.{name}", "2")
    return str(name)


def test_a_stock_out_falls_back_to_the_next_capacity_type(twin: Twin, http: Http) -> None:
    set_policy(twin, http, capacityOrder=["reserved", "on-demand"])
    twin.cluster.set_ec2_capacity("p5.48xlarge", "reserved", 0)
    try:
        job = http.submit(TEAM, 8, template="development")
        http.wait({job: "Running"}, timeout_s=90)
        execution = until(lambda: ended(twin, {job}), "the burst to end")
    finally:
        twin.cluster.set_ec2_capacity("p5.48xlarge", "reserved", None)
    output = json.loads(execution["output"])
    assert execution["status"] == "SUCCEEDED" and output["outcome"] == "ready"
    assert output["attempt"] == 1
    assert output["failures"][0].startswith("reserved: 1 of 1 NodeClaim(s) removed by Karpenter")
    assert http("GET", f"/jobs/{job}")[1]["pool"] == "gpu-burst-on-demand"
    assert http("DELETE", f"/jobs/{job}")[0] == 200
    until(lambda: not burst_instances(twin), "the idle burst node to be released")


def test_no_capacity_anywhere_rolls_back_and_the_job_keeps_waiting(twin: Twin, http: Http) -> None:
    set_policy(twin, http, capacityOrder=["on-demand"], launchTimeoutS=5)
    twin.cluster.set_ec2_capacity("p5.48xlarge", "on-demand", 0)
    try:
        job = http.submit(TEAM, 8, template="development")
        execution = until(lambda: ended(twin, {job}), "the burst to end")
        output = json.loads(execution["output"])
        assert execution["status"] == "SUCCEEDED" and output["outcome"] == "rolled-back"
        assert "on-demand: 1 of 1 NodeClaim(s) removed by Karpenter" in output["reason"]
        assert http.status_of(job) == "Pending"
        # Its claims go (a burst of the next retry window may have begun since): Karpenter
        # removes a deleted claim once its termination finalizer has run.
        mine = f"{BURST_LABEL}={execution['name']}"
        until(
            lambda: twin.kube.list_objects(NODECLAIMS, label_selector=mine) == [],
            "the rolled-back claims to be gone",
        )
    finally:
        twin.cluster.set_ec2_capacity("p5.48xlarge", "on-demand", None)


def test_a_partial_stock_out_gives_back_the_node_that_came_with_the_burst_role(
    twin: Twin, http: Http
) -> None:
    """EC2 has one p5 of the two a job needs: one claim launches, Karpenter removes the other,
    and the burst gives the launched node back before it rolls back. Giving it back, the
    BurstFunction marks it released in the inventory (D208) with its deployed role: IAM on
    the twin judges that UpdateItem against the role's policies and lets it through. (The node
    is gone before the inventory's next sync holds it, so the mark finds no item here; the
    integration tier checks the mark itself.)"""
    set_policy(twin, http, capacityOrder=["on-demand"], launchTimeoutS=5)
    twin.cluster.set_ec2_capacity("p5.48xlarge", "on-demand", 1)
    marks = ("BurstFunction", "dynamodb:UpdateItem")
    before = twin.function_calls()[marks]
    try:
        job = http.submit(TEAM, 8, replicas=2, template="development")
        until(lambda: burst_instances(twin), "EC2 to launch the one node it has")
        execution = until(lambda: ended(twin, {job}), "the burst to end")
        output = json.loads(execution["output"])
        assert execution["status"] == "SUCCEEDED" and output["outcome"] == "rolled-back"
        assert "on-demand: 1 of 2 NodeClaim(s) removed by Karpenter" in output["reason"]
        until(lambda: not burst_instances(twin), "the launched node to be given back")
    finally:
        twin.cluster.set_ec2_capacity("p5.48xlarge", "on-demand", None)
    assert http.status_of(job) == "Pending"
    assert twin.function_calls()[marks] > before
    assert [d for d in twin.emulator.iam.denied if d[0] == "BurstFunction"] == []


def test_a_rollback_outlasts_a_throttle_a_crash_and_an_error(twin: Twin, http: Http) -> None:
    """The rollback must complete whatever befalls its function (D81): Lambda throttling,
    a worker killed mid-invocation and the function raising, one after the other on the
    RollBack step, are each retried, and the burst still ends rolled back with no claim
    left, not RollbackFailed."""
    assert twin.runtime is not None
    aimed = AimedFaults(twin.runtime)
    aimed.aim(BURST, "rollback", "throttle", "crash", "error")
    set_policy(twin, http, capacityOrder=["on-demand"], launchTimeoutS=5)
    twin.cluster.set_ec2_capacity("p5.48xlarge", "on-demand", 0)
    try:
        job = http.submit(TEAM, 8, template="development")
        execution = until(lambda: ended(twin, {job}), "the burst to end", timeout_s=180)
        assert aimed.pending == 0  # all three faults were met
        output = json.loads(execution["output"])
        assert execution["status"] == "SUCCEEDED" and output["outcome"] == "rolled-back"
        mine = f"{BURST_LABEL}={execution['name']}"
        until(
            lambda: twin.kube.list_objects(NODECLAIMS, label_selector=mine) == [],
            "the rolled-back claims to be gone",
        )
        assert http.status_of(job) == "Pending"
    finally:
        twin.cluster.set_ec2_capacity("p5.48xlarge", "on-demand", None)
        aimed.close()


def test_production_never_bursts(twin: Twin, http: Http) -> None:
    set_policy(twin, http)
    before = len(executions(twin))
    job = http.submit(TEAM, 8)
    until(lambda: "installed capacity" in http("GET", f"/jobs/{job}")[1]["reason"], "a reason")
    after_more_passes(twin)
    assert len(executions(twin)) == before
    assert http("DELETE", f"/jobs/{job}")[0] == 200


def test_a_spot_interruption_on_a_burst_node_moves_the_job_to_new_burst_capacity(
    twin: Twin, http: Http
) -> None:
    set_policy(twin, http, capacityOrder=["spot"])
    job = http.submit(TEAM, 8, template="research")
    http.wait({job: "Running"}, timeout_s=90)
    first = http("GET", f"/jobs/{job}")[1]
    assert first["pool"] == "gpu-burst-spot"
    (doomed,) = first["nodes"]

    assert twin.deployment is not None
    warning = json.loads((EVENTS / "ec2-spot-interruption-warning.json").read_text())
    bus = twin.deployment.outputs["EventBusName"]
    twin.client("events").put_events(Entries=[put_entry(retarget(warning, doomed), bus)])

    def moved() -> dict[str, Any] | None:
        record = http("GET", f"/jobs/{job}")[1]
        return record if record["status"] == "Running" and doomed not in record["nodes"] else None

    record = until(moved, "the job to run on new burst capacity", timeout_s=120)
    assert record["pool"] == "gpu-burst-spot"
    events = [entry["event"] for entry in record["history"]]
    assert "protected" in events
    incidents = http("GET", "/incidents")[1]["incidents"]
    incident = next(i for i in incidents if i["instance_id"] == doomed)
    assert incident["kind"] == "spot_interruption"
    # The interrupted node, drained and idle, is given back like any idle burst node.
    until(lambda: doomed not in burst_instances(twin), "the interrupted node to be released")
    assert http("DELETE", f"/jobs/{job}")[0] == 200


def test_a_burst_job_moves_back_to_hyperpod_at_a_checkpoint_once_a_node_frees_up(
    twin: Twin, http: Http
) -> None:
    set_policy(twin, http, moveBack=True)
    job = http.submit(TEAM, 8, template="development")
    http.wait({job: "Running"}, timeout_s=90)
    placed = http("GET", f"/jobs/{job}")[1]
    assert placed["pool"] == "gpu-burst-on-demand"
    (on_burst,) = placed["nodes"]
    production = [
        j["job_id"]
        for j in http("GET", "/jobs")[1]["jobs"]
        if j["status"] == "Running" and j["job_id"] != job
    ]
    assert http("DELETE", f"/jobs/{production[0]}")[0] == 200  # a HyperPod node frees up

    def back() -> dict[str, Any] | None:
        record = http("GET", f"/jobs/{job}")[1]
        return record if record["status"] == "Running" and record["pool"] == "workers" else None

    record = until(back, "the job to run on HyperPod again", timeout_s=120)
    moved = next(h for h in record["history"] if "moving back to HyperPod" in h["reason"])
    assert moved["event"] == "preempted"
    step = int(moved["reason"].rsplit(" ", 1)[1])
    assert record["last_checkpoint"]["step"] >= step

    # The run on HyperPod resumed from that checkpoint, or from a newer one the burst run
    # completed before its pods stopped (D209), never from past its stop (the simulated
    # trainer's truth). The job is Running once its run is created; its pods start stepping a
    # moment later, after the burst run's last entry (its stop, 0 replicas).
    def resumed_run() -> tuple[Progress, Progress] | None:
        points = twin.cluster.timeline(job)
        stops = [i for i, p in enumerate(points) if p.replicas == 0]
        started = [p for p in points[stops[-1] + 1 :] if p.replicas > 0] if stops else []
        return (points[stops[-1]], started[0]) if started else None

    stop, resumed = until(resumed_run, "the run on HyperPod to start stepping", timeout_s=60)
    every = twin.cluster.timings.checkpoint_interval_steps
    assert step <= resumed.step <= stop.step and resumed.step % every == 0, (stop, resumed)
    until(lambda: on_burst not in burst_instances(twin), "the burst node to be released")
    assert http("DELETE", f"/jobs/{job}")[0] == 200


def test_urgent_work_preempts_at_once_and_hands_hyperpod_back_when_its_burst_lands(
    twin: Twin, http: Http
) -> None:
    """D121, `whenCanPreempt` Preempt (the default): an urgent development job starts at once
    on HyperPod by preempting a lower-priority production job of its team, as without
    bursting; the production job gets a burst raised for the urgent job, which moves there
    at a checkpoint, and the production job resumes on the HyperPod node it had."""
    set_policy(twin, http)
    classes = [{"Name": "low", "Weight": 10}, {"Name": "urgent", "Weight": 100}]
    assert http("PUT", "/scheduler-config", {"PriorityClasses": classes})[0] == 200
    try:
        before = {e["name"] for e in executions(twin)}
        urgent = http.submit(TEAM, 8, priority_class="urgent", template="development")
        http.wait({urgent: "Running"}, timeout_s=60)
        first = http("GET", f"/jobs/{urgent}")[1]
        assert first["pool"] == "workers"  # HyperPod at once: no wait for a node to launch
        (node,) = first["nodes"]
        victims = [
            j
            for j in (http("GET", f"/jobs/{a['job_id']}")[1] for a in active_jobs(http))
            if any(
                h["event"] == "preempted" and f"higher-priority job {urgent}" in h["reason"]
                for h in j["history"]
            )
        ]
        (victim,) = victims
        told = next(h for h in victim["history"] if h["event"] == "preempted")["reason"]
        assert told.endswith(
            f"burst capacity is asked for so that job {urgent} moves there at its next "
            "checkpoint and this job resumes on HyperPod"
        )

        def moved() -> dict[str, Any] | None:
            record = http("GET", f"/jobs/{urgent}")[1]
            on_burst = record["status"] == "Running" and record["pool"] == "gpu-burst-on-demand"
            return record if on_burst else None

        record = until(moved, "the urgent job to run on burst capacity", timeout_s=120)
        handed = next(h for h in record["history"] if "moving to burst capacity" in h["reason"])
        assert handed["event"] == "preempted"
        assert f"giving HyperPod back to job {victim['job_id']} of team {TEAM}" in handed["reason"]
        step = int(handed["reason"].split("from checkpoint step ")[1].split(",")[0])

        # It resumes on the burst node from its newest checkpoint: the one the pass moved it
        # at, or a newer one written while its stop was on the way (a CI run of 2026-11-26
        # moved it at step 240 and it resumed from 250). A run of 2026-11-28 had its timeline
        # stop at step 268 and resume from 270, while the team's jobs still shared one
        # checkpoint location (D186). Its record says Running once its run is dispatched,
        # before the pod trains: the timeline is waited for.
        def resumed_on_burst() -> Interruption | None:
            stops = interruptions(twin.cluster.timeline(urgent))
            return stops[-1] if stops and stops[-1].resumed is not None else None

        moved_at = until(resumed_on_burst, "the urgent job to train on the burst node")
        assert moved_at.resumed is not None
        every = twin.cluster.timings.checkpoint_interval_steps
        assert step <= moved_at.resumed.step, moved_at
        assert moved_at.resumed.step > moved_at.stopped.step - every, moved_at  # < 1 interval lost
        http.wait({victim["job_id"]: "Running"}, timeout_s=60)
        back = http("GET", f"/jobs/{victim['job_id']}")[1]
        assert back["pool"] == "workers" and back["nodes"] == [node]
        # The burst's workflow ends once it has seen its nodes Ready and woken the scheduler.
        until(
            lambda: all(
                e["status"] != "RUNNING" for e in executions(twin) if e["name"] not in before
            ),
            "the burst's workflow to end",
        )
        started = [e for e in executions(twin) if e["name"] not in before]
        assert len(started) == 1, [
            (e["name"], e["status"], json.loads(e["input"])["request"]["jobs"], e.get("output"))
            for e in started
        ]
        (burst,) = started
        request = json.loads(burst["input"])["request"]
        assert request["template"] == "development"
        assert [j["jobId"] for j in request["jobs"]] == [victim["job_id"]]
        assert burst["status"] == "SUCCEEDED"
    finally:
        assert http("PUT", "/scheduler-config", {"PriorityClasses": classes[:1]})[0] == 200


def test_production_grows_a_hyperpod_group_first_and_gives_the_node_back_once_idle(
    twin: Twin, http: Http
) -> None:
    installed = hyperpod_instances(twin)  # all busy (the fixture)
    set_policy(twin, http, hyperpodGroups=[{"instanceGroupName": "workers", "maxCount": 3}])
    job = http.submit(TEAM, 8)  # production: HyperPod only
    http.wait({job: "Running"}, timeout_s=120)
    record = http("GET", f"/jobs/{job}")[1]
    (added,) = set(hyperpod_instances(twin)) - set(installed)
    assert record["pool"] == "workers" and record["nodes"] == [added]
    execution = until(lambda: ended(twin, {job}), "the burst to end")
    output = json.loads(execution["output"])
    assert execution["status"] == "SUCCEEDED" and output["outcome"] == "ready"
    assert output["plan"]["options"] == [
        {
            "capacityType": None,
            "instanceGroup": "workers",
            "pool": "workers",
            "usdPerNodeHour": pytest.approx(output["plan"]["options"][0]["usdPerNodeHour"]),
            "usdPerHour": pytest.approx(output["plan"]["options"][0]["usdPerNodeHour"]),
        }
    ]
    assert output["plan"]["options"][0]["usdPerNodeHour"] > 0
    assert output["instance_ids"] == [added]
    groups = twin.client("sagemaker").describe_cluster(ClusterName=twin.config.cluster_name)
    (workers,) = groups["InstanceGroups"]
    assert workers["TargetCount"] == 3

    assert http("DELETE", f"/jobs/{job}")[0] == 200
    until(lambda: added not in hyperpod_instances(twin), "the idle added node to be deleted")
    groups = twin.client("sagemaker").describe_cluster(ClusterName=twin.config.cluster_name)
    assert groups["InstanceGroups"][0]["TargetCount"] == 2
    assert sorted(hyperpod_instances(twin)) == sorted(installed)


def test_a_priority_class_waits_its_threshold_before_a_burst(twin: Twin, http: Http) -> None:
    set_policy(twin, http, burstAfterS={"low": 3600})
    before = len(executions(twin))
    job = http.submit(TEAM, 8, template="development")
    reason = until(
        lambda: (r := http("GET", f"/jobs/{job}")[1]["reason"]) and "of waiting" in r and r,
        "the wait to show in the reason",
    )
    assert "burst capacity after 3600 s of waiting" in reason
    after_more_passes(twin)
    assert len(executions(twin)) == before
    set_policy(twin, http, burstAfterS={"low": 1})
    http.wait({job: "Running"}, timeout_s=90)
    assert http("GET", f"/jobs/{job}")[1]["pool"] == "gpu-burst-on-demand"
    assert http("DELETE", f"/jobs/{job}")[0] == 200
    until(lambda: not burst_instances(twin), "the idle burst node to be released")


def test_a_burst_the_nodepool_limits_cannot_hold_rolls_back_before_buying(
    twin: Twin, http: Http
) -> None:
    set_policy(twin, http)
    before = twin.kube.get(NODEPOOLS, "gpu-burst")
    assert before is not None
    twin.cluster.set_nodepool_limits("gpu-burst", {"nvidia.com/gpu": "8"})
    try:
        job = http.submit(TEAM, 8, replicas=2, template="development")  # two nodes, 16 GPUs
        execution = until(lambda: ended(twin, {job}), "the burst to end")
        output = json.loads(execution["output"])
        assert output["outcome"] == "rolled-back" and output["plan"]["options"] == []
        assert output["plan"]["refused"] == [
            "NodePool gpu-burst: its limits leave room for 1 more p5.48xlarge node(s), the "
            "burst needs 2 (nvidia.com/gpu 8 (0 in use))"
        ]
        assert twin.kube.list_objects(NODECLAIMS, label_selector=BURST_LABEL) == []
        assert "limits leave room for 1 more" in http("GET", f"/jobs/{job}")[1]["reason"]
    finally:
        twin.cluster.set_nodepool_limits("gpu-burst", before["spec"].get("limits"))
    assert http("DELETE", f"/jobs/{job}")[0] == 200


def test_burst_nodes_outlive_consolidation_at_karpenters_defaults(twin: Twin, http: Http) -> None:
    """A NodePool at Karpenter v1's defaults consolidates an empty node as soon as it is
    initialized (WhenEmptyOrUnderutilized, consolidateAfter 0s). HyperGuard's nodes carry
    karpenter.sh/do-not-disrupt, so the nodes it bought stay until the job it bought them for
    runs there, and HyperGuard's scale-in gives them back afterwards (D99). Without the
    annotation the twin's Karpenter deletes them before the job is dispatched, and the job
    is still Pending when the wait ends."""
    set_policy(twin, http)
    twin.cluster.set_nodepool_disruption(
        "gpu-burst", {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
    )
    try:
        job = http.submit(TEAM, 8, replicas=2, template="development")
        http.wait({job: "Running"}, timeout_s=90)
        execution = until(lambda: ended(twin, {job}), "the burst to end")
        assert json.loads(execution["output"])["outcome"] == "ready"
        nodes = http("GET", f"/jobs/{job}")[1]["nodes"]
        assert sorted(nodes) == sorted(burst_instances(twin))
        for claim in twin.kube.list_objects(NODECLAIMS, label_selector=BURST_LABEL):
            assert claim["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
            assert not claim["metadata"].get("deletionTimestamp")
        assert http("DELETE", f"/jobs/{job}")[0] == 200
        until(lambda: not burst_instances(twin), "the idle burst nodes to be released")
    finally:
        twin.cluster.set_nodepool_disruption(
            "gpu-burst", {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}
        )
