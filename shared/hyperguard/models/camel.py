"""The base of models whose fields travel in camelCase, as EKS and HyperPod spell theirs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class CamelModel(BaseModel):
    """Fields by their camelCase alias on the wire (either name accepted on input); unknown
    fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True, extra="forbid"
    )
