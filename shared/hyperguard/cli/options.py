"""Argument types that refuse nonsense with a usage error (exit status 2), not a traceback."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


def port(text: str) -> int:
    """A TCP port, or 0 for any free one."""
    value = whole(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (0-65535; 0: any free port)")
    return value


def positive_int(text: str) -> int:
    value = whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number")
    return value


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """A whole number from `low` to `high`, both included."""

    def argument(text: str) -> int:
        value = whole(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not a whole number from {low} to {high}")
        return value

    return argument


def positive_float(text: str) -> float:
    value = _float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def number_between(low: float, high: float) -> Callable[[str], float]:
    """A number from `low` to `high`, both included."""

    def argument(text: str) -> float:
        value = _float(text)
        if not low <= value <= high:  # NaN is in no range
            raise argparse.ArgumentTypeError(f"{text} is not a number from {low:g} to {high:g}")
        return value

    return argument


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a number") from None


def whole(text: str) -> int:
    """Any whole number (range checks are the caller's)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number") from None


def add_group(groups: Any, name: str, text: str) -> Any:
    """A command group (`hyperguard NAME COMMAND`); given no command, it prints its help."""
    parser = groups.add_parser(name, help=text, description=text)
    parser.set_defaults(func=None, help_of=parser)
    return parser.add_subparsers(dest="cmd", metavar="COMMAND", title="commands")


def json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON only on stdout")
