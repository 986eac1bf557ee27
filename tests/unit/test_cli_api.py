"""`jobs submit|cancel`, `policy show|set` through the API, and `completion`."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_cli_errors import exit_status

from hyperguard.cli import main as cli
from hyperguard.cli.api import signed


class Api:
    """A stand-in for the twin's API Gateway: records each call, answers what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any, dict[str, str]]] = []
        self.answer: tuple[int, Any] = (200, {})


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    recorded = Api()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            recorded.calls.append((self.command, self.path, body, dict(self.headers)))
            status, answer = recorded.answer
            raw = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    class Twin:
        is_twin = True

        def __init__(self, *_args: Any) -> None:
            pass

        def twin_get(self, path: str) -> Any:
            assert path == "status"
            return {"api_endpoint": f"http://127.0.0.1:{server.server_port}"}

    monkeypatch.setattr(cli, "_service", Twin)
    yield recorded
    server.shutdown()
    server.server_close()


def test_jobs_submit_posts_the_file_with_its_idempotency_key(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    submission = {"team": "team-a", "template": "pytorch-ddp", "replicas": 2}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(submission))
    api.answer = (201, {"job_id": "job-1", "status": "Pending"})
    assert cli.main(["jobs", "submit", str(path), "--idempotency-key", "k-1", "--json"]) == 0
    method, where, body, headers = api.calls[0]
    assert (method, where, body, headers["Idempotency-Key"]) == ("POST", "/jobs", submission, "k-1")
    assert json.loads(capsys.readouterr().out) == {"job_id": "job-1", "status": "Pending"}


def test_jobs_submit_sends_a_yaml_pod_template_as_the_submissions_pod_template(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"instance_type": "ml.p5.48xlarge", "replicas": 2}))
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "spec:\n"
        "  serviceAccountName: trainer\n"
        "  containers:\n"
        "  - name: pytorch\n"
        "    image: llama:1\n"
        "    env: [{name: NCCL_DEBUG, value: INFO}]\n"
    )
    api.answer = (201, {"job_id": "job-1", "status": "Pending"})
    assert cli.main(["jobs", "submit", str(job), "--pod-template", str(pod)]) == 0
    _, where, body, _ = api.calls[0]
    assert where == "/jobs" and body == {
        "instance_type": "ml.p5.48xlarge",
        "replicas": 2,
        "pod_template": {
            "spec": {
                "serviceAccountName": "trainer",
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "llama:1",
                        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                    }
                ],
            }
        },
    }
    pod.write_text("- a list\n")
    assert exit_status(["jobs", "submit", str(job), "--pod-template", str(pod)]) == 1
    assert "a pod template is a mapping" in capsys.readouterr().err
    pod.write_text("spec: [unclosed\n")
    assert exit_status(["jobs", "submit", str(job), "--pod-template", str(pod)]) == 1
    assert "not a YAML or JSON document" in capsys.readouterr().err
    assert len(api.calls) == 1


def test_jobs_cancel_deletes_the_job(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer = (200, {"job_id": "job-1", "status": "Cancelled"})
    assert cli.main(["jobs", "cancel", "job-1"]) == 0
    assert api.calls[0][:2] == ("DELETE", "/jobs/job-1")
    assert capsys.readouterr().out == "job-1: Cancelled\n"


def test_policy_show_and_set_go_to_each_policys_route(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answer = (200, {"capacity": {"maxNodes": 0}})
    assert cli.main(["policy", "show", "burst"]) == 0
    assert json.loads(capsys.readouterr().out) == {"capacity": {"maxNodes": 0}}
    policy = tmp_path / "repair.json"
    policy.write_text('{"enabled": true}')
    assert cli.main(["policy", "set", "repair", str(policy), "--json"]) == 0
    assert [c[:3] for c in api.calls] == [
        ("GET", "/policies/burst", None),
        ("PUT", "/policies/node-repair", {"enabled": True}),
    ]


def test_policy_show_repair_says_who_repairs_what_on_stderr(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    owners = {
        "owners": [
            {
                "source": "karpenter",
                "scope": "Karpenter NodePool nodes",
                "active": True,
                "setting": "defer",
                "repairs": "karpenter",
                "note": "kube-system/karpenter: NodeRepair on",
            }
        ],
        "seen": {"observedAt": "2026-11-26T09:00:00+00:00"},
    }
    api.answer = (200, owners)
    assert cli.main(["policy", "show", "repair"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == owners  # stdout: what the policy route answered, only
    assert "the inventory looked at 2026-11-26T09:00:00+00:00" in err
    assert "karpenter" in err and "on  defer -> karpenter: kube-system/karpenter" in err
    assert [c[:2] for c in api.calls] == [("GET", "/policies/node-repair"), ("GET", "/repairers")]
    assert cli.main(["policy", "show", "repair", "--json"]) == 0
    assert capsys.readouterr().err == "" and len(api.calls) == 3


def test_an_api_refusal_and_a_bad_file_are_one_line_and_exit_1(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "burst.json"
    policy.write_text('{"capacity": {"maxNodes": -1}}')
    api.answer = (422, {"message": "invalid policy", "field": "capacity.maxNodes"})
    assert exit_status(["policy", "set", "burst", str(policy)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hyperguard: PUT /policies/burst: 422 invalid policy")
    assert "capacity.maxNodes" in err and err.count("\n") == 1
    policy.write_text("{not json")
    assert exit_status(["policy", "set", "burst", str(policy)]) == 1
    assert "not a JSON document" in capsys.readouterr().err
    assert exit_status(["policy", "show", "nosuch"]) == 2


def test_on_aws_the_call_is_signed_for_execute_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    headers = signed("GET", "https://x.execute-api.eu-west-1.amazonaws.com/v1/jobs", None, {})
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in headers["Authorization"]


def complete(script: str, words: str) -> list[str]:
    """What bash offers after `words` (the last one is being typed)."""
    line = words.split(" ")
    program = (
        f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in line)}); "
        f'COMP_CWORD={len(line) - 1}; _hyperguard; echo "${{COMPREPLY[*]}}"'
    )
    proc = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return proc.stdout.split()


def test_bash_completion_comes_from_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert set(complete(script, "hyperguard ")) >= {"twin", "jobs", "policy", "completion"}
    assert complete(script, "hyperguard jobs ") == ["list", "show", "submit", "logs", "cancel"]
    assert complete(script, "hyperguard twin fault i-1 --kind ") == ["gpu", "persistent", "kernel"]
    assert complete(script, "hyperguard twin up --ti") == ["--time-scale"]
    # A job's or an incident's id: the ids the service has (`completion ids KIND`, stubbed).
    stub = (
        'hyperguard() { [[ "$1 $2" == "completion ids" ]] && case $3 in '
        "jobs) printf 'ml-1\\nml-2\\n' ;; incidents) echo inc-9 ;; esac; }\n"
    )
    assert complete(stub + script, "hyperguard jobs logs ml-") == ["ml-1", "ml-2"]
    assert complete(stub + script, "hyperguard incidents show ") == ["inc-9"]
    assert "ml-1" not in complete(stub + script, "hyperguard jobs logs ml-1 --replica ")
    assert cli.main(["completion", "zsh"]) == 0
    assert capsys.readouterr().out.startswith("autoload -U +X bashcompinit && bashcompinit\n")
