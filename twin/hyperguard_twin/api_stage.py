"""The API's stage, as API Gateway serves it in front of the API function (what
`sam local start-api` does) on its own port, and the HTTP calls its users make to it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from hyperguard_twin.api_gateway import (
    DEFAULT_PRINCIPAL,
    PRINCIPAL_HEADER,
    ApiGatewayProxy,
    stage_throttle,
)
from hyperguard_twin.config import TwinConfig, TwinError
from hyperguard_twin.deploy import load_template
from hyperguard_twin.emulator import KeepAliveServer
from hyperguard_twin.moto_gaps.awslambda import Invoker


class ApiStage:
    def __init__(self, config: TwinConfig) -> None:
        self.config = config
        self._server: KeepAliveServer | None = None

    @property
    def endpoint(self) -> str:
        port = self._server.server_port if self._server else self.config.api_port
        return f"http://{self.config.host}:{port}"

    def open(self, api_function: Callable[[], str | None], invoke: Invoker) -> None:
        """Takes the stage's port, for `serve_forever` to serve: `api_function()` names the
        API function, None until the stack is deployed (then the stage answers 503). It takes
        its port before the twin opens its first outgoing connection: one of those could
        otherwise take a port of the ephemeral range (an `--api-port` picked as a free one)
        first."""
        root = self.config.root
        paths = json.loads((root / "docs" / "openapi.json").read_text())["paths"]

        def call(event: dict[str, Any]) -> dict[str, Any]:
            name = api_function()
            if name is None:
                return {"statusCode": 503, "body": json.dumps({"message": "deploying"})}
            try:
                payload, errored, _ = invoke(name, event)
            except Exception as exc:  # throttled or failed: what API Gateway answers
                return {"statusCode": 502, "body": json.dumps({"message": str(exc)})}
            if errored:
                return {"statusCode": 502, "body": json.dumps({"message": "Internal server error"})}
            return dict(json.loads(payload))

        template = load_template(root / "template.yaml")
        throttle = stage_throttle(template, self.config.parameters)
        proxy = ApiGatewayProxy(call, paths, throttle=throttle)
        self._server = KeepAliveServer(self.config.host, self.config.api_port, proxy)

    def serve_forever(self) -> None:
        if self._server is not None:
            self._server.serve_forever()

    def stop(self) -> None:
        if self._server is not None:  # its serving thread ends only once it is shut down
            self._server.stop()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        principal: str = DEFAULT_PRINCIPAL,
    ) -> tuple[int, Any]:
        """Call the service's API the way a user does (through the twin's API Gateway)."""
        request = urllib.request.Request(
            self.endpoint + path,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json", PRINCIPAL_HEADER: principal},
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as error:
            raw, status = error.read(), error.code
        return status, json.loads(raw) if raw else None

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """`call`'s answer, or TwinError if the API refused."""
        status, answer = self.call(method, path, body, **kwargs)
        if status >= 300:
            raise TwinError(f"{method} {path} answered {status}: {answer}")
        return answer
