"""Commands that act through HyperGuard's own API (docs/api.md), as its users do:
`jobs submit|cancel` and `policy show|set` for the repair and burst policies.

Through the API, not the tables: a job's state changes only through the job lifecycle, and
a policy is validated where it is stored. On the twin the API is its API Gateway (the caller
is the twin's default admin); on AWS it is the stack's `ApiUrl`, signed with SigV4
(execute-api) by the environment's credentials, as IAM auth requires.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from hyperguard.cli.options import add_group
from hyperguard.cli.output import CliError, answer, print_json, say

POLICIES = {"repair": "/policies/node-repair", "burst": "/policies/burst"}
ATTEMPTS = 6
"""Tries of one call that keeps being throttled, the first included."""
BACKOFF_S, MAX_BACKOFF_S = 0.5, 20.0
THROTTLED = 429
"""The API stage's throttling or the caller's own rate limit (D147): refused before anything
was done, so any call may be tried again."""
TRANSIENT = frozenset({502, 503, 504})
"""Lambda's throttling and failures as API Gateway passes them on: the call may have been
applied, so only a call that repeats harmlessly is tried again (docs/cli.md)."""
REPEATABLE = frozenset({"GET", "PUT", "DELETE"})


class ServiceApi:
    """HyperGuard's API of the stack a ServiceClient (cli.client) reaches."""

    def __init__(self, service: Any, sleep: Callable[[float], None] = time.sleep) -> None:
        self.service = service
        self.sleep = sleep

    @cached_property
    def base(self) -> str:
        if self.service.is_twin:
            return str(self.service.twin_get("status")["api_endpoint"])
        return str(self.service.outputs["ApiUrl"])

    def call(self, method: str, path: str, body: Any = None, **headers: str) -> Any:
        """The API's JSON answer; an error answer is a CliError naming the call and status.
        A throttled call is tried again, up to ATTEMPTS in all, after the answer's
        Retry-After or an exponential backoff with full jitter, whichever is longer."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", **headers}
        may_repeat = method in REPEATABLE or "Idempotency-Key" in headers
        for attempt in range(ATTEMPTS):
            try:
                return self._once(method, path, data, headers)
            except urllib.error.HTTPError as exc:
                text = exc.read()
                retried = exc.code == THROTTLED or (exc.code in TRANSIENT and may_repeat)
                if not retried or attempt + 1 == ATTEMPTS:
                    raise CliError(f"{method} {path}: {exc.code} {_message(text)}") from exc
                self.sleep(_wait(exc.headers.get("Retry-After"), attempt))
        raise AssertionError("every attempt returns or raises")

    def _once(self, method: str, path: str, data: bytes | None, headers: dict[str, str]) -> Any:
        url = self.base + path
        if not self.service.is_twin:
            headers = signed(method, url, data, headers)  # signed again: SigV4 dates each try
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw = response.read()
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, ConnectionError) as exc:
            raise CliError(f"the API at {self.base} does not answer ({exc})") from exc
        return json.loads(raw) if raw else None


def _wait(retry_after: str | None, attempt: int) -> float:
    """Seconds before the next try: the server's Retry-After (seconds) at least."""
    backoff = random.uniform(0, min(MAX_BACKOFF_S, BACKOFF_S * 2**attempt))
    try:
        return max(float(retry_after or 0), backoff)
    except ValueError:  # an HTTP date: not what API Gateway sends; back off as usual
        return backoff


def signed(method: str, url: str, data: bytes | None, headers: dict[str, str]) -> dict[str, str]:
    """`headers` with SigV4 (execute-api) by the environment's credentials and region."""
    import boto3
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    session = boto3.Session()
    credentials = session.get_credentials()
    if credentials is None:
        raise CliError("no AWS credentials in the environment to sign the API call with")
    request = AWSRequest(method=method, url=url, data=data, headers=headers)
    SigV4Auth(credentials, "execute-api", session.region_name or "us-east-1").add_auth(request)
    return dict(request.headers.items())


