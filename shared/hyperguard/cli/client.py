"""Talks to a running twin (or a real deployment) from another process: the CLI's side."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from functools import cached_property
from typing import Any

DEFAULT_ENDPOINT = "http://127.0.0.1:4566"


class TwinUnreachableError(RuntimeError):
    pass


def default_endpoint() -> str:
    return os.environ.get("HYPERGUARD_ENDPOINT", DEFAULT_ENDPOINT)


class ServiceClient:
    """Stack outputs and AWS clients for a HyperGuard stack.

    `endpoint` is the twin's URL, or "aws" for the real AWS endpoints of the environment's
    credentials and region.
    """

    def __init__(self, endpoint: str | None = None, stack_name: str = "hyperguard") -> None:
        self.endpoint = endpoint or default_endpoint()
        self.stack_name = stack_name
        if self.is_twin:
            # Every boto3 client of this process (the stores' too) then talks to the twin.
            os.environ["AWS_ENDPOINT_URL"] = self.endpoint
            os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "twin")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "twin")

    @property
    def is_twin(self) -> bool:
        return self.endpoint != "aws"

    def client(self, service: str) -> Any:
        from hyperguard.aws import client

        return client(service)

    def twin_get(self, path: str) -> Any:
        return self._twin(path)

    def twin_post(self, path: str, body: dict[str, Any]) -> Any:
        return self._twin(path, body)

    def _twin(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """The twin's control API's answer; an answer that is an error says so (HTTPError
        is a URLError: it is told apart from no answer at all)."""
        if not self.is_twin:  # before any URL is made of "aws"
            raise TwinUnreachableError("this command needs the local twin, not --endpoint aws")
        request = urllib.request.Request(f"{self.endpoint}/_hyperguard/{path}")
        if body is not None:
            request.data = json.dumps(body).encode()
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise TwinUnreachableError(f"twin refused: {exc.read().decode()}") from exc
        except (urllib.error.URLError, ConnectionError) as exc:
            raise TwinUnreachableError(
                f"no twin answers at {self.endpoint} ({exc}); start one with `hyperguard twin up`"
            ) from exc

    @cached_property
    def outputs(self) -> dict[str, str]:
        try:
            stack = self.client("cloudformation").describe_stacks(StackName=self.stack_name)
        except Exception as exc:
            where = self.endpoint if self.is_twin else "AWS"
            raise TwinUnreachableError(
                f"cannot read stack {self.stack_name!r} at {where}: {exc}"
            ) from exc
        return {o["OutputKey"]: o["OutputValue"] for o in stack["Stacks"][0].get("Outputs", [])}
