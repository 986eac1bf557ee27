"""Event parsers: every node-health event HyperGuard consumes becomes HealthSignals."""

from hyperguard.events.base import ClassifyConfig, MalformedEventError
from hyperguard.events.classify import classify
from hyperguard.events.health import classify_health_event

__all__ = ["ClassifyConfig", "MalformedEventError", "classify", "classify_health_event"]
