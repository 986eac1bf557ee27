"""API throttling benchmark on the twin, through the twin's API Gateway (the template's
MethodSettings and THROTTLED response) in front of the real ApiFunction in its worker processes
(the per-caller rate limits on the twin's RateLimitTable, D147):

- fairness (issue 34, item 6): while one caller floods POST /jobs from `--flooders` threads,
  another team's member submits one job a second, `--paced` times; once with a team's member
  flooding, once with a principal mapped to no team. Before D147 the paced member got 18 (19)
  of 20 answers 429 from the stage's shared bucket; now every one is expected to be 201.
- burst: `--clients` callers of one principal at once, `--burst` submissions in all (the
  issue-22 scenario), answered 201 or 429 and never 5xx (D85).

    python bench/api_throttle.py [--flooders 16] [--paced 20] [--clients 60] [--burst 120]
                                 [--before]

`--before` deploys the twin as it was before D147: the stage at 20/s and 20, the per-caller
limits at 10,000/s (never reached). Prints one JSON object: per phase, the answers by status
(a 429 by who refused it: the stage, or the caller's principal or team limit), and the
paced caller's latencies. Loops are bounded (by time and count) and call 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import threading
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
    latencies: list[float] = []  # list.append is atomic

    def caller(_: int) -> Counter[str]:
        mine = Counter[str]()
        while time.perf_counter() < deadline and next(tickets) < most:
            sent = time.perf_counter()
            try:
                status, answer = twin.api("POST", "/jobs", submission(team))
            except OSError:  # no answer within the client's 60 s (a timeout, a reset)
                mine["no_answer"] += 1
                continue
            latencies.append(time.perf_counter() - sent)
            mine[refuser(answer) if status == 429 else str(status)] += 1
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
        "throttled_429": sum(n for s, n in statuses.items() if s.startswith("429")),
        "server_errors_5xx": sum(n for s, n in statuses.items() if s.startswith("5")),
        "no_answer": statuses["no_answer"],
        "server_error_bodies": sorted(errors),
        # the API function's four workers on the twin are taken first come first served
        "latency_s": {
            "median": round(statistics.median(latencies), 3) if latencies else None,
            "max": round(max(latencies), 3) if latencies else None,
        },
    }


def refuser(answer: Any) -> str:
    """Who refused a 429: API Gateway's stage (`{"message"}`), or the function's limit."""
    if isinstance(answer, dict) and "limit" in answer:
        return f"429_{answer['limit']}"
    return "429_stage"


def fairness(
    twin: Any, flooder: str, paced_member: str, paced_team: str, *, flooders: int, paced: int
) -> dict[str, Any]:
    """`flooders` threads submit as `flooder` back to back while `paced_member` submits one
    job a second, `paced` times; the flood stops once the paced caller is done."""
    done = threading.Event()
    flood_statuses: Counter[str] = Counter()
    lock = threading.Lock()

    def flood(_: int) -> None:
        mine = Counter[str]()
        while not done.is_set():
            try:
                status, answer = twin.api("POST", "/jobs", submission("nlp"), principal=flooder)
            except OSError:
                mine["no_answer"] += 1
                continue
            mine[refuser(answer) if status == 429 else str(status)] += 1
        with lock:
            flood_statuses.update(mine)

    paced_statuses: Counter[str] = Counter()
    latencies: list[float] = []
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=flooders) as pool:
        futures = [pool.submit(flood, n) for n in range(flooders)]
        time.sleep(1.0)  # the flood under way before the first paced call
        for n in range(paced):
            due = started + 1.0 + n
            time.sleep(max(0.0, due - time.perf_counter()))
            sent = time.perf_counter()
            status, answer = twin.api(
                "POST", "/jobs", submission(paced_team), principal=paced_member
            )
            latencies.append(time.perf_counter() - sent)
            paced_statuses[refuser(answer) if status == 429 else str(status)] += 1
        done.set()
        for future in futures:
            future.result()
    wall = time.perf_counter() - started
    return {
        "flooders": flooders,
        "wall_s": round(wall, 2),
        "flood": dict(sorted(flood_statuses.items())),
        "flood_per_s": round(sum(flood_statuses.values()) / wall, 1),
        "paced": dict(sorted(paced_statuses.items())),
        "paced_latency_s": {
            "median": round(statistics.median(latencies), 3),
            "max": round(max(latencies), 3),
        },
    }


BEFORE = {
    "ApiThrottleRateLimit": "20",
    "ApiThrottleBurstLimit": "20",
    "ApiPrincipalRateLimit": "10000",
    "ApiTeamRateLimit": "10000",
}
"""The stage as it was before D147, with the per-caller limits out of reach."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flooders", type=int, default=16)
    parser.add_argument("--paced", type=int, default=20)
    parser.add_argument("--clients", type=int, default=60)
    parser.add_argument("--burst", type=int, default=120)
    parser.add_argument("--before", action="store_true")
    args = parser.parse_args()

    from hyperguard_twin.config import TwinConfig
    from hyperguard_twin.deploy import load_template
    from hyperguard_twin.runtime import Twin
    from hyperguard_twin.service_users import team_role

    overrides = BEFORE if args.before else {}
    twin = Twin(TwinConfig(root=ROOT, port=0, api_port=0, stack_parameters=dict(overrides)))
    twin.up()
    try:
        limits = (
            "ApiThrottleRateLimit",
            "ApiThrottleBurstLimit",
            "ApiPrincipalRateLimit",
            "ApiTeamRateLimit",
        )
        defaults = {
            name: str(spec["Default"])
            for name, spec in load_template(ROOT / "template.yaml")["Parameters"].items()
            if name in limits
        }
        load = os.getloadavg()[0]
        vision = team_role("vision")
        result = {
            "benchmark": "api_throttle",
            "stack_parameters": defaults | overrides,
            "load_average_1m_at_start": round(load, 2),
            "member_flood": fairness(
                twin, team_role("nlp"), vision, "vision", flooders=args.flooders, paced=args.paced
            ),
            "unmapped_flood": fairness(
                twin,
                "arn:aws:iam::123456789012:role/not-mapped",
                vision,
                "vision",
                flooders=args.flooders,
                paced=args.paced,
            ),
            "burst": phase(twin, "nlp", clients=args.clients, seconds=60.0, most=args.burst),
        }
    finally:
        twin.down()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
