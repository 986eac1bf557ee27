"""Starting a twin from the command line: the options every command that starts one takes
(`twin_options`), the start itself (`start_twin`: a start that fails is one line, a
Ctrl-C while starting leaves no worker behind), and the report a command writes."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

from hyperguard.cli.options import json_option, port, positive_float
from hyperguard.cli.output import CliError

ROOT = Path(__file__).resolve().parents[2]


DEFAULT_TIME_SCALE = 60.0


def start_twin(args: argparse.Namespace, **config: Any) -> Any:
    """A twin on the options' ports and clock (and `config`'s overrides), up and ready."""
    from hyperguard_twin.config import TwinConfig, TwinError
    from hyperguard_twin.deploy import DeployError
    from hyperguard_twin.lambda_layer import LayerBuildError
    from hyperguard_twin.runtime import Twin

    config.setdefault("hyperpod_nodes", getattr(args, "nodes", 16))
    config.setdefault("node_recovery", args.node_recovery)
    twin = Twin(
        TwinConfig(
            root=ROOT,
            port=args.port,
            api_port=args.api_port,
            time_scale=args.time_scale,
            **config,
        )
    )
    try:
        twin.up()
    except OSError as exc:
        twin.down()
        raise CliError(
            f"cannot serve on 127.0.0.1 (--port {args.port}, --api-port {args.api_port}): {exc}"
        ) from exc
    except (TwinError, DeployError, LayerBuildError) as exc:
        twin.down()
        raise CliError(f"the twin did not start: {exc}") from exc
    except KeyboardInterrupt:  # stopped while starting: its workers must not outlive it
        twin.down()
        raise
    return twin


def write_report(path: str, data: dict[str, Any]) -> str:
    """The HTML report at `path`; its absolute path."""
    from hyperguard_twin.report import write_report as write

    try:
        return str(write(Path(path), data).resolve())
    except (OSError, RuntimeError) as exc:  # RuntimeError: plotly is not installed
        raise CliError(f"the report could not be written to {path}: {exc}") from exc


def starts_a_twin(
    command: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """A command that starts a twin: a twin that could not finish what it was asked (a
    scenario past its limits) is the command's one-line failure, not a traceback."""

    @wraps(command)
    def run(args: argparse.Namespace) -> int:
        from hyperguard_twin.config import TwinError

        try:
            return command(args)
        except TwinError as exc:
            raise CliError(str(exc)) from exc

    return run


def twin_options(
    p: argparse.ArgumentParser,
    default_port: int,
    default_api_port: int,
    node_recovery: str = "None",
) -> None:
    """`node_recovery`: the default of --node-recovery (`twin up`'s is AWS's own default;
    the demo and the measured scenarios show and measure HyperGuard's own repair)."""
    p.add_argument(
        "--node-recovery",
        choices=["Automatic", "None"],
        default=node_recovery,
        help="the simulated HyperPod cluster's NodeRecovery: Automatic (HyperPod reboots or "
        "replaces what its health agent finds faulty; HyperGuard defers those repairs unless "
        f"its repair policy owns them) or None (default {node_recovery})",
    )
    p.add_argument(
        "--port", type=port, default=default_port, help="AWS emulator port (0: any free)"
    )
    p.add_argument(
        "--api-port",
        type=port,
        default=default_api_port,
        help="HyperGuard API port (0: any free)",
    )
    p.add_argument(
        "--time-scale",
        type=positive_float,
        default=DEFAULT_TIME_SCALE,
        help="simulated seconds per wall-clock second (> 0; day-in-the-life: 240 unless set)",
    )
    json_option(p)
