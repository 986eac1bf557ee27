"""An SDK client's requests served by a WSGI app in this process: botocore's `before-send`
hands each signed request to the app and its answer back to the client, so the client's
own parsing and retry handler see what they would see over the network."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from urllib3 import HTTPResponse
from werkzeug.test import EnvironBuilder


def aws_response(url: str, status: int, headers: dict[str, str], data: bytes) -> AWSResponse:
    """An HTTP answer as botocore receives it from the network, for a `before-send` handler:
    its body urllib3's response, as botocore's transport hands it on (read whole, or
    streamed: S3's objects)."""
    return AWSResponse(url, status, headers, HTTPResponse(io.BytesIO(data), preload_content=False))


def wsgi_sender(app: Callable[..., Any]) -> Callable[..., AWSResponse]:
    """A `before-send` handler (`client.meta.events.register("before-send.<service>", ...)`)."""

    def send(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        url = urlsplit(request.url)
        body = request.body if isinstance(request.body, bytes) else (request.body or b"")
        environ = EnvironBuilder(
            path=url.path or "/",
            base_url=f"{url.scheme}://{url.netloc}",  # the Host the request was signed for
            query_string=url.query,
            method=request.method,
            headers={
                name: value.decode() if isinstance(value, bytes) else value
                for name, value in request.headers.items()
            },
            data=body,
        ).get_environ()
        answer: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            answer["status"], answer["headers"] = int(status.split()[0]), dict(headers)

        data = b"".join(app(environ, start_response))
        return aws_response(request.url, answer["status"], answer["headers"], data)

    return send
