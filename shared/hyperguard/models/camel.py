"""The base of models whose fields travel in camelCase, as EKS and HyperPod spell theirs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel

DECIMALS = 6
"""Floats are kept to this many decimals: DynamoDB stores no number below 1e-130, and no
duration here needs finer than a microsecond."""


class CamelModel(BaseModel):
    """Fields by their camelCase alias on the wire (either name accepted on input); unknown
    fields refused; floats rounded to DECIMALS places before any range check."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True, extra="forbid"
    )

    @field_validator("*", mode="before")
    @classmethod
    def _rounded(cls, value: Any) -> Any:
        return round(value, DECIMALS) if isinstance(value, float) else value
