"""API throttling benchmark on the twin: how many job submissions per second the API takes
before API Gateway's stage throttling answers 429, and what a burst of concurrent callers
gets (the issue-22 scenario: 120 submissions from 60 clients), through the twin's API Gateway
(the template's MethodSettings and THROTTLED response) in front of the real ApiFunction in
its worker processes.

    python bench/api_throttle.py [--seconds 10] [--clients 60] [--burst 120]

Prints one JSON object: per phase, the answers by status, the accepted (201) submissions per
second, and the 5xx count (expected 0). Loops are bounded (by time and count) and call
127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))


def submission(team: str) -> dict[str, Any]:
    return {
        "team": team,
        "instance_type": "ml.p5.48xlarge",
        "accelerators_per_replica": 1,
        "image": "bench:1",
    }


def phase(twin: Any, team: str, *, clients: int, seconds: float, most: int) -> dict[str, Any]:
    """`clients` callers submitting back to back until `seconds` pass or `most` are sent."""
    deadline = time.perf_counter() + seconds
    tickets = itertools.count()  # next() is atomic: at most `most` are sent in all
    errors: set[str] = set()  # the first few distinct 5xx bodies, to say what failed

    def caller(_: int) -> Counter[str]:
        mine = Counter[str]()
        while time.perf_counter() < deadline and next(tickets) < most:
            try:
                status, answer = twin.api("POST", "/jobs", submission(team))
            except OSError:  # no answer within the client's 60 s (a timeout, a reset)
                mine["no_answer"] += 1
                continue
            mine[str(status)] += 1
            if status >= 500 and len(errors) < 5:
                errors.add(json.dumps(answer)[:300])
        return mine

    started = time.perf_counter()
    statuses: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        for counts in pool.map(caller, range(clients)):
            statuses.update(counts)
    wall = time.perf_counter() - started
    return {
        "clients": clients,
        "wall_s": round(wall, 2),
        "statuses": dict(sorted(statuses.items())),
        "accepted_per_s": round(statuses["201"] / wall, 1),
        "throttled_429": statuses["429"],
        "server_errors_5xx": sum(n for s, n in statuses.items() if s.startswith("5")),
        "no_answer": statuses["no_answer"],
        "server_error_bodies": sorted(errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=60)
    parser.add_argument("--burst", type=int, default=120)
    args = parser.parse_args()

    from hyperguard.twin.deploy import load_template
    from hyperguard.twin.runtime import Twin, TwinConfig

    twin = Twin(TwinConfig(root=ROOT, port=0, api_port=0))
    twin.up()
    try:
        status, teams = twin.api("GET", "/views/teams")
        assert status == 200, teams
        team = teams["teams"][0]["team"]
        defaults = {
            name: spec["Default"]
            for name, spec in load_template(ROOT / "template.yaml")["Parameters"].items()
            if name.startswith("ApiThrottle")
        }
        result = {
            "benchmark": "api_throttle",
            "stack_parameters": defaults
            | {k: v for k, v in twin.config.parameters.items() if k.startswith("ApiThrottle")},
            "one_client_sustained": phase(twin, team, clients=1, seconds=args.seconds, most=10_000),
            "eight_clients_sustained": phase(
                twin, team, clients=8, seconds=args.seconds, most=10_000
            ),
            "burst": phase(twin, team, clients=args.clients, seconds=60.0, most=args.burst),
        }
    finally:
        twin.down()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
