"""The one-writer guard (tests/one_writer.py) sees writes as moto receives them."""

from __future__ import annotations

import boto3
from tests.conftest import REGION
from tests.one_writer import LIBRARY, guarded


def test_a_raw_write_to_the_jobs_table_is_caught(aws_env: None) -> None:
    client = boto3.client("dynamodb", region_name=REGION)
    for name in ("jobs", "other"):
        client.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    # code of the service's that writes around the store, as if it sat in governance/
    rogue = LIBRARY / "governance" / "rogue.py"
    write = compile(
        "client.put_item(TableName=table, Item={'job_id': {'S': 'j-1'}})", str(rogue), "exec"
    )
    with guarded("jobs", "incidents") as offences:
        exec(write, {"client": client, "table": "jobs"})
        exec(write, {"client": client, "table": "other"})
        client.put_item(TableName="jobs", Item={"job_id": {"S": "j-2"}})  # the test's own
    assert offences == [f"PutItem on jobs sent from {rogue}"]
    assert "Item" in client.get_item(TableName="jobs", Key={"job_id": {"S": "j-1"}})