def _message(raw: bytes) -> str:
    """The API's error body (`{"message", ...}`) as one line."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace").strip()
    if isinstance(body, dict) and "message" in body:
        extra = {k: v for k, v in body.items() if k != "message"}
        return f"{body['message']} {json.dumps(extra)}" if extra else str(body["message"])
    return json.dumps(body)


def read_json(name: str) -> Any:
    """A JSON document from a file, or stdin for `-`."""
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text()
        return json.loads(text)
    except (OSError, ValueError) as exc:
        raise CliError(f"{name}: not a JSON document ({exc})") from exc


def submission(args: argparse.Namespace) -> Any:
    """The JobSubmission of `jobs submit`: FILE, with `--pod-template`'s document (YAML or
    JSON, a core/v1 PodTemplateSpec) as its pod_template."""
    body = read_json(args.file)
    if args.pod_template is None:
        return body
    import yaml

    name = args.pod_template
    try:
        template = yaml.safe_load(Path(name).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CliError(f"{name}: not a YAML or JSON document ({exc})") from exc
    if not isinstance(body, dict) or not isinstance(template, dict):
        raise CliError(f"{name}: a pod template is a mapping (metadata, spec)")
    return {**body, "pod_template": template}


def cmd_jobs_submit(args: argparse.Namespace, api: ServiceApi) -> int:
    if args.dry_run:
        return _dry_run(args, api)
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    job = api.call("POST", "/jobs", submission(args), **headers)
    if args.json:
        print_json(job)
    else:
        print(f"{job['job_id']}: {job['status']} (hyperguard jobs show {job['job_id']})")
    return 0


def _dry_run(args: argparse.Namespace, api: ServiceApi) -> int:
    """POST /jobs/dry-run: the run objects on stdout (YAML, as `kubectl --dry-run=server -o
    yaml` prints them; JSON with --json), the API server's verdict on each on stderr. Exit 1
    when it refused one."""
    import yaml

    checked = api.call("POST", "/jobs/dry-run", submission(args))
    if args.json:
        print_json(checked)
    else:
        objects = [o["object"] for o in checked["objects"]]
        print(yaml.safe_dump_all(objects, sort_keys=False), end="")
    for o in checked["objects"]:
        meta = o["object"].get("metadata") or {}
        what = f"{o['object'].get('kind')} {meta.get('namespace')}/{meta.get('name')}"
        verdict = (
            "accepted by the API server (dry run: nothing created)"
            if o["accepted"]
            else o["refused"]
        )
        say(f"{o['path']}: {what}: {verdict}")
    return 0 if checked["accepted"] else 1


def cmd_jobs_logs(args: argparse.Namespace, api: ServiceApi) -> int:
    """GET /jobs/{jobId}/logs: the lines on stdout, which pod they are from on stderr."""
    query = urllib.parse.urlencode({"replica": args.replica, "tail": args.tail})
    path = f"/jobs/{urllib.parse.quote(args.job_id, safe='')}/logs?{query}"
    log = api.call("GET", path)
    if args.json:
        print_json(log)
        return 0 if log.get("unavailable") is None else 1
    say(
        f"replica {log['replica']}: pod {log['pod']} on {log['node'] or 'no node'} ({log['phase']})"
    )
    for line in log["lines"]:
        print(line)
    if log.get("truncated"):
        say("(cut at 256 KiB: ask for fewer lines with --tail)")
    if log.get("unavailable"):
        say(f"no log: {log['unavailable']}")
        return 1
    return 0


def cmd_jobs_cancel(args: argparse.Namespace, api: ServiceApi) -> int:
    cancelled = api.call("DELETE", f"/jobs/{urllib.parse.quote(args.job_id, safe='')}")
    status = cancelled.get("status", "Cancelled") if cancelled else "Cancelled"
    answer(args.json, cancelled, f"{args.job_id}: {status}")
    return 0


def cmd_policy_show(args: argparse.Namespace, api: ServiceApi) -> int:
    """The policy as JSON on stdout (what `policy set` takes back); for the repair policy,
    who repairs what on stderr, where a person reads it (GET /repairers, D148)."""
    print_json(api.call("GET", POLICIES[args.policy]))
    if args.policy == "repair" and not args.json:
        for line in who_repairs(api.call("GET", "/repairers")):
            say(line)
    return 0


def who_repairs(answer: dict[str, Any]) -> list[str]:
    """GET /repairers' answer as lines: one per repairer, who repairs where and why."""
    seen = answer.get("seen") or {}
    when = seen.get("observedAt") or "never (no inventory sync yet)"
    lines = [f"Who repairs what (the inventory looked at {when}):"]
    for row in answer.get("owners") or []:
        state = "on" if row.get("active") else "off"
        lines.append(
            f"  {row.get('source', '?'):<10} {row.get('scope', ''):<28} {state:<3} "
            f"{row.get('setting', ''):<5} -> {row.get('repairs', '')}: {row.get('note', '')}"
        )
    return lines


