"""Print the OpenAPI document: `python -m hyperguard.api > docs/openapi.json`."""

from hyperguard.api.app import openapi_json

print(openapi_json())
