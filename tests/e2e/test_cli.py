"""The command surface scripts rely on, against `hyperguard twin up` in another process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from tests.conftest import EVENTS, ROOT
from tests.deadlines import loaded

from hyperguard_twin.plane.processes import free_port

CLI = [sys.executable, "-m", "hyperguard.cli.main"]


def run(*args: str, endpoint: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"HYPERGUARD_ENDPOINT": endpoint}
    env.pop("AWS_ENDPOINT_URL", None)
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=60, check=check
    )


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("twin") / "twin.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*CLI, "twin", "up", "--port", str(port), "--api-port", str(free_port())],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        url = f"http://127.0.0.1:{port}"
        # The status route answers while the twin still deploys; the line comes once it is up
        # (and once `twin up` handles SIGTERM).
        # (A loaded machine, 2 cores shared by many jobs, takes about a minute.)
        deadline = time.monotonic() + loaded(180)
        while f"HyperGuard twin up at {url}" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"twin did not come up: {log.read_text()}")
            time.sleep(0.3)
        try:
            urllib.request.urlopen(f"{url}/_hyperguard/status", timeout=30)
        except OSError:
            proc.kill()  # a fixture that fails here must not leave the twin running
            raise
        yield url
        proc.send_signal(signal.SIGINT)  # Ctrl-C, how a twin is meant to stop: exit 0
        # stopping joins the twin's threads and workers: ~20 s at a load of 10 on 2 cores
        assert proc.wait(timeout=90) == 0, log.read_text()


def lines(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def inject_unhealthy(instance_id: str, endpoint: str) -> list[dict[str, Any]]:
    """HyperPod reports the node unhealthy; the twin's node is healthy, so the recovery
    finds it so and closes the incident."""
    event = str(EVENTS / "hyperpod-node-health-unhealthy.json")
    proc = run("twin", "inject", event, "--instance-id", instance_id, "--json", endpoint=endpoint)
    return list(json.loads(proc.stdout))


def test_classify_prints_one_json_object_per_signal() -> None:
    files = sorted(str(p) for p in Path(EVENTS).glob("*.json"))
    out = lines(run("events", "classify", *files, endpoint="unused"))
    by_file = {Path(o["file"]).stem: o for o in out}
    assert by_file["hyperpod-node-health-unhealthy"]["action"] == "open_incident"
    assert by_file["hyperpod-node-health-unhealthy"]["instance_id"] == "i-12345678abcdefghi"
    assert by_file["ec2-spot-interruption-warning"]["action"] == "drain"
    assert by_file["ec2-instance-state-change"]["action"] == "ignore"
    assert by_file["aws-health-ec2-retirement"]["severity"] == "scheduled"
    for o in out:
        assert {
            "source",
            "kind",
            "instance_id",
            "cluster",
            "severity",
            "action",
            "repair",
            "reason",
        } <= set(o)


def test_classify_reports_bad_files_and_exits_nonzero(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    proc = run(
        "events",
        "classify",
        str(bad),
        str(EVENTS / "ec2-spot-interruption-warning.json"),
        endpoint="x",
        check=False,
    )
    assert proc.returncode == 1
    out = lines(proc)
    assert "error" in out[0] and out[1]["action"] == "drain"


def test_status_nodes_inject_and_incidents_against_a_running_twin(endpoint: str) -> None:
    status = json.loads(run("twin", "status", "--json", endpoint=endpoint).stdout)
    assert status["endpoint"] == endpoint
    assert status["outputs"]["NodeRecoveryStateMachineArn"].startswith("arn:aws:states:")
    nodes = json.loads(run("twin", "nodes", "--json", endpoint=endpoint).stdout)["nodes"]
    hyperpod = [n for n in nodes if n["platform"] == "hyperpod"]
    assert len(hyperpod) == 16 and {n["instance_type"] for n in hyperpod} == {"ml.p5.48xlarge"}
    target = hyperpod[3]["instance_id"]

    injected = inject_unhealthy(target, endpoint)
    assert injected[0]["event_id"] and injected[0]["error"] is None
    # The node is healthy in the simulator: the recovery checks and closes the incident.
    deadline = time.monotonic() + loaded(30)
    incidents: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        incidents = json.loads(run("incidents", "list", "--json", endpoint=endpoint).stdout)
        if incidents and incidents[0]["status"] == "resolved":
            break
        time.sleep(0.5)
    assert [i["instance_id"] for i in incidents] == [target]
    assert (incidents[0]["status"], incidents[0]["resolution"]) == (
        "resolved",
        "recovered_on_its_own",
    )
    shown = json.loads(
        run("incidents", "show", incidents[0]["incident_id"], "--json", endpoint=endpoint).stdout
    )
    assert shown["execution_arn"].endswith(incidents[0]["incident_id"])
    assert len(shown["signals"]) == 1
    assert shown["execution"]["status"] == "SUCCEEDED" and shown["execution"]["states"]
    table = run("incidents", "list", endpoint=endpoint).stdout
    assert "recovered_on_its_own" in table
    timeline = run("incidents", "show", incidents[0]["incident_id"], endpoint=endpoint).stdout
    assert "execution SUCCEEDED" in timeline


def test_runtime_errors_against_a_running_twin_are_one_line_and_exit_1(endpoint: str) -> None:
    event = str(EVENTS / "hyperpod-node-health-unhealthy.json")
    for args, says in (
        (("twin", "inject", event, "--instance-id", "i-0doesnotexist0000"), "no node"),
        (("incidents", "show", "no-such-incident"), "no incident no-such-incident"),
        (("jobs", "show", "no-such-job"), "no job no-such-job"),
        (("incidents", "approve", "no-such-incident"), "no-such-incident"),
        (("executions", "show", "no-such-execution"), "no execution no-such-execution"),
    ):
        proc = run(*args, endpoint=endpoint, check=False)
        assert proc.returncode == 1, (args, proc.stderr)
        assert says in proc.stderr and "Traceback" not in proc.stderr
        assert proc.stderr.count("\n") == 1


def test_twin_status_names_the_api_endpoint_in_use(endpoint: str) -> None:
    status = json.loads(run("twin", "status", "--json", endpoint=endpoint).stdout)
    assert f"API at {status['api_endpoint']}" in run("twin", "status", endpoint=endpoint).stdout


def test_commands_say_clearly_when_no_twin_answers() -> None:
    proc = run("twin", "status", endpoint=f"http://127.0.0.1:{free_port()}", check=False)
    assert proc.returncode == 1
    assert "no twin answers" in proc.stderr and "hyperguard twin up" in proc.stderr


def test_jobs_list_and_twin_fault_through_the_cli(endpoint: str) -> None:
    deadline = time.monotonic() + loaded(60)
    while True:  # the jobs report their first checkpoint a few training steps after start
        jobs = json.loads(run("jobs", "list", "--json", endpoint=endpoint).stdout)
        if all(isinstance(j["checkpoint_step"], int) for j in jobs) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {j["name"] for j in jobs} == {
        "llama3-70b-pretrain",
        "mistral-7b-sft",
        "vit-h14-pretrain",
    }
    assert all(isinstance(j["checkpoint_step"], int) for j in jobs)
    node = next(j for j in jobs if j["name"] == "vit-h14-pretrain")["nodes"][0]
    faulted = json.loads(
        run("twin", "fault", node, "--kind", "persistent", "--json", endpoint=endpoint).stdout
    )
    assert faulted == {"instance_id": node, "kind": "persistent"}
    refused = run("twin", "fault", "i-0doesnotexist0000", endpoint=endpoint, check=False)
    assert refused.returncode == 1 and "no such node" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_an_admin_keeps_teams_principals_and_priority_classes_from_the_cli(
    endpoint: str, tmp_path: Path
) -> None:
    """Through the twin's API Gateway as its default principal (an admin): every change goes
    through the API and its validation."""

    def cli_json(*args: str) -> Any:
        return json.loads(run(*args, "--json", endpoint=endpoint).stdout)

    cli_json("priority-classes", "set", "urgent", "90")
    assert {"Name": "urgent", "Weight": 90} in cli_json("priority-classes", "list")
    refused = run("priority-classes", "set", "urgent", "101", endpoint=endpoint, check=False)
    assert refused.returncode == 1 and "PUT /scheduler-config: 422" in refused.stderr
    cli_json("priority-classes", "delete", "urgent")
    assert all(c["Name"] != "urgent" for c in cli_json("priority-classes", "list"))

    quotas = cli_json("teams", "list")
    nlp = next(q for q in quotas if q["ComputeQuotaTarget"]["TeamName"] == "nlp")
    assert cli_json("teams", "show", "nlp")["ComputeQuotaVersion"] == nlp["ComputeQuotaVersion"]
    request = {
        "Name": "speech-quota",
        "ClusterArn": nlp["ClusterArn"],
        "ComputeQuotaConfig": nlp["ComputeQuotaConfig"],
        "ComputeQuotaTarget": {"TeamName": "speech", "FairShareWeight": 5},
    }
    path = tmp_path / "speech.json"
    path.write_text(json.dumps(request))
    created = cli_json("teams", "set", "speech", str(path))
    assert created["ComputeQuotaTarget"] == {"TeamName": "speech", "FairShareWeight": 5}
    request["ComputeQuotaTarget"]["FairShareWeight"] = 7
    path.write_text(json.dumps(request))
    version = str(created["ComputeQuotaVersion"])
    updated = cli_json("teams", "set", "speech", str(path), "--target-version", version)
    assert updated["ComputeQuotaVersion"] == created["ComputeQuotaVersion"] + 1
    stale = run(
        "teams", "set", "speech", str(path), "--target-version", version,
        endpoint=endpoint, check=False,
    )  # fmt: skip
    assert stale.returncode == 1 and ": 409 " in stale.stderr
    table = run("teams", "list", endpoint=endpoint).stdout
    assert "speech" in table and "nlp" in table

    role = "arn:aws:iam::123456789012:role/speech-researchers"
    cli_json("principals", "grant", role, "--team", "speech")
    assert {"principal_arn": role, "team": "speech", "admin": False} in cli_json(
        "principals", "list"
    )
    cli_json("teams", "delete", "speech")
    assert all(q["ComputeQuotaTarget"]["TeamName"] != "speech" for q in cli_json("teams", "list"))
    missing = run("teams", "show", "speech", endpoint=endpoint, check=False)
    assert missing.returncode == 1 and "404" in missing.stderr
    assert "Traceback" not in missing.stderr + stale.stderr + refused.stderr


def documented_job() -> dict[str, Any]:
    text = (ROOT / "docs" / "api.md").read_text()
    section = text[text.index("### A job") :]
    start = section.index("```json") + len("```json")
    return dict(json.loads(section[start : section.index("```", start)]))


def test_the_documented_example_job_is_accepted_as_written(endpoint: str, tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(documented_job()))
    job = json.loads(run("jobs", "submit", str(path), "--json", endpoint=endpoint).stdout)
    assert (job["name"], job["priority_class"]) == ("llama3-70b-pretrain", "training")
    run("jobs", "cancel", job["job_id"], endpoint=endpoint)


def test_a_dry_run_shows_the_run_objects_the_api_server_accepts_and_creates_nothing(
    endpoint: str, tmp_path: Path
) -> None:
    """POST /jobs/dry-run through the CLI: the API's checks, then the run objects sent to the
    twin's kube-apiserver with dryRun=All by the API function (its RBAC and the admission
    policy that allows it dry runs only)."""

    def status(job_id: str) -> str:
        shown = json.loads(run("jobs", "show", job_id, "--json", endpoint=endpoint).stdout)
        return str(shown["job"]["status"])

    def jobs_of(team: str) -> list[str]:
        listed = json.loads(run("jobs", "list", "--json", endpoint=endpoint).stdout)
        return sorted(j["job_id"] for j in listed if j["team"] == team)

    # A team with a quota gets its namespace and queues from the scheduler before its first
    # run (D170: so that what it applies itself is held for HyperGuard), and then its objects
    # pass the API server. (A dry run before that says so: tests/integration/
    # test_kueue_admission.py.)
    quotas = json.loads(run("teams", "list", "--json", endpoint=endpoint).stdout)
    nlp = next(q for q in quotas if q["ComputeQuotaTarget"]["TeamName"] == "nlp")
    quota = tmp_path / "quota.json"
    quota.write_text(
        json.dumps(
            {
                "Name": "acoustics-quota",
                "ClusterArn": nlp["ClusterArn"],
                "ComputeQuotaConfig": nlp["ComputeQuotaConfig"],
                "ComputeQuotaTarget": {"TeamName": "acoustics", "FairShareWeight": 1},
            }
        )
    )
    created = run("teams", "set", "acoustics", str(quota), "--json", endpoint=endpoint, check=False)
    assert created.returncode == 0, created.stderr
    job = tmp_path / "job.json"
    try:
        job.write_text(json.dumps(documented_job() | {"team": "acoustics"}))
        deadline = time.monotonic() + loaded(60)
        while True:
            ready = run("jobs", "submit", str(job), "--dry-run", endpoint=endpoint, check=False)
            assert "Traceback" not in ready.stderr, ready.stderr
            if ready.returncode == 0:
                break
            assert "namespace hyperpod-ns-acoustics does not exist yet" in ready.stderr
            assert time.monotonic() < deadline, ready.stderr
            time.sleep(1)
    finally:
        run("teams", "delete", "acoustics", "--json", endpoint=endpoint)
    # The documented job is production: a HyperPodPyTorchJob only, in the team's namespace.
    assert ready.stderr.count("accepted by the API server") == 1, ready.stderr
    assert "hyperpod: HyperPodPyTorchJob hyperpod-ns-acoustics/" in ready.stderr
    assert jobs_of("acoustics") == []

    # Once the team has run (the documented job, admitted), its objects pass the API server.
    job.write_text(json.dumps(documented_job() | {"template": "development"}))
    submitted = json.loads(run("jobs", "submit", str(job), "--json", endpoint=endpoint).stdout)
    try:
        deadline = time.monotonic() + loaded(120)
        while status(submitted["job_id"]) == "Pending":
            assert time.monotonic() < deadline, "the documented job was never admitted"
            time.sleep(1)
        before = jobs_of("nlp")
        checked = run("jobs", "submit", str(job), "--dry-run", endpoint=endpoint, check=False)
        answer = json.loads(
            run("jobs", "submit", str(job), "--dry-run", "--json", endpoint=endpoint).stdout
        )
    finally:
        run("jobs", "cancel", submitted["job_id"], endpoint=endpoint)
    assert checked.returncode == 0, checked.stderr
    kinds = [(o["kind"], o["metadata"]["namespace"]) for o in yaml.safe_load_all(checked.stdout)]
    assert kinds == [("HyperPodPyTorchJob", "hyperpod-ns-nlp"), ("Job", "hyperpod-ns-nlp")]
    assert checked.stderr.count("accepted by the API server") == 2, checked.stderr
    assert answer["accepted"] and [o["path"] for o in answer["objects"]] == ["hyperpod", "burst"]
    spec = answer["objects"][0]["object"]["spec"]
    assert spec["replicaSpecs"][0]["replicas"] == 4 and spec["runPolicy"]["suspend"] is True
    assert jobs_of("nlp") == before  # nothing stored


def test_jobs_logs_reads_a_replicas_log_through_the_api_server(
    endpoint: str, tmp_path: Path
) -> None:
    """GET /jobs/{jobId}/logs: the API function reads pods/log from kube-apiserver, which
    reaches the pod's kubelet (KWOK's) as on a real cluster; the twin's training prints
    what each rank does."""
    job = tmp_path / "job.json"
    job.write_text(json.dumps(documented_job() | {"template": "development", "replicas": 2}))
    submitted = json.loads(run("jobs", "submit", str(job), "--json", endpoint=endpoint).stdout)
    job_id = submitted["job_id"]
    try:
        deadline = time.monotonic() + loaded(120)
        while True:
            shown = run("jobs", "logs", job_id, "--replica", "1", endpoint=endpoint, check=False)
            if "rank 1 of " in shown.stdout:
                break
            assert "Traceback" not in shown.stderr, shown.stderr
            assert time.monotonic() < deadline, shown.stderr
            time.sleep(1)
        assert shown.returncode == 0 and f"pod {job_id}" in shown.stderr, shown.stderr
        log = json.loads(
            run("jobs", "logs", job_id, "--tail", "1", "--json", endpoint=endpoint).stdout
        )
        assert (log["replica"], log["phase"], log["truncated"]) == (0, "Running", False)
        assert len(log["lines"]) == 1 and log["node"], log
        missing = run("jobs", "logs", job_id, "--replica", "7", endpoint=endpoint, check=False)
        assert missing.returncode == 1 and "no pod of replica 7" in missing.stderr
        refused = run("jobs", "logs", job_id, "--tail", "0", endpoint=endpoint, check=False)
        assert refused.returncode == 1 and ": 422 " in refused.stderr, refused.stderr
        # What the shell completion offers for a JOB_ID, newest first.
        assert run("completion", "ids", "jobs", endpoint=endpoint).stdout.split()[0] == job_id
    finally:
        run("jobs", "cancel", job_id, endpoint=endpoint)


def test_preflight_passes_a_ready_twin_and_names_what_is_missing(endpoint: str) -> None:
    checks = {
        c["name"]: c for c in json.loads(run("preflight", "--json", endpoint=endpoint).stdout)
    }
    for name in ("stack", "hyperpod-cluster", "orchestrator", "eks-access-entries"):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["checkpoint-bucket"]["status"] == "pass"
    assert checks["admin-principals"]["status"] == "pass"
    assert all(c["status"] != "fail" for c in checks.values()), checks
    # A prerequisite broken as a real account breaks it: the inventory function's access
    # entry deleted (through the twin's EKS API), then put back.
    eks = boto3.client(
        "eks",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="twin",
        aws_secret_access_key="twin",
    )
    cluster = "hyperguard-eks"
    (principal,) = [
        arn
        for arn in eks.list_access_entries(clusterName=cluster)["accessEntries"]
        if "hyperguard-inventory"
        in eks.describe_access_entry(clusterName=cluster, principalArn=arn)["accessEntry"][
            "kubernetesGroups"
        ]
    ]
    eks.delete_access_entry(clusterName=cluster, principalArn=principal)
    try:
        broken = run("preflight", endpoint=endpoint, check=False)
    finally:
        eks.create_access_entry(
            clusterName=cluster, principalArn=principal, kubernetesGroups=["hyperguard-inventory"]
        )
    assert broken.returncode == 1 and "Traceback" not in broken.stderr
    line = next(x for x in broken.stdout.splitlines() if "eks-access-entries" in x)
    assert "fail" in line and "hyperguard-inventory" in line


def test_executions_and_watch_follow_a_recovery(endpoint: str) -> None:
    busy = {
        i["instance_id"]
        for i in json.loads(run("incidents", "list", "--json", endpoint=endpoint).stdout)
    }
    busy |= {
        n
        for j in json.loads(run("jobs", "list", "--json", endpoint=endpoint).stdout)
        for n in j["nodes"]
    }
    nodes = json.loads(run("twin", "nodes", "--json", endpoint=endpoint).stdout)["nodes"]
    target = next(
        n["instance_id"]
        for n in nodes
        if n["platform"] == "hyperpod" and n["instance_id"] not in busy
    )
    inject_unhealthy(target, endpoint)
    deadline = time.monotonic() + loaded(30)
    while True:  # the node is healthy in the simulator: the recovery closes the incident
        incident = next(
            (
                i
                for i in json.loads(run("incidents", "list", "--json", endpoint=endpoint).stdout)
                if i["instance_id"] == target
            ),
            None,
        )
        listed = json.loads(run("executions", "list", "--json", endpoint=endpoint).stdout)
        mine = [e for e in listed if incident and e["name"] == incident["incident_id"]]
        if (mine and mine[0]["status"] != "RUNNING") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert incident is not None and mine, listed
    name = incident["incident_id"]
    assert mine[0]["status"] == "SUCCEEDED" and mine[0]["duration_s"] > 0
    assert [e["start"] for e in listed] == sorted((e["start"] for e in listed), reverse=True)
    succeeded = run("executions", "list", "--status", "SUCCEEDED", "--json", endpoint=endpoint)
    assert name in {e["name"] for e in json.loads(succeeded.stdout)}

    shown = json.loads(run("executions", "show", name, "--json", endpoint=endpoint).stdout)
    assert shown["states"][0]["state"] == "Diagnose"
    assert shown["input"]["incident_id"] == name and shown["input"]["instance_id"] == target
    outcomes = {s["state"]: s["outcome"] for s in shown["states"]}
    assert all(o == "done" or o.startswith("done: ") for o in outcomes.values()), outcomes
    assert outcomes["Diagnose"].startswith("done: ")  # says what it decided
    assert "Diagnose" in run("executions", "show", name, endpoint=endpoint).stdout

    once = lines(run("watch", "--once", "--json", endpoint=endpoint))
    assert {"type": "incident", "incident_id": name, "status": "resolved"}.items() <= next(
        c for c in once if c["type"] == "incident" and c["incident_id"] == name
    ).items()
    ended = next(c for c in once if c["type"] == "execution" and c["name"] == name)
    assert (ended["status"], ended["error"]) == ("SUCCEEDED", None)


def test_watch_ends_with_ctrl_c_in_one_line(endpoint: str) -> None:
    env = os.environ | {"HYPERGUARD_ENDPOINT": endpoint}
    env.pop("AWS_ENDPOINT_URL", None)
    proc = subprocess.Popen(
        [*CLI, "watch", "--interval", "0.5"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("watching incidents")  # its loop has begun
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert err == "hyperguard: interrupted\n"
