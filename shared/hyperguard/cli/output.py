"""What the CLI prints: JSON for scripts on stdout, tables for people, narrative on stderr.

rich is imported lazily, and only here: it comes with the `cli` extra, never with the
Lambda layer.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
"""Usage errors exit 2: argparse's own convention."""
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a writer whose reader went away (`| head`)."""


class CliError(Exception):
    """A runtime failure the user should read as one line (exit status 1)."""


Column = tuple[str, str]
"""(row key, header)."""


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def answer(as_json: bool, obj: Any, line: str) -> None:
    """A command's result: `obj` as JSON with `--json`, else the line a person reads."""
    if as_json:
        print_json(obj)
    else:
        print(line)


def say(line: str) -> None:
    """Narrative for a person watching: stderr, so stdout stays what a script reads."""
    print(line, file=sys.stderr, flush=True)


def _console() -> Any:
    try:
        from rich.console import Console
    except ImportError as exc:
        raise CliError(
            "tables need the `cli` extra (pip install 'hyperguard[cli]'); or use --json"
        ) from exc
    return Console(highlight=False)


def print_renderable(renderable: Any) -> None:
    """One rich renderable on stdout. Piped into a file or `grep`, a table keeps its natural
    width instead of being squeezed into 80 columns."""
    console = _console()
    if not console.is_terminal:
        console.width = 10_000  # measure unconstrained, then print at that width
        console.width = max(console.measure(renderable).maximum, 20)
    console.print(renderable)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], title: str = "") -> Any:
    """A rich Table of `rows` (missing or empty cells show as "-")."""
    _console()  # the clear message when rich is missing
    from rich import box
    from rich.table import Table
    from rich.text import Text

    view = Table(
        title=Text(title) if title else None,
        box=box.SIMPLE_HEAD,
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    for _key, header in columns:
        view.add_column(header, overflow="fold")
    for row in rows:
        # Text, not str: a reason like "[quota]" is data, not rich markup
        view.add_row(*(Text(_cell(row.get(key))) for key, _header in columns))
    return view


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], title: str = "") -> None:
    print_renderable(table(rows, columns, title))


def _cell(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)