def cmd_policy_set(args: argparse.Namespace, api: ServiceApi) -> int:
    stored = api.call("PUT", POLICIES[args.policy], read_json(args.file))
    line = f"the {args.policy} policy is set; hyperguard policy show {args.policy} prints it"
    answer(args.json, stored, line)
    return 0


def add_parsers(
    groups: Any,
    jobs: Any,
    service_options: Callable[[argparse.ArgumentParser], None],
    api_for: Callable[[argparse.Namespace], ServiceApi],
) -> None:
    """`jobs submit|logs|cancel` into the `jobs` group, and the `policy` group."""
    p = jobs.add_parser("submit", help="submit a job (POST /jobs): a JobSubmission JSON file")
    p.add_argument("file", help="the JobSubmission (docs/api.md), a JSON file or - for stdin")
    p.add_argument("--idempotency-key", help="a repeat with the same key returns the first job")
    p.add_argument(
        "--pod-template",
        metavar="FILE",
        help="the replicas' pod template (a core/v1 PodTemplateSpec, YAML or JSON) as the "
        "submission's pod_template",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check it as a submission is checked and print the run objects it would create, "
        "each validated by the cluster's API server (POST /jobs/dry-run); nothing is "
        "submitted or created",
    )
    service_options(p)
    p.set_defaults(func=lambda args: cmd_jobs_submit(args, api_for(args)))
    p = jobs.add_parser(
        "logs",
        help="the tail of a replica's log, through the cluster's API server "
        "(GET /jobs/{jobId}/logs)",
    )
    p.add_argument("job_id", help="the job (hyperguard jobs list)")
    p.add_argument(
        "--replica", type=int, default=0, help="which replica (its rank's pod; default 0)"
    )
    p.add_argument("--tail", type=int, default=100, help="how many lines, 1-1000 (default 100)")
    service_options(p)
    p.set_defaults(func=lambda args: cmd_jobs_logs(args, api_for(args)))
    p = jobs.add_parser("cancel", help="cancel a job (DELETE /jobs/{jobId})")
    p.add_argument("job_id", help="the job (hyperguard jobs list)")
    service_options(p)
    p.set_defaults(func=lambda args: cmd_jobs_cancel(args, api_for(args)))

    policy = add_group(groups, "policy", "the repair and burst policies (through the API)")
    for name, func, text in (
        ("show", cmd_policy_show, "print the stored policy (or the defaults) as JSON"),
        ("set", cmd_policy_set, "store a policy from a JSON file (admin; validated by the API)"),
    ):
        p = policy.add_parser(name, help=text)
        p.add_argument(
            "policy",
            choices=sorted(POLICIES),
            help="repair: /policies/node-repair; burst: /policies/burst",
        )
        if name == "set":
            p.add_argument("file", help="the policy (docs/api.md), a JSON file or - for stdin")
        service_options(p)
        p.set_defaults(func=lambda args, func=func: func(args, api_for(args)))
