"""What the twin saves of moto's and SAM's work (hyperguard_twin.moto_gaps.performance,
hyperguard_twin.deploy): a JSON template read as JSON, to what moto's YAML reading gives,
anything else still through YAML; a state machine's definition parsed once, each use given
its own components, a broken one still refused; a handler's methods listed once;
template.yaml's parse and SAM's transform reused within a process, handed out as copies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from moto.cloudformation.models import Stack
from moto.cloudformation.utils import yaml_tag_constructor
from moto.core import responses
from moto.dynamodb.responses import DynamoHandler
from tests.conftest import ROOT

from hyperguard_twin import deploy
from hyperguard_twin.emulator import Emulator
from hyperguard_twin.moto_gaps.performance import (
    answer_handler_methods_by_name,
    parse_each_state_machine_once,
    parse_json_templates_as_json,
)


def read_as_moto_did(template: str) -> object:
    yaml.add_multi_constructor("", yaml_tag_constructor)
    return yaml.load(template, Loader=yaml.Loader)  # moto's own reading


def test_a_json_template_reads_as_moto_read_it(monkeypatch: pytest.MonkeyPatch) -> None:
    parse_json_templates_as_json()
    parse_json_templates_as_json()  # a second install keeps the first
    # The repo's template, its tags already intrinsic functions, as JSON: the twin's stack.
    template = json.dumps(deploy.load_template(ROOT / "template.yaml"))
    expected = read_as_moto_did(template)

    def no_yaml(*args: object, **kwargs: object) -> None:
        raise AssertionError("a JSON template went through PyYAML")

    monkeypatch.setattr("moto.cloudformation.models.yaml.load", no_yaml)
    assert Stack.parse_template(template) == expected


def test_a_yaml_template_still_reads_through_yaml() -> None:
    parse_json_templates_as_json()
    template = (
        "Resources:\n  Queue:\n    Type: AWS::SQS::Queue\n"
        "    Properties:\n      QueueName: !Ref Name\n"
    )
    parsed = Stack.parse_template(template)
    assert parsed == {
        "Resources": {
            "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": {"Ref": "Name"}}}
        }
    }
    # JSON that is no mapping is YAML's to read (and to refuse), as before.
    not_a_mapping: object = Stack.parse_template("[1, 2]")
    assert not_a_mapping == [1, 2]


def test_the_template_and_its_transform_are_copies_of_one_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "template.yaml"
    path.write_text("Resources:\n  Queue:\n    Type: AWS::SQS::Queue\n")
    first = deploy.load_template(path)
    first["Resources"].clear()  # a caller's change is its own
    assert deploy.load_template(path) == {"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}}}
    path.write_text("Resources: {}\n")  # a changed file is read again
    assert deploy.load_template(path) == {"Resources": {}}

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # SAM's pseudo parameters
    packaged = {
        "Transform": "AWS::Serverless-2016-10-31",
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
    }
    transformed = deploy.transform(packaged, {})
    transformed["Resources"].clear()
    again = deploy.transform(packaged, {})
    assert again["Resources"] == {"Queue": {"Type": "AWS::SQS::Queue"}}
    assert "Transform" not in again


def test_a_handlers_methods_are_found_by_name_even_one_added_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer_handler_methods_by_name()
    answer_handler_methods_by_name()
    method_names = vars(responses)["method_names_from_class"]
    listed = method_names(DynamoHandler)
    assert all(name in listed for name in ("update_item", "get_item", "batch_get_item"))
    assert "not_an_action" not in listed and "__not_a_name__" not in listed
    assert "dynamodb_backend" not in listed  # a property, as inspect.getmembers left it out
    # The twin adds operations to moto's handlers as a twin starts (SageMaker's, EKS's),
    # after others were served: found as the listing found them, however late.
    monkeypatch.setattr(DynamoHandler, "not_an_action", lambda self: None, raising=False)
    assert "not_an_action" in method_names(DynamoHandler)


def test_a_service_has_one_client_an_emulator() -> None:
    emulator = Emulator("127.0.0.1", 0)
    s3 = emulator.client("s3", "us-east-1")
    assert emulator.client("s3", "us-east-1") is s3
    assert s3.meta.endpoint_url == emulator.endpoint and s3.meta.region_name == "us-east-1"
    assert emulator.client("sqs", "us-east-1") is not s3
    assert emulator.client("s3", "eu-west-1").meta.region_name == "eu-west-1"
    emulator.port = 4567  # a started emulator's own port: a client of it, not of port 0
    assert emulator.client("s3", "us-east-1").meta.endpoint_url == "http://127.0.0.1:4567"


def test_a_definition_is_parsed_once_and_each_use_builds_its_own_components(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moto.stepfunctions.parser.asl.antlr.runtime.ASLParser import ASLParser
    from moto.stepfunctions.parser.asl.parse.asl_parser import (
        AmazonStateLanguageParser,
        ASLParserException,
    )

    parse_each_state_machine_once()
    parse_each_state_machine_once()  # a second install keeps the first
    parses = []
    state_machine = ASLParser.state_machine

    def counted(parser: ASLParser) -> object:
        parses.append(parser)
        return state_machine(parser)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(ASLParser, "state_machine", counted)
    # the text as this test's own (the cache is per process: another test may have read it)
    definition = (ROOT / "statemachines" / "node_recovery.asl.json").read_text() + "\n" * 3
    first, tree = AmazonStateLanguageParser.parse(definition)
    second, same_tree = AmazonStateLanguageParser.parse(definition)
    assert len(parses) == 1 and tree is same_tree
    assert second is not first  # every execution evaluates components of its own
    assert type(second) is type(first)
    broken = '{"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}'  # no closing }
    for _ in range(2):
        with pytest.raises(ASLParserException):
            AmazonStateLanguageParser.parse(broken)
    assert len(parses) == 3  # a refused text is read again, and refused again
