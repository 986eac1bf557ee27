"""What every source parser shares: the envelope, the config, the error and signal helpers."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from hyperguard.models.signals import Action, HealthSignal


def _assume_utc(value: datetime) -> datetime:
    # AWS event times are UTC; a producer that drops the "Z" must not yield naive times.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_assume_utc)]


class MalformedEventError(ValueError):
    """A known source/detail-type whose body does not have the documented shape.

    `field` is the dotted path of the first offending field (e.g. ``detail.instance-id``), so
    callers can act on it without parsing the message.
    """

    def __init__(self, message: str, *, field: str, source: str | None, detail_type: str | None):
        super().__init__(message)
        self.field = field
        self.source = source
        self.detail_type = detail_type


class ClassifyConfig(BaseModel):
    """Operator choices the classifier needs; everything else is fixed by the sources."""

    model_config = ConfigDict(frozen=True)

    rebalance_action: Literal[Action.IGNORE, Action.DRAIN, Action.NOTIFY] = Field(
        default=Action.IGNORE,
        description="what an EC2 Instance Rebalance Recommendation does (it is only a hint)",
    )


class DetailModel(BaseModel):
    """Base of every `detail` model: AWS adds fields without notice, so extras are kept."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class EventEnvelope(EventBridgeModel):
    """The EventBridge envelope, lenient where AWS's own samples are.

    The EC2 state-change sample has no `version`, and `resources` is informational only.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    version: str = "0"
    id: str = Field(min_length=1, max_length=256)
    source: str = Field(min_length=1, max_length=256)
    detail_type: str = Field(alias="detail-type", min_length=1, max_length=256)
    resources: list[str] = Field(default_factory=list, max_length=100)
    time: UtcDatetime


def parse_event[M: EventEnvelope](model: type[M], event: Mapping[str, Any]) -> M:
    """Validate `event` as `model`, turning pydantic's error into MalformedEventError."""
    try:
        return model.model_validate(dict(event))
    except ValidationError as error:
        raise malformed(event, error) from error


def malformed(event: Mapping[str, Any], error: ValidationError) -> MalformedEventError:
    problems = error.errors(include_url=False)
    fields = [".".join(str(part) for part in problem["loc"]) or "<event>" for problem in problems]
    summary = "; ".join(
        f"{field}: {problem['msg']}" for field, problem in zip(fields, problems, strict=True)
    )
    return malformed_field(event, fields[0], summary)


def malformed_field(event: Mapping[str, Any], field: str, problem: str) -> MalformedEventError:
    source = _text(event.get("source"))
    detail_type = _text(event.get("detail-type"))
    return MalformedEventError(
        f"malformed {source} {detail_type!r} event {_text(event.get('id'))}: {problem}",
        field=field,
        source=source,
        detail_type=detail_type,
    )


def new_signal(envelope: EventEnvelope, **fields: Any) -> HealthSignal:
    """A signal for one report: observed when the event says, keyed by the event id. A value
    out of the signal's bounds (an instance id that is not one) makes the event malformed."""
    fields.setdefault("observed_at", envelope.time)
    fields.setdefault("dedupe_key", envelope.id)
    try:
        return HealthSignal(**fields)
    except ValidationError as error:
        event = {"source": envelope.source, "detail-type": envelope.detail_type, "id": envelope.id}
        raise malformed(event, error) from error


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
