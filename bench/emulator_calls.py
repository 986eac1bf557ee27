"""What an AWS call costs on the twin's emulator, with a connection a call (werkzeug's own
server, which closes every connection: the twin before D171) and with connections kept alive
(`hyperguard_twin.emulator.KeepAliveServer`, D171).

    python bench/emulator_calls.py [--pairs 1000] [--rounds 2]

Each side serves moto's app on 127.0.0.1 in this process; one botocore client (the SDK the
functions use) makes `--pairs` PutItem + GetItem pairs against a DynamoDB table, after 50
warm-up calls. Measured: this process's CPU (the client's and the server's, user + system)
and wall time, per call; rounds alternate the two sides. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

import boto3
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from hyperguard.cli.options import bounded_int
from hyperguard_twin.emulator import KeepAliveServer

if not __package__:  # run as `python bench/<script>.py`: the repository root holds `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.runs import offline_credentials, print_report

TABLE = "bench"


class _Quiet(WSGIRequestHandler):
    """werkzeug's handler without its request log: the twin's before D171."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None


def _server(side: str) -> BaseWSGIServer:
    app = DomainDispatcherApplication(create_backend_app)
    if side == "kept-alive":
        return KeepAliveServer("127.0.0.1", 0, app)
    return make_server("127.0.0.1", 0, app, threaded=True, request_handler=_Quiet)


def measure(side: str, pairs: int) -> dict[str, Any]:
    server = _server(side)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = boto3.client(
        "dynamodb", endpoint_url=f"http://127.0.0.1:{server.server_port}", region_name="us-east-1"
    )
    try:
        if TABLE not in client.list_tables()["TableNames"]:
            client.create_table(
                TableName=TABLE,
                KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
        for _ in range(50):
            client.get_item(TableName=TABLE, Key={"k": {"S": "warm"}})
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for i in range(pairs):
            key = {"k": {"S": str(i % 10)}}
            client.put_item(TableName=TABLE, Item={**key, "v": {"S": "x" * 100}})
            client.get_item(TableName=TABLE, Key=key)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        client.close()
        if isinstance(server, KeepAliveServer):
            server.stop()
        else:
            server.shutdown()
            server.server_close()
    calls = 2 * pairs
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {
        "side": side,
        "calls": calls,
        "cpu_ms_per_call": round((user + system) / calls * 1e3, 3),
        "system_ms_per_call": round(system / calls * 1e3, 3),
        "wall_ms_per_call": round(wall / calls * 1e3, 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pairs", type=bounded_int(1, 100_000), default=1000)
    parser.add_argument("--rounds", type=bounded_int(1, 20), default=2)
    args = parser.parse_args(argv)
    offline_credentials()
    runs = [
        measure(side, args.pairs)
        for _ in range(args.rounds)
        for side in ("connection a call", "kept-alive")
    ]
    print_report("emulator_calls.py", argv, runs)


if __name__ == "__main__":
    main()
