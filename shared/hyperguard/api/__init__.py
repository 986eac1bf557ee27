"""The governance REST API (API Gateway REST, IAM auth) as one powertools resolver."""

from hyperguard.api.app import create_app, openapi_json
from hyperguard.api.auth import Caller
from hyperguard.api.deps import ApiDependencies
from hyperguard.api.nodes import NodeActions, UnavailableNodeActions

__all__ = [
    "ApiDependencies",
    "Caller",
    "NodeActions",
    "UnavailableNodeActions",
    "create_app",
    "openapi_json",
]
