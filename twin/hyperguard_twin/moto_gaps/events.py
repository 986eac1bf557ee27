"""EventBridge: moto drops `account` from the events it delivers to targets (restored), and
calls an API destination without the event or the connection's credentials."""

from __future__ import annotations

import copy
import json
import logging
import ssl
import threading
import urllib.request
from typing import Any

logger = logging.getLogger(__name__)


def install() -> None:
    _add_account_to_envelope()
    _post_to_api_destinations()


def _add_account_to_envelope() -> None:
    """moto's default EventBridge target input leaves out `account`; AWS always sends it."""
    from moto.events.utils import EventTemplateParser

    template = EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE
    if '"account"' not in template:
        EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE = template.replace(
            '"version": "0",', '"version": "0", "account": "<account>",'
        )


def _post_to_api_destinations() -> None:
    """As EventBridge does, the twin posts the transformed event (the target's
    InputTransformer) to an API destination with the connection's API key header, off the
    caller's thread; an answer that is not 2xx, or no answer, sends the event to the target's
    dead-letter queue (EventBridge would first retry 429 and 5xx answers for up to the
    target's MaximumEventAgeInSeconds)."""
    from moto.events.models import Rule

    original = Rule.send_to_targets
    if getattr(original, "posts_events", False):
        return

    def send_to_targets(self: Any, event: Any, transform_input: bool = True) -> None:
        calls = [t for t in self.targets if ":api-destination/" in t["Arn"]]
        if calls and self.event_pattern.matches_event(event):
            for target in calls:
                threading.Thread(
                    target=_post_to_destination,
                    args=(self, target, copy.deepcopy(event)),
                    daemon=True,
                    name="api-destination",
                ).start()
        rest = copy.copy(self)
        rest.targets = [t for t in self.targets if t not in calls]
        original(rest, event, transform_input)

    send_to_targets.posts_events = True  # type: ignore[attr-defined]
    Rule.send_to_targets = send_to_targets  # type: ignore[method-assign,assignment]


def _post_to_destination(rule: Any, target: dict[str, Any], event: Any) -> None:
    from moto.events.models import events_backends
    from moto.events.utils import EventTemplateParser
    from moto.sqs.models import sqs_backends

    backend = events_backends[rule.account_id][rule.region_name]
    destination = backend.destinations[target["Arn"].split("/")[1]]
    connection = backend.connections[destination.connection_arn.split("/")[1]]
    headers = {"Content-Type": "application/json"}
    key = (connection.auth_parameters or {}).get("ApiKeyAuthParameters") or {}
    if key:
        headers[key["ApiKeyName"]] = key["ApiKeyValue"]
    transformer = target.get("InputTransformer") or {}
    try:
        body = EventTemplateParser.parse(
            input_template=transformer.get("InputTemplate", ""),
            input_paths_map=transformer.get("InputPathsMap", {}),
            event=event,
        )
        request = urllib.request.Request(
            destination.invocation_endpoint,
            data=json.dumps(body).encode(),
            headers=headers,
            method=destination.http_method,
        )
        # A context per post: the trust store as it is now (OpenSSL's defaults, and
        # SSL_CERT_FILE where set), not the one urllib's shared opener captured.
        with urllib.request.urlopen(request, timeout=5, context=ssl.create_default_context()):
            return
    except (OSError, ValueError) as error:
        dead_letter = (target.get("DeadLetterConfig") or {}).get("Arn")
        if dead_letter:
            queue = dead_letter.rsplit(":", 1)[1]
            sqs_backends[rule.account_id][rule.region_name].send_message(
                queue, json.dumps(event, default=str)
            )
        logger.warning("api destination %s failed: %s", destination.name, error)
