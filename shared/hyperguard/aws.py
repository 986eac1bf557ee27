"""boto3 clients, created lazily and once per sandbox (nothing connects at import).

boto3 honours AWS_ENDPOINT_URL, which is how the local twin points every client at the
emulator without the code knowing.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from botocore.config import Config

_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5}, connect_timeout=2, read_timeout=10
)


@cache
def client(service: str) -> Any:
    import boto3

    return boto3.session.Session().client(service, config=_CONFIG)


@cache
def dynamodb_table(name: str) -> Any:
    import boto3

    return boto3.session.Session().resource("dynamodb", config=_CONFIG).Table(name)
