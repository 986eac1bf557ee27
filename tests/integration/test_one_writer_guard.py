"""The one-writer guard (tests/one_writer.py) sees writes as moto receives them."""

from __future__ import annotations

import boto3
from tests.conftest import REGION
from tests.one_writer import guarded


def test_a_raw_write_to_the_jobs_table_is_caught(aws_env: None) -> None:
    client = boto3.client("dynamodb", region_name=REGION)
    for name in ("jobs", "other"):
        client.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    with guarded("jobs", "incidents") as offences:
        client.put_item(TableName="jobs", Item={"job_id": {"S": "j-1"}})
        client.put_item(TableName="other", Item={"job_id": {"S": "j-1"}})
    assert offences == ["PutItem on jobs sent from outside the library"]
    assert "Item" in client.get_item(TableName="jobs", Key={"job_id": {"S": "j-1"}})
