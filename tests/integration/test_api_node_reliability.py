"""GET /nodes/reliability and the lemon fields of PUT /policies/node-repair (D87): nodes as
the inventory writes them, incidents opened and closed through IncidentStore, on moto tables;
every figure worked out by hand."""

from __future__ import annotations

import json
import urllib.parse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.conftest import Stack
from tests.integration.api_harness import Api, member
from tests.integration.incident_harness import closed_fault

from hyperguard.cli import main as cli
from hyperguard.cli.api import ServiceApi
from hyperguard.models import Node
from hyperguard_twin.clock import ManualClock

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _node(instance_id: str, logical_id: str | None, pool: str = "workers") -> Node:
    return Node(
        instance_id=instance_id,
        cluster="hyperguard-twin",
        pool=pool,
        platform="hyperpod" if logical_id else "eks",
        instance_type="ml.p5.48xlarge",
        accelerators=8,
        logical_id=logical_id,
        launch_time=NOW - timedelta(days=90),
    )


class Fleet:
    """The API on a manual clock, over nodes and past incidents."""

    def __init__(self, stack: Stack) -> None:
        self.clock = ManualClock(NOW)
        self.api = Api(stack, clock=self.clock.now)
        self.api.nodes.upsert_inventory(
            [
                _node("i-0000000000000000a", "slot-a"),
                _node("i-0000000000000000b", "slot-b"),
                _node("i-0000000000000000c", None, pool="burst"),
                _node("i-0000000000000000d", "slot-a"),
            ]
        )
        # i-...a was replaced by i-...d in the same slot, five days ago.
        self.api.nodes.retire("i-0000000000000000a", NOW - timedelta(days=5))

    def fault(self, instance_id: str, days_ago: float, kind: str = "hyperpod_node_health") -> None:
        node = self.api.nodes.get(instance_id)
        assert node is not None
        closed_fault(self.api.incidents, node, NOW - timedelta(days=days_ago), kind)

    def view(self, **query: str) -> dict[str, Any]:
        reply = self.api.call("GET", "/nodes/reliability", query=query)
        assert reply.status == 200, reply.body
        body: dict[str, Any] = reply.body
        return body


@pytest.fixture
def fleet(stack: Stack) -> Fleet:
    fleet = Fleet(stack)
    fleet.fault("i-0000000000000000a", 20, kind="node_condition")
    fleet.fault("i-0000000000000000a", 10)
    fleet.fault("i-0000000000000000d", 1)
    fleet.fault("i-0000000000000000b", 2)
    fleet.fault("i-0000000000000000b", 45)  # before the window
    fleet.fault("i-0000000000000000c", 3)
    fleet.fault("i-0000000000000000c", 4, kind="spot_interruption")  # planned: not a fault
    return fleet


def test_repeat_offenders_come_first_with_their_causes_mtbf_and_lemon_flag(fleet: Fleet) -> None:
    view = fleet.view()
    assert (view["window_days"], view["lemon_incident_threshold"]) == (30, 3)
    assert (view["faults"], view["nodes_with_faults"], view["lemons"]) == (5, 3, 1)
    assert view["truncated"] is False
    assert view["since"].startswith("2026-10-24T12:00:00")
    slot = view["nodes"][0]
    assert slot == {
        "instance_id": "i-0000000000000000d",
        "logical_id": "slot-a",
        "pool": "workers",
        "instance_ids": ["i-0000000000000000a", "i-0000000000000000d"],
        "incidents": 3,
        "causes": {"hyperpod_node_health": 2, "node_condition": 1},
        "mtbf_hours": 240.0,
        "last_incident_at": "2026-11-22T12:00:00Z",
        "lemon": True,
    }
    others = [
        (n["instance_id"], n["logical_id"], n["incidents"], n["mtbf_hours"], n["lemon"])
        for n in view["nodes"][1:]
    ]
    assert others == [
        ("i-0000000000000000b", "slot-b", 1, 720.0, False),
        ("i-0000000000000000c", None, 1, 720.0, False),
    ]


