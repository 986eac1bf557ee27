"""What the small paired benchmarks share: credentials for clients that reach no AWS, and
the JSON report they print."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from typing import Any


def offline_credentials() -> None:
    """Credentials and a region for botocore clients that reach only an in-process emulator
    or a stub, unless the environment already has its own."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        os.environ.setdefault(name, value)


def print_report(script: str, argv: list[str] | None, runs: list[dict[str, Any]]) -> None:
    """One JSON object: the command as typed, the date, the CPUs, and the runs."""
    report = {
        "command": f"python bench/{script} " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": datetime.now(UTC).date().isoformat(),
        "cpus": os.cpu_count(),
        "runs": runs,
    }
    print(json.dumps(report, indent=2))
