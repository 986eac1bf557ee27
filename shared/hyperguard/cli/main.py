"""hyperguard — operator CLI for HyperGuard and its local twin.

Commands that read the service take --endpoint (default: the twin at
http://127.0.0.1:4566, or $HYPERGUARD_ENDPOINT; `aws` for a real deployment) and --stack.
Every command takes --json: then stdout holds JSON only. Exit status: 0 done, 1 the
command failed (one line on stderr), 2 usage error, 130 interrupted (docs/cli.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

# Only the standard library and these two light modules load before main() installs its
# Ctrl-C handling: everything heavier (pydantic, boto3, the twin's commands) loads inside it, so an
# interruption while it loads is the one line `hyperguard: interrupted`, not a traceback.
from hyperguard.cli.options import add_group, json_option
from hyperguard.cli.output import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    print_json,
    say,
)


# ---- events -------------------------------------------------------------------------------
def _signal_json(name: str, s: Any) -> dict[str, Any]:
    return {
        "file": name,
        "source": s.source.value,
        "kind": s.kind,
        "instance_id": s.instance_id,
        "cluster": s.cluster,
        "severity": s.severity.value,
        "action": s.action.value,
        "repair": s.repair.value,
        "reason": s.reason,
        "observed_at": s.observed_at.isoformat(),
        "not_before": s.not_before.isoformat() if s.not_before else None,
        "deadline": s.deadline.isoformat() if s.deadline else None,
        "dedupe_key": s.dedupe_key,
    }


def cmd_events_classify(args: argparse.Namespace) -> int:
    """JSON Lines as each file is read; with --json, one JSON array at the end."""
    from hyperguard.events import ClassifyConfig, MalformedEventError, classify

    config = ClassifyConfig(rebalance_action=args.rebalance_action)
    failed = 0
    collected: list[dict[str, Any]] = []

    def emit(obj: dict[str, Any]) -> None:
        if args.json:
            collected.append(obj)
        else:
            print(json.dumps(obj))

    for name in args.files:
        try:
            event = json.loads(Path(name).read_text())
            if not isinstance(event, dict):
                raise ValueError("the file does not hold a JSON object")
            for s in classify(event, config):
                emit(_signal_json(name, s))
        except (OSError, ValueError, MalformedEventError) as exc:
            failed += 1
            emit({"file": name, "error": f"{type(exc).__name__}: {exc}"})
    if args.json:
        print_json(collected)
    return EXIT_FAILED if failed else EXIT_OK


# ---- the service's stores -----------------------------------------------------------------
def _service(args: argparse.Namespace) -> Any:
    from hyperguard.cli.client import ServiceClient

    return ServiceClient(args.endpoint, args.stack)


def _job_store(args: argparse.Namespace) -> Any:
    from hyperguard.store import JobStore

    return JobStore(_service(args).outputs["JobsTableName"])


def _incident_store(args: argparse.Namespace) -> Any:
    from hyperguard.store import IncidentStore

    outputs = _service(args).outputs
    return IncidentStore(outputs["IncidentsTableName"], outputs["NodesTableName"])


def _operator(args: argparse.Namespace) -> Any:
    from hyperguard.messaging import RecoveryWorkflows
    from hyperguard.recovery.operator import RecoveryOperator
    from hyperguard.store import IncidentStore, NodeStore

    outputs = _service(args).outputs
    return RecoveryOperator(
        IncidentStore(outputs["IncidentsTableName"], outputs["NodesTableName"]),
        NodeStore(outputs["NodesTableName"]),
        RecoveryWorkflows(outputs["NodeRecoveryStateMachineArn"]),
    )


def _view_stores(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """What the views read: teams, jobs, nodes and EC2's instance figures."""
    from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
    from hyperguard.store import JobStore, NodeStore, TeamStore

    outputs = _service(args).outputs
    return (
        TeamStore(outputs["TeamsTableName"]),
        JobStore(outputs["JobsTableName"]),
        NodeStore(outputs["NodesTableName"]),
        Ec2InstanceCatalogue(),
    )


def _ids(kind: str, args: argparse.Namespace, limit: int) -> list[str]:
    """The service's newest `limit` job or incident ids, newest first (shell completion)."""
    from hyperguard.cli.jobs import newest_first

    if kind == "jobs":
        return [r.job.job_id for r in newest_first(_job_store(args).records())][:limit]
    return [i.incident_id for i in _incident_store(args).recent(limit)]


# ---- parser -------------------------------------------------------------------------------
def _version() -> str:
    try:
        return version("hyperguard")
    except PackageNotFoundError:
        return "unknown (not installed)"


def service_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--endpoint",
        help="twin URL, or 'aws' (default $HYPERGUARD_ENDPOINT or http://127.0.0.1:4566)",
    )
    p.add_argument("--stack", default="hyperguard", help="CloudFormation stack name")
    json_option(p)