def test_the_policy_sets_the_threshold_and_window(fleet: Fleet) -> None:
    policy = fleet.api.call("GET", "/policies/node-repair").body
    reply = fleet.api.call(
        "PUT",
        "/policies/node-repair",
        policy | {"lemonIncidentThreshold": 2, "lemonWindowDays": 15},
    )
    assert reply.status == 200, reply.body
    view = fleet.view()
    assert (view["window_days"], view["lemon_incident_threshold"]) == (15, 2)
    # slot-a's fault 20 days ago has left the window; its two others still make a lemon.
    assert [(n["instance_id"], n["incidents"], n["lemon"]) for n in view["nodes"]] == [
        ("i-0000000000000000d", 2, True),
        ("i-0000000000000000b", 1, False),
        ("i-0000000000000000c", 1, False),
    ]
    off = fleet.api.call("PUT", "/policies/node-repair", policy | {"lemonIncidentThreshold": 0})
    assert off.status == 200, off.body
    view = fleet.view()
    assert view["lemons"] == 0 and view["lemon_incident_threshold"] == 0
    assert view["faults"] == 5  # the view still counts them


@pytest.mark.parametrize(
    "field,value",
    [
        ("lemonIncidentThreshold", 1),
        ("lemonIncidentThreshold", None),
        ("lemonIncidentThreshold", 1001),
        ("lemonIncidentThreshold", "3"),
        ("lemonWindowDays", 0),
        ("lemonWindowDays", 366),
    ],
)
def test_a_threshold_or_window_out_of_bounds_is_refused_and_nothing_stored(
    fleet: Fleet, field: str, value: Any
) -> None:
    before = fleet.api.call("GET", "/policies/node-repair").body
    reply = fleet.api.call("PUT", "/policies/node-repair", before | {field: value})
    assert reply.status == 422 and reply.body["field"].endswith(field), reply.body
    assert fleet.api.call("GET", "/policies/node-repair").body == before


def test_the_view_is_bounded_and_admin_only(fleet: Fleet) -> None:
    assert [n["instance_id"] for n in fleet.view(limit="1")["nodes"]] == ["i-0000000000000000d"]
    assert fleet.view(limit="1")["nodes_with_faults"] == 3
    for limit in ("0", "501", "many"):
        reply = fleet.api.call("GET", "/nodes/reliability", query={"limit": limit})
        assert (reply.status, reply.body["field"]) == (422, "limit"), (limit, reply.body)
    reply = fleet.api.call("GET", "/nodes/reliability", principal=member("nlp"))
    assert reply.status == 403


def test_the_cli_prints_the_apis_view_as_a_table_or_json(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hyperguard nodes reliability` through the real resolver (the signed HTTP transport
    is tests/unit/test_cli_api.py's)."""
    paths: list[str] = []

    def through_the_api(_self: ServiceApi, method: str, path: str, body: Any = None) -> Any:
        paths.append(path)
        where, _, query = path.partition("?")
        reply = fleet.api.call(method, where, body, query=dict(urllib.parse.parse_qsl(query)))
        assert reply.status == 200, reply.body
        return reply.body

    monkeypatch.setattr(ServiceApi, "call", through_the_api)
    monkeypatch.setattr(cli, "_service", lambda _args: None)
    assert cli.main(["nodes", "reliability", "--limit", "2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [n["instance_id"] for n in shown["nodes"]] == [
        "i-0000000000000000d",
        "i-0000000000000000b",
    ]
    assert cli.main(["nodes", "reliability"]) == 0
    out = capsys.readouterr().out
    assert "5 node faults on 3 nodes in the last 30 days, 1 lemon(s) (3 faults make a lemon)" in out
    lemon_row = next(line for line in out.splitlines() if "i-0000000000000000d" in line)
    assert "slot-a" in lemon_row and "LEMON" in lemon_row and "240.0" in lemon_row
    assert "hyperpod_node_health x2, node_condition x1" in lemon_row
    assert paths == ["/nodes/reliability?limit=2", "/nodes/reliability?limit=50"]
    with pytest.raises(SystemExit) as refused:
        cli.main(["nodes", "reliability", "--limit", "501"])
    assert refused.value.code == 2 and "1 to 500" in capsys.readouterr().err
    assert len(paths) == 2  # refused before any call
