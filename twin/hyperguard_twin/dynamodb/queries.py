"""A Query of a keys-only global index by its partition key, answered from the index's
entries."""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from hyperguard_twin.dynamodb.answers import CHECKED_RESPONSES

logger = logging.getLogger(__name__)


def keys_only_index_query(
    query: Callable[..., Any],
    checks: Counter[str],
    *,
    indexed: Callable[[Any], bool] | None = None,
    strict: bool = False,
) -> Callable[..., Any]:
    """A replacement for moto's `Table.query` (`query`) for a keys-only global index queried
    by partition key alone (every other query is moto's). `indexed(item_hash_key_value)`
    says whether an item's entry has appeared in the index yet (the bench's propagation
    lag; default: at once). `checks` counts the answers compared with moto's."""
    from moto.dynamodb.comparisons import OpDefault
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT

    signature = inspect.signature(query)
    differed: set[str] = set()

    def keys_only_query(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = signature.bind(self, *args, **kwargs).arguments
        name = call.get("index_name")
        index = next((i for i in self.global_indexes if i.name == name), None)
        if (
            index is None
            or name in differed
            or (index.projection or {}).get("ProjectionType") != "KEYS_ONLY"
            or len(call.get("hash_key_conditions") or ()) != 1
            or call.get("range_comparison")
            or call.get("projection_expressions")
            or not isinstance(call.get("filter_expression"), (type(None), OpDefault))
            or call.get("range_key_conditions")
            or call.get("filter_kwargs")
        ):
            return query(self, *args, **kwargs)
        limit, start = call["limit"], call["exclusive_start_key"]
        forward = call["scan_index_forward"]
        ((attr, value),) = call["hash_key_conditions"]
        index_keys = [k["AttributeName"] for k in index.schema]
        hash_attrs = [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"]
        range_attrs: list[str | None] = [
            k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"
        ]
        hash_attrs.append(self.hash_key_attr)
        range_attrs.append(self.range_key_attr)
        projected = list(dict.fromkeys([*index.table_key_attrs, *index_keys]))
        matches = [
            item
            for item in self.all_items()
            if all(item.attrs.get(k) for k in index_keys) and item.attrs[attr] == value
        ]
        appeared = [i for i in matches if indexed is None or indexed(i.hash_key.value)]
        hidden, matches = len(matches) - len(appeared), appeared
        matches = self.sorted_items(hash_attrs, range_attrs, matches)
        if forward is False:
            matches.reverse()
        results: list[Item] = []
        size = 0
        last = None
        for item in matches:
            if start is not None and self._item_comes_before_dct(
                item, start, hash_attrs, range_attrs, forward
            ):
                continue
            start = None
            entry = Item(
                item.hash_key,
                item.range_key,
                {k: item.attrs[k].to_json() for k in projected if k in item.attrs},
            )
            if len(results) == limit or size + entry.size() > RESULT_SIZE_LIMIT:
                last = self._get_last_evaluated_key(results[-1], name)
                break
            results.append(entry)
            size += entry.size()
        if checks["keys-only Query"] < CHECKED_RESPONSES and last is None and not hidden:
            expected, _, expected_last = query(self, *args, **kwargs)
            ours = [r.to_json() for r in results]
            theirs = [r.to_json() for r in expected]
            # moto pages by whole items: an answer it cut short is compared as far as it
            # goes (its first page is a prefix of ours), and counts as a check, or a large
            # table would be read whole by moto at every query
            if theirs != (ours if expected_last is None else ours[: len(theirs)]):
                if strict:
                    raise RuntimeError(f"keys-only Query of {name} differs from moto's")
                differed.add(str(name))
                logger.warning("keys-only Query of %s differs from moto's; moto answers it", name)
                return expected, len(expected), expected_last
            checks["keys-only Query"] += 1
        return results, len(results), last

    keys_only_query.__wrapped__ = query  # type: ignore[attr-defined]
    return keys_only_query