def _command_plugins() -> list[Callable[..., None]]:
    """The command groups other distributions add (entry point group `hyperguard.cli`): each
    an `add_parsers(groups, service_options, service)`. The twin's `twin` group is one."""
    from importlib.metadata import entry_points

    plugins = []
    for entry in entry_points(group="hyperguard.cli"):
        try:
            plugins.append(entry.load())
        except (ImportError, AttributeError) as exc:  # a broken install: the rest still work
            say(f"hyperguard: the {entry.name!r} commands ({entry.value}) did not load: {exc}")
    return plugins


def build_parser() -> argparse.ArgumentParser:
    from hyperguard.cli import (
        admin,
        api,
        completion,
        executions,
        incidents,
        preflight,
        views,
        watch,
    )
    from hyperguard.cli.deps import Deps
    from hyperguard.cli.jobs import add_jobs_parser
    from hyperguard.cli.plan import add_plan_parser

    parser = argparse.ArgumentParser(
        prog="hyperguard",
        description=__doc__.split("\n")[0],
        epilog="exit status: 0 done, 1 the command failed, 2 usage error, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"hyperguard {_version()}")
    parser.set_defaults(func=None, help_of=parser)
    groups = parser.add_subparsers(dest="group", metavar="GROUP", title="command groups")

    events = add_group(groups, "events", "work with node-health events (offline)")
    p = events.add_parser(
        "classify", help="classify event files: one JSON object per signal (JSON Lines)"
    )
    p.add_argument("files", nargs="+", help="event files (EventBridge JSON)")
    p.add_argument(
        "--rebalance-action",
        default="ignore",
        choices=["ignore", "drain", "notify"],
        help="what an EC2 rebalance recommendation calls for (default ignore)",
    )
    p.add_argument("--json", action="store_true", help="one JSON array instead of JSON Lines")
    p.set_defaults(func=cmd_events_classify)

    for add_commands in _command_plugins():  # `hyperguard twin …`: the twin's own
        add_commands(groups, service_options, lambda args: _service(args))

    jobs = add_jobs_parser(groups, service_options, _job_store)
    api.add_parsers(groups, jobs, service_options, lambda args: api.ServiceApi(_service(args)))
    admin.add_parsers(groups, service_options, lambda args: api.ServiceApi(_service(args)))
    add_plan_parser(groups, lambda args: (_incident_store(args), _view_stores(args)[2]))
    views.add_parsers(groups, service_options, views.Deps(_view_stores, incidents=_incident_store))
    deps = Deps(_service, _incident_store, _operator)
    incidents.add_parsers(groups, service_options, deps)
    executions.add_parsers(groups, service_options, deps)
    watch.add_parser(groups, service_options, deps)
    p = groups.add_parser(
        "preflight",
        help="check the account and cluster against what HyperGuard needs (read only)",
        description="Each check a line: pass, warn or fail, what was found and the fix. "
        "Exit 1 when one fails.",
    )
    service_options(p)

    def run_preflight(args: argparse.Namespace) -> int:
        service = _service(args)
        return preflight.cmd_preflight(args, service, api.ServiceApi(service))

    p.set_defaults(func=run_preflight)
    completion.add_parser(groups, parser, service_options, _ids)
    return parser


def _runtime_errors() -> tuple[type[BaseException], ...]:
    """What a command may fail with that is the world's doing, not a bug: one line each. An
    error whose module the command never loaded cannot have been raised, so none is loaded
    here: `--help` and a usage error (SystemExit) stay as quick as the parser."""
    errors: list[type[BaseException]] = [CliError]
    for module, names in (
        ("hyperguard.cli.client", ("TwinUnreachableError",)),
        ("botocore.exceptions", ("BotoCoreError", "ClientError")),
    ):
        loaded = sys.modules.get(module)
        errors += [getattr(loaded, name) for name in names if loaded is not None]
    return tuple(errors)


def _one_line(exc: BaseException) -> str:
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def _needs_the_twin(args: argparse.Namespace) -> bool:
    """A twin-only command (its control API) aimed at a real deployment."""
    from hyperguard.cli.client import default_endpoint

    return (
        bool(getattr(args, "twin_only", False)) and (args.endpoint or default_endpoint()) == "aws"
    )


def main(argv: list[str] | None = None) -> int:
    # A shell starts a background job (`hyperguard twin up &`) with SIGINT ignored, and
    # Python then leaves it so: Ctrl-C / `kill -INT` must stop every command all the same.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.func is None:  # `hyperguard` or `hyperguard GROUP`: what there is to run
            args.help_of.print_help()
            return EXIT_OK
        if getattr(args, "api_port", 0) and args.api_port == getattr(args, "port", 0):
            parser.error(f"--port and --api-port are both {args.port}: give two ports")
        if _needs_the_twin(args):  # a usage error, but one line: the options are each fine
            print(
                "hyperguard: this command needs the local twin, not --endpoint aws", file=sys.stderr
            )
            return EXIT_USAGE
        code = int(args.func(args))
        sys.stdout.flush()  # a reader gone away shows here, not at interpreter exit
        return code
    except KeyboardInterrupt:
        print("hyperguard: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's last flush does not complain too.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except _runtime_errors() as exc:
        print(f"hyperguard: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
