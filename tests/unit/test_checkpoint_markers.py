"""Whatever a checkpoint folder's marker holds, reading it is a verdict, never a crash: the
scheduler's pass and recovery read markers that any writer with access to the bucket may
have written (D164). Property tests over hostile bodies, for the service's reader and the
trainer kit's."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hyperguard.store.checkpoints import FORMAT_V2, _v2
from hyperguard_trainer.marker import Marker, MarkerError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = st.fixed_dictionaries(
    {"format": st.just(FORMAT_V2)},
    optional={
        k: JSON for k in ("job_id", "run", "attempt", "step", "world_size", "shards", "written_at")
    },
)
BODIES = (
    st.binary(max_size=300)
    | FIELDS.map(lambda d: json.dumps(d).encode())
    | st.builds(
        lambda depth: (f'{{"format": "{FORMAT_V2}", "x": ' + "[" * depth).encode(),
        st.integers(1, 3_000),
    )
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES)
def test_the_services_reader_gives_a_verdict_for_any_marker(body: bytes) -> None:
    verdict = _v2(body)
    assert verdict is None or isinstance(verdict, (str, dict))
    if isinstance(verdict, dict):
        assert set(verdict) == {"job_id", "run", "step", "shards"} and verdict["shards"]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES)
def test_the_kits_reader_raises_only_marker_error(body: bytes) -> None:
    try:
        marker = Marker.loads(body)
    except MarkerError:
        return
    assert marker.shards and all(s.size >= 0 for s in marker.shards)


@pytest.mark.parametrize("depth", [10_000, 200_000])
def test_a_marker_nested_past_the_stack_is_refused_not_a_crash(depth: int) -> None:
    body = (f'{{"format": "{FORMAT_V2}", "shards": ' + "[" * depth).encode()
    assert _v2(body) == "its marker names contract v2 but is not JSON"
    with pytest.raises(MarkerError):
        Marker.loads(body)
