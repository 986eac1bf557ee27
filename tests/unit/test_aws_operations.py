"""The init check of the operations a function calls (hyperguard.aws.require_operations): the
list the gateway's factory checks is the SageMaker adapter's every call, and a botocore
without one of them fails with a metric and a clear error. And the clients themselves: a
session each, one parsed copy of the models per process."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

import botocore
import pytest
from botocore import xform_name

from hyperguard import aws
from hyperguard.cluster import hyperpod
from hyperguard.cluster.factory import REQUIRED_OPERATIONS


@pytest.fixture(autouse=True)
def fresh_clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    aws.forget_clients()
    yield
    aws.forget_clients()


def test_the_checked_operations_are_every_sagemaker_call_of_the_adapter() -> None:
    source = Path(hyperpod.__file__).read_text()
    called = set(re.findall(r'"((?:describe|list|batch|start)_\w*cluster\w*)"', source))
    called |= set(re.findall(r"self\.client\.(\w+)\(", source))
    assert called == {xform_name(op) for op in hyperpod.OPERATIONS}
    assert REQUIRED_OPERATIONS["sagemaker"] == hyperpod.OPERATIONS


def test_the_installed_botocore_knows_every_checked_operation() -> None:
    for service, operations in REQUIRED_OPERATIONS.items():
        aws.require_operations(service, operations)


def test_a_botocore_without_an_operation_fails_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = Path(botocore.__file__).parent / "data" / "sagemaker"
    [version] = [d.name for d in installed.iterdir() if d.is_dir()]
    model = json.loads(gzip.decompress((installed / version / "service-2.json.gz").read_bytes()))
    del model["operations"]["BatchDeleteClusterNodes"]
    (tmp_path / "sagemaker" / version).mkdir(parents=True)
    (tmp_path / "sagemaker" / version / "service-2.json").write_text(json.dumps(model))
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    with pytest.raises(aws.MissingOperationError, match="has no sagemaker operation") as error:
        aws.require_operations("sagemaker", hyperpod.OPERATIONS)
    assert "BatchDeleteClusterNodes" in str(error.value)
    assert "BatchAddClusterNodes" not in str(error.value)  # only what is missing
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "_aws" in line]
    assert [(m["MissingAwsOperation"], m["service"]) for m in emitted] == [([1.0], "sagemaker")]


def test_clients_have_sessions_of_their_own_and_share_one_parsed_copy_of_each_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AWS_DATA_PATH", raising=False)
    sts, sns = aws.client("sts"), aws.client("sns")
    loader = sts._loader
    assert sns._loader is loader  # one parse of the endpoints and retry rules per process
    assert aws.new_session() is not aws.new_session()  # credentials stay each session's own
    paths = loader.search_paths
    assert len(paths) == len(set(paths))  # boto3's folder, added per session, is there once
    aws.client.cache_clear()
    assert aws.client("sts")._loader is loader


def test_a_data_path_of_its_own_gets_a_loader_of_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AWS_DATA_PATH", raising=False)
    default = aws.client("sts")._loader
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    aws.client.cache_clear()
    assert str(tmp_path) in aws.client("sts")._loader.search_paths
    assert aws.client("sts")._loader is not default


def test_tables_of_one_retry_mode_share_one_client_until_forgotten() -> None:
    jobs, teams = aws.dynamodb_table("jobs"), aws.dynamodb_table("teams")
    once = aws.dynamodb_table("jobs", retry=False)
    assert jobs.meta.client is teams.meta.client
    assert once.meta.client is not jobs.meta.client
    assert once.meta.client.meta.config.retries["total_max_attempts"] == 1
    aws.forget_clients()
    assert aws.dynamodb_table("teams").meta.client is not teams.meta.client
