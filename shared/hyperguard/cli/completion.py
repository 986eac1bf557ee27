"""`hyperguard completion bash|zsh`: a shell completion script made from the CLI's own
parser, so it names every group, command, option and choice there is and never drifts.

bash: `source <(hyperguard completion bash)`; zsh: `source <(hyperguard completion zsh)`
(bash's script through zsh's bashcompinit). A JOB_ID or INCIDENT_ID is completed with the
service's own (`hyperguard completion ids jobs|incidents`, on the endpoint
$HYPERGUARD_ENDPOINT names).
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from typing import Any

from hyperguard.cli.output import CliError

BASH = """\
# hyperguard completion (hyperguard completion bash): groups, commands, options, choices
_hyperguard() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
    local path="" word
    for word in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        case $word in -*) ;; *) [[ " $(_hyperguard_subs "$path") " == *" $word "* ]] \\
            && path="${{path:+$path }}$word" ;; esac
    done
    local choices
    choices=$(_hyperguard_choices "$path" "$prev")
    if [[ -n $choices ]]; then
        COMPREPLY=($(compgen -W "$choices" -- "$cur"))
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_hyperguard_options "$path")" -- "$cur"))
    elif [[ -n $(_hyperguard_subs "$path") ]]; then
        COMPREPLY=($(compgen -W "$(_hyperguard_words "$path")" -- "$cur"))
    elif [[ $prev != -* && -n $(_hyperguard_ids "$path") ]]; then  # a job or incident id
        COMPREPLY=($(compgen -W "$(hyperguard completion ids "$(_hyperguard_ids "$path")" \
            2>/dev/null)" -- "$cur"))
    else  # a command's arguments: its choices, else files
        COMPREPLY=($(compgen -W "$(_hyperguard_words "$path")" -f -- "$cur"))
    fi
}}
_hyperguard_ids() {{
    case $1 in
{ids}
    esac
}}
_hyperguard_subs() {{
    case $1 in
{subs}
    esac
}}
_hyperguard_words() {{
    case $1 in
{words}
    esac
}}
_hyperguard_options() {{
    case $1 in
{options}
    esac
}}
_hyperguard_choices() {{
    case "$1|$2" in
{choices}
    esac
}}
complete -o default -F _hyperguard hyperguard
"""

ZSH_PRELUDE = "autoload -U +X bashcompinit && bashcompinit\n"
ID_KINDS = {"job_id": "jobs", "incident_id": "incidents"}
"""Positionals completed with the ids the service has (`hyperguard completion ids KIND`)."""
IDS_LIMIT = 200
"""The newest ids offered: a completion list is read by a person."""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell` ("bash" or "zsh")."""
    subs, words, options, choices, ids = [], [], [], [], []
    for path, sub in _commands(parser, ""):
        subcommands = _subcommands(sub)
        subs.append(_case(path, " ".join(subcommands)))
        flags = [s for a in sub._actions for s in a.option_strings]
        options.append(_case(path, " ".join(flags)))
        positional = subcommands
        for action in sub._actions if not subcommands else ():
            values = " ".join(str(c) for c in action.choices or ())
            if values and action.option_strings:
                choices += [_case(f"{path}|{flag}", values) for flag in action.option_strings]
            elif values:  # a positional with choices: what the next word can be
                positional = [values]
            elif action.dest in ID_KINDS:
                ids.append(_case(path, ID_KINDS[action.dest]))
        words.append(_case(path, " ".join(positional)))
    body = BASH.format(
        subs="\n".join(subs),
        words="\n".join(words),
        options="\n".join(options),
        choices="\n".join(choices),
        ids="\n".join(ids),
    )
    return (ZSH_PRELUDE + body) if shell == "zsh" else body


def _case(pattern: str, reply: str) -> str:
    return f"        {shlex.quote(pattern)}) echo {shlex.quote(reply)} ;;"


def _commands(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, Any]]:
    """(the words that lead to it, the parser) for the CLI and every group and command."""
    found: list[tuple[str, Any]] = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, f"{path} {name}".strip())
    return found


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    return [
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    ]


def cmd_completion(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    ids: Callable[[str, Any, int], list[str]],
) -> int:
    if args.shell == "ids":  # what the script asks for: the newest ids, one a line
        if args.kind is None:
            raise CliError("completion ids: name jobs or incidents")
        for found in ids(args.kind, args, IDS_LIMIT):
            print(found)
        return 0
    print(script(parser, args.shell), end="")
    return 0


def add_parser(
    groups: Any,
    parser: argparse.ArgumentParser,
    service_options: Callable[[argparse.ArgumentParser], None],
    ids: Callable[[str, Any, int], list[str]],
) -> None:
    """`ids(kind, args, limit)`: the newest `limit` ids of `kind` (jobs, incidents) the
    service has, newest first."""
    p = groups.add_parser(
        "completion",
        help="print a shell completion script: source <(hyperguard completion bash)",
        description="bash or zsh: the script. `ids jobs|incidents`: the newest job or incident "
        "ids, one a line (what the script completes a JOB_ID or INCIDENT_ID with).",
    )
    p.add_argument("shell", choices=["bash", "zsh", "ids"], help="the shell to complete in")
    p.add_argument(
        "kind", nargs="?", choices=sorted(set(ID_KINDS.values())), help=argparse.SUPPRESS
    )
    service_options(p)
    p.set_defaults(func=lambda args: cmd_completion(args, parser, ids))
