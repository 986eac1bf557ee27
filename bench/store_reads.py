"""What the client side of the store's BatchGetItems costs: through the boto3 resource (the
store before D173) and in DynamoDB's wire form (`hyperguard.store.codec.batch_get`, D173);
and, with `--parsed`, the wire form's answers parsed by the project's parser or taken as
DynamoDB sent them (D192).

    python bench/store_reads.py [--calls 120] [--rounds 2] [--parsed]

A scheduling pass on Kueue's baseline shape reads about 12,000 jobs in BatchGetItems of 100
keys: a projection of their revisions, then the changed ones whole. Both sides here read
`--calls` such batches of the same keys and get the same answers (100 items, each a revision
projection or a whole job item of about 900 bytes), from botocore's Stubber: no HTTP and no
response parsing, which are the same on both sides; the batches are issued together on both
(D162), and the CPU is the process's, every thread's. Measured: CPU per call,
from the keys as the store holds them to the items as it hands them on (Python values,
numbers int or float). Rounds alternate the sides; the items out must be the same. Prints one
JSON object.

`--parsed`: both sides are the wire form, and each answer is given as an HTTP response at
botocore's `before-send` (still no network), so that the response is parsed: by the project's
parser (`hyperguard.aws.responses`, D173's path) on one side, taken as sent (the wire client's
`before-parse` handler, D192) on the other.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from urllib3 import HTTPResponse

from hyperguard.aws import new_session
from hyperguard.cli.options import bounded_int
from hyperguard.concurrency import bounded_map
from hyperguard.store import codec
from hyperguard.store.codec import BATCH_GET_MAX, batch_get, plain, projection_of, wire_client

if not __package__:  # run as `python bench/<script>.py`: the repository root holds `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.runs import offline_credentials, print_report

TABLE = "jobs"


def _item(index: int, whole: bool) -> dict[str, Any]:
    """A job item as DynamoDB sends it: the revision projection, or the whole job."""
    item: dict[str, Any] = {"job_id": {"S": f"job-{index:08d}"}, "rev": {"N": "7"}}
    if not whole:
        return item
    entry = {"M": {"at": {"S": "2026-11-28T01:02:03Z"}, "event": {"S": "submitted"}}}
    return item | {
        "team": {"S": "team-a"},
        "status": {"S": "PENDING"},
        "reason": {"S": "waiting for quota: 8 of nvidia.com/gpu over the team's nominal"},
        "priority": {"N": "100"},
        "submitted_at": {"S": "2026-11-28T01:02:03.123456+00:00"},
        "live": {"S": "1"},
        "preemptible": {"BOOL": True},
        "spec": {
            "M": {
                "image": {"S": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:v1"},
                "instance_type": {"S": "ml.p5.48xlarge"},
                "replicas": {"N": "2"},
                "gpus_per_replica": {"N": "8"},
                "command": {"L": [{"S": "torchrun"}, {"S": "--nproc-per-node=8"}]},
                "checkpoint_ratio": {"N": "0.25"},
            }
        },
        "history": {"L": [entry, entry, entry]},
    }


def _answers(whole: bool, calls: int) -> list[dict[str, Any]]:
    return [
        {"Responses": {TABLE: [_item(i, whole) for i in range(c * 100, (c + 1) * 100)]}}
        for c in range(calls)
    ]


PROJECTION = ("job_id", "rev")


def _through_resource(
    table: Any, keys: list[dict[str, Any]], attributes: tuple[str, ...]
) -> list[dict[str, Any]]:
    """The store's read before D173: the resource's client, then `plain`, the batches issued
    together as now (D162)."""
    projection = projection_of(attributes)

    def one_batch(start: int) -> list[dict[str, Any]]:
        keys_of_batch = keys[start : start + BATCH_GET_MAX]
        request = {TABLE: {"Keys": keys_of_batch, "ConsistentRead": True, **projection}}
        answer = table.meta.client.batch_get_item(RequestItems=request)
        return [plain(i) for i in answer["Responses"][TABLE]]

    batches = bounded_map(one_batch, range(0, len(keys), BATCH_GET_MAX))
    return [item for batch in batches for item in batch]


def _id(item: dict[str, Any]) -> str:
    return str(item["job_id"])


def measure(side: str, whole: bool, calls: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    table = new_session().resource("dynamodb").Table(TABLE)
    keys = [{"job_id": f"job-{i:08d}"} for i in range(calls * BATCH_GET_MAX)]
    client = table.meta.client if side == "resource" else wire_client(table)
    with Stubber(client) as stub:
        for answer in _answers(whole, calls):  # each its own copy: the resource edits it
            stub.add_response("batch_get_item", answer)
        started = time.process_time()
        attributes = () if whole else PROJECTION
        if side == "resource":
            items = _through_resource(table, keys, attributes)
        else:
            items = batch_get(table, keys, attributes=attributes)
        cpu = time.process_time() - started
    read = "whole items" if whole else "revisions"
    return {"side": side, "read": read, "cpu_ms_per_call": round(cpu / calls * 1e3, 3)}, items


def measure_parsed(
    as_sent: bool, whole: bool, calls: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The wire form's read with each answer given as DynamoDB's JSON at `before-send`:
    taken as sent (D192), or (its handler off) parsed by the project's parser."""
    table = new_session().resource("dynamodb").Table(TABLE)
    keys = [{"job_id": f"job-{i:08d}"} for i in range(calls * BATCH_GET_MAX)]
    client = wire_client(table)
    bodies = [json.dumps(a).encode() for a in _answers(whole, calls)]
    taken, lock = itertools.count(), threading.Lock()

    def send(request: Any, **_: Any) -> AWSResponse:
        with lock:
            body = bodies[next(taken)]
        headers = {"x-amzn-RequestId": "r", "Content-Type": "application/x-amz-json-1.0"}
        return AWSResponse(
            request.url, 200, headers, HTTPResponse(io.BytesIO(body), preload_content=False)
        )

    events = client.meta.events
    events.register("before-send.dynamodb.BatchGetItem", send)
    if not as_sent:
        events.unregister("before-parse.dynamodb.BatchGetItem", codec._as_sent)
    try:
        started = time.process_time()
        items = batch_get(table, keys, attributes=() if whole else PROJECTION)
        cpu = time.process_time() - started
    finally:
        events.unregister("before-send.dynamodb.BatchGetItem", send)
        if not as_sent:
            events.register("before-parse.dynamodb.BatchGetItem", codec._as_sent)
    side = "wire form, taken as sent" if as_sent else "wire form, parsed"
    read = "whole items" if whole else "revisions"
    return {"side": side, "read": read, "cpu_ms_per_call": round(cpu / calls * 1e3, 3)}, items


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=bounded_int(1, 1000), default=120)
    parser.add_argument("--rounds", type=bounded_int(1, 20), default=2)
    parser.add_argument("--parsed", action="store_true", help="parsed against taken as sent")
    args = parser.parse_args(argv)
    offline_credentials()
    runs = []
    for _ in range(args.rounds):
        for whole in (False, True):
            if args.parsed:
                resource, expected = measure_parsed(False, whole, args.calls)
                wire, items = measure_parsed(True, whole, args.calls)
            else:
                resource, expected = measure("resource", whole, args.calls)
                wire, items = measure("wire form", whole, args.calls)
            # threads take the stubbed answers in any order: compare the items, not the order
            if sorted(items, key=_id) != sorted(expected, key=_id):
                raise SystemExit("the two sides read different items")
            runs += [resource, wire]
    print_report("store_reads.py", argv, runs)


if __name__ == "__main__":
    main()
