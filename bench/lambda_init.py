"""Cold-start init time of every function, with only the shipped layer and boto3 (what the
python3.13 Lambda runtime gives), in the twin's worker processes.

    python bench/lambda_init.py [--rounds 5]

Prints one JSON object: per function, the init duration (process start to the handler module
imported, as Lambda's REPORT line's "Init Duration") of `rounds` cold starts. The layer is
built by shared/Makefile for this machine, bytecode included, as `sam build` ships it; the
functions run with the environment the deployed stack gives them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))

# A cheap event each handler accepts or rejects without much work.
EVENTS: dict[str, Any] = {
    "ApiFunction": {
        "resource": "/none",
        "path": "/none",
        "httpMethod": "GET",
        "headers": {},
        "requestContext": {"identity": {}, "requestId": "bench", "stage": "v1"},
        "body": None,
    },
    "IngestHealthFunction": {"Records": []},
    "RecoveryFunction": {"step": "none", "recovery": {}},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from hyperguard_twin.config import TwinConfig
    from hyperguard_twin.runtime import Twin

    twin = Twin(TwinConfig(root=ROOT, port=0, api_port=0, seed_jobs=False))
    twin.up()
    runtime = twin.runtime
    assert runtime is not None
    init_ms: dict[str, list[float]] = {}
    for spec in sorted(runtime.functions.values(), key=lambda s: s.logical_id):
        before = len(runtime.init_ms[spec.logical_id])
        for _ in range(args.rounds):
            runtime.register(spec)  # retires the warm worker: the next call is a cold start
            runtime.invoke(spec.name, EVENTS.get(spec.logical_id, {}))
        init_ms[spec.logical_id] = runtime.init_ms[spec.logical_id][before:]
    twin.down()
    print(
        json.dumps(
            {
                "rounds": args.rounds,
                "init_ms": {
                    name: {
                        "median": round(statistics.median(values), 1),
                        "max": round(max(values), 1),
                    }
                    for name, values in init_ms.items()
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
