"""Every way a user can get the CLI wrong, or interrupt it, ends in one line and an exit
status (docs/cli.md), never a traceback."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import EVENTS, ROOT

from hyperguard.cli import main as cli
from hyperguard.recovery.operator import OperatorActionError
from hyperguard_twin import commands as twin_commands
from hyperguard_twin import launch

CLI = [sys.executable, "-m", "hyperguard.cli.main"]


def exit_status(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse: usage errors, --help, --version
        return int(exc.code or 0)


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["twin", "up", "--port", "99999"], "99999 is not a port"),
        (["twin", "up", "--port", "http"], "http is not a whole number"),
        (["twin", "demo", "--api-port", "-1"], "-1 is not a port"),
        (["twin", "up", "--time-scale", "0"], "0 is not a positive number"),
        (["twin", "demo", "--time-scale", "-5"], "-5 is not a positive number"),
        (["twin", "up", "--time-scale", "inf"], "inf is not a positive number"),
        (["twin", "up", "--nodes", "-3"], "-3 is not a positive whole number"),
        (["twin", "scenario", "elastic-fault", "--time-scale", "nan"], "not a positive number"),
        (["twin", "gameday", "--instances", "0"], "0 is not a whole number from 1 to 100000"),
        (["twin", "gameday", "--failure-rate", "2"], "2 is not a number from 1e-09 to 1"),
        (["twin", "gameday", "--failure-rate", "nan"], "nan is not a number from"),
        (["twin", "gameday", "--days", "0"], "0 is not a number from 0.01 to 365"),
        (["twin", "gameday", "--measure", "51"], "51 is not a whole number from 1 to 50"),
        (["twin", "gameday", "--strategy", "pray"], "invalid choice"),
        (["twin", "gameday", "--seed", "x"], "x is not a whole number"),
        (["incidents", "list", "--limit", "-1"], "-1 is not a positive whole number"),
        (["incidents", "list", "--limit", "0"], "0 is not a positive whole number"),
        (["twin", "up", "--port", "5000", "--api-port", "5000"], "both 5000"),
        (["twin", "fault", "i-1", "--kind", "meteor"], "invalid choice"),
        (["nosuch"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2_with_one_clear_complaint(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(argv) == 2
    err = capsys.readouterr().err
    assert complaint in err and "Traceback" not in err


def test_a_bare_command_prints_its_help_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_status([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: hyperguard") and "twin" in out and "exit status" in out
    assert exit_status(["incidents"]) == 0
    assert "approve" in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_status(["--version"]) == 0
    assert capsys.readouterr().out.startswith("hyperguard ")


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _parsers(sub)
    return found


class Entry:
    """An entry point of the `hyperguard.cli` group, as importlib.metadata gives one."""

    def __init__(self, name: str, value: str, loaded: Any) -> None:
        self.name, self.value, self._loaded = name, value, loaded

    def load(self) -> Any:
        if isinstance(self._loaded, Exception):
            raise self._loaded
        return self._loaded


def test_the_twin_group_comes_from_its_entry_point_and_only_from_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The product CLI names no twin module: without the twin's entry point there is no
    `twin` group (the rest still works); a plugin that cannot load is one line on stderr."""
    import importlib.metadata

    groups = {"events", "jobs", "incidents", "plan"}

    def commands(entries: list[Entry]) -> set[str]:
        monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: entries)
        parser = cli.build_parser()
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return set(sub.choices)

    installed = commands(
        [Entry("twin", "hyperguard_twin.commands:add_parsers", twin_commands.add_parsers)]
    )
    assert "twin" in installed and groups <= installed
    alone = commands([])
    assert "twin" not in alone and groups <= alone
    broken = commands([Entry("twin", "hyperguard_twin.commands:add_parsers", ImportError("gone"))])
    assert "twin" not in broken and groups <= broken
    assert capsys.readouterr().err == (
        "hyperguard: the 'twin' commands (hyperguard_twin.commands:add_parsers) "
        "did not load: gone\n"
    )


def test_every_option_argument_and_command_has_help_text() -> None:
    missing = [
        f"{p.prog} {action.dest}"
        for p in _parsers(cli.build_parser())
        for action in p._actions
        if not action.help and not isinstance(action, argparse._SubParsersAction)
    ]
    assert missing == []
    for p in _parsers(cli.build_parser()):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions), p.prog


