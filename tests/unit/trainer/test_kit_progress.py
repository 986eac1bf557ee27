"""The trainer kit's progress, graceful stop and environment, without torch: compute time
per node (the slowest rank of each), reports to the API as `POST /jobs/{jobId}/checkpoints`
takes them (signed with SigV4 where asked), SIGTERM as a flag with the grace left."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from tests.unit.trainer.ranks import all_gather

from hyperguard.api.models import CheckpointReport, ProgressReport
from hyperguard.governance.pace import lagging_node
from hyperguard_trainer import Context, ContextError, GracefulStop, Progress, Reporter
from hyperguard_trainer.context import instance_id


def test_each_node_reports_its_slowest_ranks_mean_compute_seconds() -> None:
    gathered = [
        ("i-0aaaaaaaaaaaaaaa1", 0.5),
        ("i-0aaaaaaaaaaaaaaa1", 0.7),
        ("i-0bbbbbbbbbbbbbbb2", 2.0),
        (None, 9.0),
    ]
    progress = Progress(
        Context(rank=0, instance_id="i-0aaaaaaaaaaaaaaa1"),
        synchronize=lambda: None,
        collective=lambda mine: gathered,
    )
    for _ in range(3):
        with progress.compute():
            pass
    assert progress.node_step_seconds() == {"i-0aaaaaaaaaaaaaaa1": 0.7, "i-0bbbbbbbbbbbbbbb2": 2.0}
    other = Progress(
        Context(rank=1, world_size=2), synchronize=lambda: None, collective=lambda mine: [mine]
    )
    assert other.node_step_seconds() is None


def test_compute_time_counts_only_the_wrapped_work_and_synchronises_around_it() -> None:
    calls: list[str] = []
    sent: list[Any] = []

    def gather(mine: Any) -> list[Any]:
        sent.append(mine)
        return [mine]

    progress = Progress(
        Context(instance_id="i-0aaaaaaaaaaaaaaa1"),
        synchronize=lambda: calls.append("sync"),
        collective=gather,
    )
    for _ in range(2):
        with progress.compute():
            time.sleep(0.01)  # the work being timed, not a wait for a condition
        time.sleep(0.3)  # outside: the all-reduce, the optimizer
    report = progress.node_step_seconds()
    assert calls == ["sync"] * 4
    assert report is not None and 0.01 <= report["i-0aaaaaaaaaaaaaaa1"] < 0.3
    assert progress.node_step_seconds() is None  # nothing since: no figure, not zero
    assert sent[-1] == ("i-0aaaaaaaaaaaaaaa1", None)


class _Api(BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, str], dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((self.path, dict(self.headers), body))
        self.send_response(201)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Any:
    server = HTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Api.received = []
    yield f"http://127.0.0.1:{server.server_port}", _Api.received
    server.shutdown()


def test_a_report_is_what_the_api_accepts_and_is_signed(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, received = api
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    reporter = Reporter(Context(job_id="llama-7", api_url=url + "/v1/"))
    reporter.checkpoint(300, "s3://ckpt/llama/step-00000300/", {"i-0aaaaaaaaaaaaaaa1": 1.25})
    ((path, headers, body),) = received
    assert path == "/v1/jobs/llama-7/checkpoints"
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in headers["Authorization"]
    report = CheckpointReport.model_validate(body)  # the API's own model takes it
    assert (report.step, report.node_step_seconds) == (300, {"i-0aaaaaaaaaaaaaaa1": 1.25})
    Reporter(Context(job_id="llama-7", run=2, api_url=url)).heartbeat(310, None)
    path, _, body = received[1]
    assert path == "/jobs/llama-7/progress"
    beat = ProgressReport.model_validate(body)
    assert (beat.run, beat.step, beat.node_step_seconds) == (2, 310, None)
    assert reporter.sent == 1


def test_a_report_that_cannot_be_sent_is_counted_and_dropped() -> None:
    reporter = Reporter(Context(job_id="j", api_url="http://127.0.0.1:9"), sign=False, timeout_s=2)
    reporter.checkpoint(1, "s3://b/j/step-00000001/", None)
    assert (reporter.sent, reporter.failed) == (0, 1)


def test_sigterm_is_a_request_to_stop_with_the_grace_period_left() -> None:
    before = signal.getsignal(signal.SIGTERM)
    try:
        stop = GracefulStop(Context(grace_s=30.0))
        assert not stop.requested and stop.left_s() is None
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not stop.requested and time.monotonic() < deadline:
            time.sleep(0.001)  # the handler runs between bytecodes of this thread
        assert stop.requested and stop.signum == signal.SIGTERM
        left = stop.left_s()
        assert left is not None and 29.0 < left <= 30.0
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_environment_is_read_as_hyperguard_and_torchrun_set_it() -> None:
    context = Context.from_env(
        {
            "HYPERGUARD_JOB_ID": "llama-7",
            "HYPERGUARD_RUN": "3",
            "HYPERGUARD_CHECKPOINT_URI": "s3://ckpt/llama/",
            "HYPERGUARD_RESUME_FROM": "s3://ckpt/llama/step-00000300/",
            "HYPERGUARD_RESUME_STEP": "300",
            "HYPERGUARD_NODE_NAME": "hyperpod-i-0123456789abcdef0",
            "HYPERGUARD_GRACE_S": "120",
            "RANK": "5",
            "WORLD_SIZE": "16",
            "TORCHELASTIC_RESTART_COUNT": "2",
        }
    )
    assert (context.job_id, context.run, context.attempt) == ("llama-7", 3, 2)
    assert (context.rank, context.world_size, context.resume_step) == (5, 16, 300)
    assert context.instance_id == "i-0123456789abcdef0" and context.grace_s == 120.0
    assert Context.from_env({}) == Context()
    assert instance_id({"HYPERGUARD_NODE_NAME": "ip-10-0-0-1.ec2.internal"}) is None


@pytest.mark.parametrize(
    "env",
    [{"RANK": "2", "WORLD_SIZE": "2"}, {"HYPERGUARD_RUN": "-1"}, {"HYPERGUARD_RUN": "two"}],
)
def test_a_value_hyperguard_or_torchrun_would_never_set_is_an_error(env: dict[str, str]) -> None:
    with pytest.raises(ContextError):
        Context.from_env(env)


def test_a_slowed_rank_of_two_is_named_as_the_lagging_node() -> None:
    """Two ranks on two nodes, as threads: rank 1's compute takes three times as long, while
    the step (compute, then the all-reduce's wait for the slowest) takes the same on both.
    The timings the kit gathers name rank 1's node, by HyperGuard's own rule (D100)."""
    nodes = ["i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"]
    barrier = threading.Barrier(2)
    gather_of = all_gather(2)
    reported: list[Any] = [None, None]

    def rank(r: int) -> None:
        progress = Progress(
            Context(rank=r, world_size=2, instance_id=nodes[r]),
            synchronize=lambda: None,
            collective=gather_of(r),
        )
        for _ in range(3):
            with progress.compute():
                time.sleep(0.02 * (3 if r == 1 else 1))  # the work being timed
            barrier.wait(10)  # the all-reduce: both wait for the slower
        reported[r] = progress.node_step_seconds()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert reported[1] is None  # rank 0 reports
    lag = lagging_node(reported[0])
    assert lag is not None and lag[0] == nodes[1], reported[0]
