"""Administering the service through its API, as an admin principal: teams and their compute
quotas (`teams`), who may call as which team or as an admin (`principals`), and the cluster
policy's priority classes (`priority-classes`). Every change goes through the API, which
validates it as it validates any caller's; `--json` prints the API's answer."""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable
from typing import Any

from hyperguard.cli.api import ServiceApi, read_json
from hyperguard.cli.options import add_group, whole
from hyperguard.cli.output import CliError, answer, print_json, print_table

MAX_PAGES = 100
"""Pages of GET /teams followed (50 quotas each): more teams than any cluster has."""


def _team_path(team: str) -> str:
    return f"/teams/{urllib.parse.quote(team, safe='')}/compute-quota"


def _resources(quota: dict[str, Any]) -> str:
    """A quota's resolved resources in one cell: `ml.p5.48xlarge: 32 accelerators`."""
    cells = []
    for resolved in quota.get("ResolvedResources") or []:
        cells.append(f"{resolved['InstanceType']}: {resolved['Accelerators']} accelerators")
    return ", ".join(cells) or "-"


def quota_rows(quotas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for quota in quotas:
        target = quota.get("ComputeQuotaTarget") or {}
        sharing = (quota.get("ComputeQuotaConfig") or {}).get("ResourceSharingConfig") or {}
        rows.append(
            {
                "team": target.get("TeamName"),
                "quota": _resources(quota),
                "weight": target.get("FairShareWeight"),
                "sharing": sharing.get("Strategy"),
                "state": quota.get("ActivationState"),
                "version": quota.get("ComputeQuotaVersion"),
            }
        )
    return rows


def cmd_teams_list(args: argparse.Namespace, api: ServiceApi) -> int:
    quotas: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        query = "?" + urllib.parse.urlencode({"next_token": token}) if token else ""
        page = api.call("GET", f"/teams{query}") or {}
        quotas += page.get("ComputeQuotas") or []
        token = page.get("NextToken")
        if not token:
            break
    if args.json:
        print_json(quotas)
    else:
        columns = [
            ("team", "TEAM"),
            ("quota", "QUOTA"),
            ("weight", "WEIGHT"),
            ("sharing", "SHARING"),
            ("state", "STATE"),
            ("version", "VERSION"),
        ]
        print_table(quota_rows(quotas), columns)
    return 0


def cmd_teams_show(args: argparse.Namespace, api: ServiceApi) -> int:
    print_json(api.call("GET", _team_path(args.team)))
    return 0


def cmd_teams_set(args: argparse.Namespace, api: ServiceApi) -> int:
    body = read_json(args.file)
    if not isinstance(body, dict):
        raise CliError(f"{args.file}: a ComputeQuota request is a JSON object (docs/api.md)")
    if args.target_version is not None:
        body["TargetVersion"] = args.target_version
    stored = api.call("PUT", _team_path(args.team), body)
    answer(
        args.json, stored, f"team {args.team}: quota version {stored.get('ComputeQuotaVersion')}"
    )
    return 0


def cmd_teams_delete(args: argparse.Namespace, api: ServiceApi) -> int:
    query = f"?TargetVersion={args.target_version}" if args.target_version is not None else ""
    api.call("DELETE", _team_path(args.team) + query)
    answer(args.json, {"team": args.team, "deleted": True}, f"team {args.team}: quota deleted")
    return 0


def cmd_principals_list(args: argparse.Namespace, api: ServiceApi) -> int:
    grants = (api.call("GET", "/principals") or {}).get("principals") or []
    if args.json:
        print_json(grants)
    else:
        columns = [("principal_arn", "PRINCIPAL"), ("team", "TEAM"), ("admin", "ADMIN")]
        print_table(grants, columns)
    return 0


def cmd_principals_grant(args: argparse.Namespace, api: ServiceApi) -> int:
    body = {"principal_arn": args.principal_arn, "team": args.team, "admin": args.admin}
    stored = api.call("PUT", "/principals", body)
    roles = [f"team {args.team}"] * bool(args.team) + ["admin"] * args.admin
    answer(args.json, stored, f"{args.principal_arn}: {' and '.join(roles)}")
    return 0


def _scheduler_config(api: ServiceApi) -> tuple[dict[str, Any], int]:
    view = api.call("GET", "/scheduler-config") or {}
    return dict(view.get("SchedulerConfig") or {}), int(view.get("Version") or 0)


def cmd_classes_list(args: argparse.Namespace, api: ServiceApi) -> int:
    config, _version = _scheduler_config(api)
    classes = sorted(config.get("PriorityClasses") or [], key=lambda c: -int(c["Weight"]))
    if args.json:
        print_json(classes)
    else:
        print_table(
            [{"name": c["Name"], "weight": c["Weight"]} for c in classes],
            [("name", "PRIORITY CLASS"), ("weight", "WEIGHT")],
        )
    return 0


def _change_classes(
    api: ServiceApi, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
) -> dict[str, Any]:
    """Read the cluster policy, change its priority classes, write it back at the version
    read: a policy changed meanwhile is a 409 (run the command again), never overwritten."""
    config, version = _scheduler_config(api)
    config["PriorityClasses"] = change(list(config.get("PriorityClasses") or []))
    stored: dict[str, Any] = api.call(
        "PUT", "/scheduler-config", {**config, "TargetVersion": version}
    )
    return stored


def cmd_classes_set(args: argparse.Namespace, api: ServiceApi) -> int:
    def change(classes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = [c for c in classes if c.get("Name") != args.name]
        return [*kept, {"Name": args.name, "Weight": args.weight}]

    stored = _change_classes(api, change)
    answer(args.json, stored, f"priority class {args.name}: weight {args.weight}")
    return 0


def cmd_classes_delete(args: argparse.Namespace, api: ServiceApi) -> int:
    def change(classes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = [c for c in classes if c.get("Name") != args.name]
        if len(kept) == len(classes):
            raise CliError(f"no priority class {args.name} (hyperguard priority-classes list)")
        return kept

    stored = _change_classes(api, change)
    answer(args.json, stored, f"priority class {args.name}: deleted")
    return 0


def add_parsers(
    groups: Any,
    service_options: Callable[[argparse.ArgumentParser], None],
    api_for: Callable[[argparse.Namespace], ServiceApi],
) -> None:
    """The `teams`, `principals` and `priority-classes` groups."""

    def command(group: Any, name: str, func: Any, text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = group.add_parser(name, help=text)
        p.set_defaults(func=lambda args: func(args, api_for(args)))
        return p

    teams = add_group(groups, "teams", "teams and their compute quotas (through the API)")
    p = command(teams, "list", cmd_teams_list, "every team's quota (an admin; a member: its own)")
    service_options(p)
    p = command(teams, "show", cmd_teams_show, "a team's quota, resolved, as JSON")
    p.add_argument("team", help="the team's name")
    service_options(p)
    p = command(teams, "set", cmd_teams_set, "create or update a team's quota (admin)")
    p.add_argument("team", help="the team's name (the request's ComputeQuotaTarget.TeamName)")
    p.add_argument("file", help="a ComputeQuota request (docs/api.md), a JSON file or - (stdin)")
    p.add_argument(
        "--target-version", type=whole, help="update the version you read (omit to create)"
    )
    service_options(p)
    p = command(teams, "delete", cmd_teams_delete, "delete a team's quota (admin)")
    p.add_argument("team", help="the team's name")
    p.add_argument("--target-version", type=whole, help="only if still at this version")
    service_options(p)

    principals = add_group(groups, "principals", "who may call as which team, or as an admin")
    p = command(principals, "list", cmd_principals_list, "the principal mappings (admin)")
    service_options(p)
    p = command(principals, "grant", cmd_principals_grant, "map an IAM principal (admin)")
    p.add_argument("principal_arn", help="an IAM role or user ARN, or an STS assumed-role ARN")
    p.add_argument("--team", help="the team it calls as")
    p.add_argument("--admin", action="store_true", help="may administer the service")
    service_options(p)

    classes = add_group(groups, "priority-classes", "the cluster policy's priority classes")
    p = command(classes, "list", cmd_classes_list, "the priority classes, highest first")
    service_options(p)
    p = command(classes, "set", cmd_classes_set, "add or change a priority class (admin)")
    p.add_argument("name", help="the class (jobs name it as priority_class)")
    p.add_argument("weight", type=whole, help="0-100: a higher weight is scheduled first")
    service_options(p)
    p = command(classes, "delete", cmd_classes_delete, "remove a priority class (admin)")
    p.add_argument("name", help="the class")
    service_options(p)