def test_every_command_takes_json() -> None:
    leaves = [
        p
        for p in _parsers(cli.build_parser())
        if not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)
    ]
    assert len(leaves) >= 16
    assert [p.prog for p in leaves if "--json" not in p._option_string_actions] == []


def test_ctrl_c_exits_130_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(_args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(twin_commands, "cmd_twin_demo", interrupted)
    assert exit_status(["twin", "demo"]) == 130
    assert capsys.readouterr().err == "hyperguard: interrupted\n"


def test_output_piped_into_head_ends_quietly() -> None:
    files = [str(p) for p in sorted(EVENTS.glob("*.json"))] * 40  # well past a pipe buffer
    proc = subprocess.Popen(
        [*CLI, "events", "classify", *files],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    json.loads(proc.stdout.readline())
    proc.stdout.close()  # what `head -1` does once it has its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""


class Unreachable:
    """A ServiceClient whose twin does not answer."""

    def __init__(self, *_args: Any) -> None:
        from hyperguard.cli.client import TwinUnreachableError

        self.error = TwinUnreachableError("no twin answers at http://127.0.0.1:9 (refused)")

    def twin_get(self, _path: str) -> Any:
        raise self.error

    def twin_post(self, _path: str, _body: Any) -> Any:
        raise self.error

    @property
    def outputs(self) -> Any:
        raise self.error


@pytest.mark.parametrize(
    "argv",
    [
        ["twin", "status"],
        ["twin", "nodes", "--json"],
        ["twin", "inject", str(EVENTS / "ec2-spot-interruption-warning.json")],
        ["twin", "fault", "i-1"],
        ["incidents", "list"],
        ["incidents", "show", "x"],
        ["incidents", "approve", "x"],
        ["nodes", "veto", "i-1"],
        ["jobs", "list"],
        ["jobs", "show", "j"],
    ],
)
def test_a_service_that_does_not_answer_is_one_line_and_exit_1(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_service", Unreachable)
    assert exit_status(argv) == 1
    captured = capsys.readouterr()
    assert captured.err == "hyperguard: no twin answers at http://127.0.0.1:9 (refused)\n"
    assert captured.out == ""


def test_a_real_unreachable_twin_says_so_in_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = subprocess.run(
        [*CLI, "twin", "status", "--endpoint", "http://127.0.0.1:9"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("hyperguard: no twin answers at http://127.0.0.1:9")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_aws_errors_are_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from botocore.exceptions import ClientError

    class Store:
        def recent(self, _limit: int) -> Any:
            raise ClientError(
                {"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "Query"
            )

    monkeypatch.setattr(cli, "_incident_store", lambda _args: Store())
    assert exit_status(["incidents", "list"]) == 1
    err = capsys.readouterr().err
    assert "AccessDeniedException" in err and err.count("\n") == 1


def test_unknown_incident_job_and_refused_operator_actions_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Nothing:
        def get(self, _id: str) -> None:
            return None

        def record(self, _id: str) -> None:
            return None

    class Operator:
        def approve(self, incident_id: str, _by: str) -> Any:
            raise OperatorActionError(f"incident {incident_id} is not awaiting approval")

    monkeypatch.setattr(cli, "_incident_store", lambda _args: Nothing())
    monkeypatch.setattr(cli, "_job_store", lambda _args: Nothing())
    monkeypatch.setattr(cli, "_operator", lambda _args: Operator())
    assert exit_status(["incidents", "show", "inc-9"]) == 1
    assert "no incident inc-9" in capsys.readouterr().err
    assert exit_status(["jobs", "show", "job-9", "--json"]) == 1
    captured = capsys.readouterr()
    assert "no job job-9" in captured.err and captured.out == ""
    assert exit_status(["incidents", "approve", "inc-9"]) == 1
    assert capsys.readouterr().err == "hyperguard: incident inc-9 is not awaiting approval\n"


class Twin:
    """A ServiceClient for a twin with two nodes."""

    def __init__(self, *_args: Any) -> None:
        pass

    def twin_get(self, path: str) -> Any:
        if path == "nodes":
            return {"nodes": [{"instance_id": "i-0a"}, {"instance_id": "i-0b"}]}
        return {
            "endpoint": "http://127.0.0.1:4566",
            "api_endpoint": "http://127.0.0.1:41234",
            "stack": "hyperguard",
            "uptime_s": 3.0,
            "time_scale": 60.0,
            "resources": {},
            "not_created": {},
            "emulator_gaps": [],
            "invocations": 0,
            "function_errors": 0,
            "queue_depth": {},
            "executions": {},
            "outputs": {"HyperPodClusterName": "c", "EventBusName": "b"},
        }

    def client(self, _service: str) -> Any:
        raise AssertionError("nothing is put for an unknown node")


def test_inject_at_an_unknown_node_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_service", Twin)
    event = str(EVENTS / "hyperpod-node-health-unhealthy.json")
    assert exit_status(["twin", "inject", event, "--instance-id", "i-0zz"]) == 1
    err = capsys.readouterr().err
    assert "no node i-0zz in the twin" in err and "Traceback" not in err


def test_twin_status_names_the_api_port_in_use(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_service", Twin)
    assert exit_status(["twin", "status"]) == 0
    assert "API at http://127.0.0.1:41234" in capsys.readouterr().out


def test_a_twin_that_answers_with_an_error_is_not_reported_as_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTPError is a URLError: an error answer must say what the twin said, not that no
    twin answers."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from hyperguard.cli.client import ServiceClient, TwinUnreachableError

    class Refusing(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"error": "no node i-0 in the twin"}'
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://unused")  # restored after: the client sets it
    try:
        endpoint = f"http://127.0.0.1:{server.server_port}"
        with pytest.raises(TwinUnreachableError, match=r"twin refused: .*no node i-0"):
            ServiceClient(endpoint).twin_get("nodes")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("command", ["status", "nodes", "fault i-1", "inject event.json"])
def test_a_twin_only_command_aimed_at_aws_is_one_line_and_exit_2(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def never(*_args: Any) -> Any:
        raise AssertionError("nothing is asked of AWS")

    monkeypatch.setattr(cli, "_service", never)
    assert exit_status(["twin", *command.split(), "--endpoint", "aws"]) == 2
    assert capsys.readouterr().err == (
        "hyperguard: this command needs the local twin, not --endpoint aws\n"
    )
    monkeypatch.setenv("HYPERGUARD_ENDPOINT", "aws")  # the same when aws is the default
    assert exit_status(["twin", *command.split()]) == 2


def test_the_service_client_refuses_aws_for_the_twins_control_api() -> None:
    from hyperguard.cli.client import ServiceClient, TwinUnreachableError

    calls: tuple[Callable[[ServiceClient], object], ...] = (
        lambda c: c.twin_get("status"),
        lambda c: c.twin_post("fault", {"instance_id": "i-1"}),
    )
    for call in calls:
        with pytest.raises(TwinUnreachableError, match="needs the local twin"):
            call(ServiceClient("aws"))


INTERRUPT_ON_IMPORT = """
import os, signal, sys

class InterruptOnImport:
    # Ctrl-C the moment the CLI first imports {module!r}, wherever that happens.
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptOnImport())
from hyperguard.cli.main import main  # what the `hyperguard` script runs
sys.exit(main())
"""


PLAN = ["plan", "mtbf", "--sizes", "8", "--rates", "0.001", "--json"]


@pytest.mark.parametrize(
    ("module", "command"),
    [
        ("pydantic", PLAN),
        ("hyperguard.planning", PLAN),
        # boto3 loads only for a command that calls AWS (the job store's, here), never to
        # build the parser
        ("boto3", ["jobs", "list", "--endpoint", "http://127.0.0.1:9"]),
    ],
)
def test_ctrl_c_while_the_cli_loads_is_one_line_and_exit_130(
    module: str, command: list[str]
) -> None:
    """The heavy imports (most of the first second) happen after the handler is in place."""
    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPT_ON_IMPORT.format(module=module), *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "hyperguard: interrupted\n", "")


@pytest.mark.parametrize("argv", [["--help"], ["plan", "mtbf", "--sizes", "0"]])
def test_help_and_usage_errors_never_load_the_twin(argv: list[str]) -> None:
    """`--help` and a usage error end in SystemExit, which is matched against the runtime
    errors: naming those must not load the twin and moto (1.8 s instead of 0.6), and building
    the parser loads no SDK, store or cluster adapter (0.65 s instead of 0.18)."""
    heavy = (
        "moto",
        "hyperguard_twin.runtime",
        "boto3",
        "aws_xray_sdk",
        "hyperguard.store",
        "hyperguard.cluster",
    )
    check = (
        "import sys\nfrom hyperguard.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", check],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert proc.stdout.splitlines()[-1] == "[]", proc.stderr


def test_ctrl_c_stops_a_cli_started_with_sigint_ignored(tmp_path: Any) -> None:
    """A shell starts `hyperguard … &` with SIGINT ignored; `kill -INT` must still stop it."""
    import signal

    fifo = tmp_path / "event.json"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [*CLI, "events", "classify", str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        with fifo.open("w"):  # open once the CLI opened it to read: it waits for the event
            # Python handles a signal between bytecodes: one that lands after `open` and
            # before `read` blocks leaves the flag set and the read waiting. Ctrl-C comes
            # from a person who waits on a program that waits, so signal the waiting CLI.
            wait_until_blocked_reading_a_pipe(proc.pid)
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, err) == (130, "hyperguard: interrupted\n")


def wait_until_blocked_reading_a_pipe(pid: int, timeout_s: float = 60) -> None:
    """Until the kernel says the process sleeps in a pipe read (Linux's /proc wchan: "0"
    while it runs, and always on a kernel that hides where processes sleep)."""
    import time

    wchan = Path(f"/proc/{pid}/wchan")
    if not wchan.exists():
        pytest.skip("no /proc/<pid>/wchan to see where the CLI waits")
    deadline = time.monotonic() + timeout_s
    seen = set()
    while "pipe" not in (now := wchan.read_text()):
        seen.add(now)
        if time.monotonic() >= deadline:
            if seen == {"0"}:
                pytest.skip("the kernel hides /proc/<pid>/wchan")
            pytest.fail(f"the CLI never waited on the FIFO (wchan {sorted(seen)})")
        time.sleep(0.01)


class UpTwin:
    """What `twin up` needs of a twin that came up. Its status, what `twin up` reports, is
    answered once `signalled` is set (at most 30 s): a signal sent meanwhile lands while
    `twin up` is still reporting that the twin is up."""

    def __init__(self) -> None:
        import threading

        self.ready = threading.Event()
        self.signalled = threading.Event()
        self.stopped = False
        self.api_endpoint = "http://127.0.0.1:3000"
        self.emulator = argparse.Namespace(endpoint="http://127.0.0.1:4566")

    def status(self) -> dict[str, Any]:
        self.ready.set()
        self.signalled.wait(30)
        return {"kubernetes_endpoint": "https://127.0.0.1:6443", "stack": "hyperguard"}

    def down(self) -> None:
        self.stopped = True


def test_twin_up_stops_on_sigterm_that_lands_on_another_thread(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A signal may be delivered to any of the twin's threads; Python runs its handler on
    the main thread only once that wakes up, so `twin up` must not sleep untimed. And it may
    come as soon as the twin is up, while `twin up` still reports so: its handler is in place
    before then (a SIGTERM in that window ended the process, the test's pytest worker once)."""
    import signal
    import threading

    twin = UpTwin()
    monkeypatch.setattr(launch, "start_twin", lambda *_args, **_config: twin)
    main_thread = threading.get_ident()
    rescued, early = threading.Event(), threading.Event()

    def signal_from_another_thread() -> None:
        twin.ready.wait(30)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # handled on main's wake
        twin.signalled.set()
        if not stopped.wait(30):  # never woke: unblock it, so the test fails, not hangs
            rescued.set()
            signal.pthread_kill(main_thread, signal.SIGTERM)

    stopped = threading.Event()

    # Not the default action (the end of this process) for a signal `twin up` does not
    # handle yet: the test's own, which says so, and stops the command as Ctrl-C would.
    def unhandled(*_: object) -> None:
        early.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, unhandled)
    helper = threading.Thread(target=signal_from_another_thread)
    helper.start()
    try:
        code = cli.main(["twin", "up", "--json"])
    finally:
        stopped.set()
        helper.join()
        signal.signal(signal.SIGTERM, previous)
    assert not early.is_set(), "the SIGTERM came before `twin up` handled it"
    assert code == 0 and twin.stopped and not rescued.is_set()
    assert json.loads(capsys.readouterr().out)["stack"] == "hyperguard"
