"""A projection of top-level attributes picked from the item."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def top_level_projection(project: Callable[..., Any]) -> Callable[..., Any]:
    """A replacement for moto's `Item.project` (`project`), which converts the whole item to
    plain values and back once per projected path: the same item, for a projection of
    top-level attribute names only, made of those attributes alone (a scheduling pass reads
    the revisions of thousands of job items so: D122). A projection with a nested path or
    an index, or of a value holding binary data or a set, is `project`'s."""
    from moto.dynamodb.models.dynamo_type import Item

    def projected(self: Any, projection_expressions: list[list[str]]) -> Any:
        names = [path[0] for path in projection_expressions if len(path) == 1]
        if len(names) != len(projection_expressions) or not all(map(_plain_name, names)):
            return project(self, projection_expressions)
        picked = {name: self.attrs[name].to_json() for name in names if name in self.attrs}
        if changed_by_moto(picked):
            return project(self, projection_expressions)
        return Item(hash_key=self.hash_key, range_key=self.range_key, attrs=picked)

    projected.__wrapped__ = project  # type: ignore[attr-defined]
    return projected


_ROUND_TRIPPED = frozenset({"B", "BS", "SS", "NS"})
"""Types moto's projection changes on the way through plain values: a binary value becomes
bytes, a set may change its order (and an empty one its type)."""


def changed_by_moto(value: Any) -> bool:
    if hasattr(value, "type") and hasattr(value, "value"):  # a DynamoType inside a map or list
        return value.type in _ROUND_TRIPPED or changed_by_moto(value.value)
    if isinstance(value, dict):
        return bool(_ROUND_TRIPPED & value.keys()) or any(map(changed_by_moto, value.values()))
    if isinstance(value, list):
        return any(map(changed_by_moto, value))
    return False


def _plain_name(name: str) -> bool:
    return bool(name) and "[" not in name and "." not in name
