"""IAM on the twin's emulator (hyperguard_twin.iam): a call signed with a stack role's
credentials is authorized against the role's policies as the emulator's IAM holds them, and
refused as the service refuses it; anyone else's is let be. moto in-process, its server app
behind the emulator's front door (no network: tests/wsgi_client.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from tests.conftest import REGION
from tests.wsgi_client import wsgi_sender

from hyperguard_twin.emulator import Emulator
from hyperguard_twin.ids import hyperpod_cluster_arn

ACCOUNT = "123456789012"
TABLE = "incidents"
TABLE_ARN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{TABLE}"
BUCKET = "checkpoints"
CLUSTER = "hyperguard-twin"
BUS = "service-bus"
ENDPOINT = "http://127.0.0.1:4566"  # never connected to: the requests stay in process
POLICY: dict[str, Any] = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "Incidents",
            "Effect": "Allow",
            "Action": ["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query"],
            "Resource": [TABLE_ARN, f"{TABLE_ARN}/index/*"],
        },
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{BUCKET}"},
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/*"},
        {
            "Effect": "Allow",
            "Action": "sagemaker:BatchRebootClusterNodes",
            "Resource": hyperpod_cluster_arn(CLUSTER, REGION, ACCOUNT),
        },
        {
            "Effect": "Allow",
            "Action": "ec2:RebootInstances",
            "Resource": f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/*",
            "Condition": {
                "StringEquals": {"aws:ResourceTag/eks:eks-cluster-name": "hyperguard-eks"},
                "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
            },
        },
        {
            "Effect": "Allow",
            "Action": "events:PutEvents",
            "Resource": f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{BUS}",
            "Condition": {"StringEquals": {"events:source": "hyperguard.node-forwarder"}},
        },
    ],
}


@dataclass
class Role:
    emulator: Emulator
    name: str
    credentials: dict[str, str]

    def client(self, service: str, **overrides: str) -> Any:
        """A client signing with the role's session, through the emulator's front door."""
        session = boto3.session.Session(
            aws_access_key_id=overrides.get("key", self.credentials["AccessKeyId"]),
            aws_secret_access_key=overrides.get("secret", self.credentials["SecretAccessKey"]),
            aws_session_token=self.credentials["SessionToken"],
            region_name=REGION,
        )
        client = session.client(service, endpoint_url=ENDPOINT)
        client.meta.events.register("before-send", wsgi_sender(self.emulator._wrap(_moto())))
        return client


def _moto() -> Any:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    return DomainDispatcherApplication(create_backend_app)


@pytest.fixture
def role(aws_env: None) -> Iterator[Role]:
    """RecoveryFunction's role, its policy shaped as the template's; the table, bucket, bus
    and instances exist (made with the account's root credentials, which IAM lets be)."""
    ddb = boto3.client("dynamodb", region_name=REGION)
    ddb.create_table(
        TableName=TABLE,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    boto3.client("events", region_name=REGION).create_event_bus(Name=BUS)
    iam = boto3.client("iam", region_name=REGION)
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "lambda.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    arn = iam.create_role(RoleName="recovery", AssumeRolePolicyDocument=json.dumps(trust))["Role"][
        "Arn"
    ]
    iam.put_role_policy(RoleName="recovery", PolicyName="steps", PolicyDocument=json.dumps(POLICY))
    credentials = boto3.client("sts", region_name=REGION).assume_role(
        RoleArn=arn, RoleSessionName="recovery-worker"
    )["Credentials"]
    emulator = Emulator()
    emulator.iam.enforce(credentials["AccessKeyId"], arn, "RecoveryFunction")
    yield Role(emulator, "recovery", credentials)


def refusal(call: Any) -> dict[str, Any]:
    with pytest.raises(ClientError) as raised:
        call()
    error: dict[str, Any] = raised.value.response
    return error


def test_a_table_grant_allows_its_actions_on_the_table_and_its_indexes_only(role: Role) -> None:
    ddb = role.client("dynamodb")
    assert "Item" not in ddb.get_item(TableName=TABLE, Key={"pk": {"S": "a"}})
    error = refusal(lambda: ddb.put_item(TableName=TABLE, Item={"pk": {"S": "a"}}))
    assert error["Error"]["Code"] == "AccessDeniedException"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Error"]["Message"] == (
        f"User: arn:aws:sts::{ACCOUNT}:assumed-role/recovery/recovery-worker is not authorized "
        f"to perform: dynamodb:PutItem on resource: {TABLE_ARN} because no identity-based "
        "policy allows the dynamodb:PutItem action"
    )
    # An index is its own resource: the grant names it with `/index/*`.
    query = {
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "a"}},
    }
    refused = refusal(lambda: ddb.query(TableName=TABLE, IndexName="ByStatus", **query))
    assert refused["Error"]["Code"] != "AccessDeniedException"  # moto's: no such index
    assert role.emulator.iam.denied == {("RecoveryFunction", "dynamodb:PutItem", TABLE_ARN): 1}


def test_a_transaction_needs_each_items_own_action(role: Role) -> None:
    ddb = role.client("dynamodb")
    key = {"pk": {"S": "a"}}
    update = {"TableName": TABLE, "Key": key, "UpdateExpression": "SET v = :v"}
    update["ExpressionAttributeValues"] = {":v": {"S": "x"}}
    ddb.transact_write_items(TransactItems=[{"Update": update}])
    check = {"TableName": TABLE, "Key": key, "ConditionExpression": "attribute_exists(pk)"}
    error = refusal(
        lambda: ddb.transact_write_items(
            TransactItems=[{"Update": update}, {"ConditionCheck": check}]
        )
    )
    assert error["Error"]["Code"] == "AccessDeniedException"
    assert "dynamodb:ConditionCheckItem" in error["Error"]["Message"]
    assert ddb.get_item(TableName=TABLE, Key=key)["Item"]["v"] == {"S": "x"}


def test_s3_grants_are_per_bucket_and_per_object(role: Role) -> None:
    boto3.client("s3", region_name=REGION).put_object(Bucket=BUCKET, Key="job/_COMPLETE", Body=b"1")
    boto3.client("s3", region_name=REGION).create_bucket(Bucket="elsewhere")
    s3 = role.client("s3")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="job/")["Contents"]] == [
        "job/_COMPLETE"
    ]
    assert s3.get_object(Bucket=BUCKET, Key="job/_COMPLETE")["Body"].read() == b"1"
    error = refusal(lambda: s3.list_objects_v2(Bucket="elsewhere"))
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == (
        "AccessDenied",
        403,
    )
    refusal(lambda: s3.put_object(Bucket=BUCKET, Key="job/x", Body=b"2"))
    assert set(role.emulator.iam.denied) == {
        ("RecoveryFunction", "s3:ListBucket", "arn:aws:s3:::elsewhere"),
        ("RecoveryFunction", "s3:PutObject", f"arn:aws:s3:::{BUCKET}/job/x"),
    }


def test_hyperpod_calls_are_authorized_on_the_clusters_arn(role: Role) -> None:
    sagemaker = role.client("sagemaker")
    # Allowed: it reaches the HyperPod API behind IAM, moto's (none: NotImplementedError) or,
    # where an earlier test of this process attached one, the twin's (no such cluster here).
    try:
        sagemaker.batch_reboot_cluster_nodes(ClusterName=CLUSTER, NodeIds=["i-1"])
    except NotImplementedError as missing:
        assert "batch_reboot_cluster_nodes" in str(missing)
    except ClientError as answered:
        assert answered.response["Error"]["Code"] == "ResourceNotFound"
    refused = refusal(
        lambda: sagemaker.batch_replace_cluster_nodes(ClusterName=CLUSTER, NodeIds=["i-1"])
    )
    assert refused["Error"]["Code"] == "AccessDeniedException"
    assert hyperpod_cluster_arn(CLUSTER, REGION, ACCOUNT) in refused["Error"]["Message"]


def test_a_reboot_is_allowed_only_on_instances_tagged_as_the_condition_says(role: Role) -> None:
    from moto.ec2.models import ec2_backends

    tags = ec2_backends[ACCOUNT][REGION].tags
    tags["i-0burst"] = {"eks:eks-cluster-name": "hyperguard-eks", "karpenter.sh/nodepool": "gpu"}
    tags["i-0otherpool"] = {"eks:eks-cluster-name": "hyperguard-eks"}  # no nodepool tag
    tags["i-0othercluster"] = {"eks:eks-cluster-name": "other", "karpenter.sh/nodepool": "gpu"}
    ec2 = role.client("ec2")
    error = refusal(lambda: ec2.reboot_instances(InstanceIds=["i-0burst"]))
    assert error["Error"]["Code"] != "UnauthorizedOperation"  # allowed: moto has no instance
    for instance in ("i-0otherpool", "i-0othercluster", "i-0untagged"):
        error = refusal(lambda i=instance: ec2.reboot_instances(InstanceIds=[i]))
        assert error["Error"]["Code"] == "UnauthorizedOperation", instance
        assert error["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_a_put_is_allowed_only_from_the_source_the_condition_names(role: Role) -> None:
    events = role.client("events")

    def put(source: str) -> Any:
        entry = {"Source": source, "DetailType": "NodeCondition", "Detail": "{}"}
        return events.put_events(Entries=[{**entry, "EventBusName": BUS}])

    assert put("hyperguard.node-forwarder")["FailedEntryCount"] == 0
    error = refusal(lambda: put("aws.health"))
    assert error["Error"]["Code"] == "AccessDeniedException"


def test_a_policy_changed_in_the_emulators_iam_applies_to_the_next_call(role: Role) -> None:
    ddb = role.client("dynamodb")
    ddb.get_item(TableName=TABLE, Key={"pk": {"S": "a"}})
    narrowed = json.loads(json.dumps(POLICY))
    narrowed["Statement"][0]["Action"].remove("dynamodb:GetItem")
    iam = boto3.client("iam", region_name=REGION)
    iam.put_role_policy(RoleName=role.name, PolicyName="steps", PolicyDocument=json.dumps(narrowed))
    refusal(lambda: ddb.get_item(TableName=TABLE, Key={"pk": {"S": "a"}}))
    iam.put_role_policy(RoleName=role.name, PolicyName="steps", PolicyDocument=json.dumps(POLICY))
    ddb.get_item(TableName=TABLE, Key={"pk": {"S": "a"}})


def test_a_wrong_secret_is_refused_before_any_policy_is_read(role: Role) -> None:
    error = refusal(
        lambda: role.client("dynamodb", secret="wrong").get_item(
            TableName=TABLE, Key={"pk": {"S": "a"}}
        )
    )
    assert error["Error"]["Code"] == "InvalidSignatureException"
    assert role.emulator.iam.denied == {}
    assert role.emulator.iam.unauthenticated == {
        ("RecoveryFunction", "dynamodb:GetItem", "InvalidSignatureException"): 1
    }


def test_other_credentials_are_let_be_and_what_the_twin_cannot_judge_is_counted(
    role: Role,
) -> None:
    root = Role(role.emulator, "root", {"AccessKeyId": "testing", "SecretAccessKey": "testing"})
    root.credentials["SessionToken"] = ""
    root.client("dynamodb").put_item(TableName=TABLE, Item={"pk": {"S": "b"}})
    role.client("sns").list_topics()  # no topic: the twin derives no resource
    assert role.emulator.iam.denied == {}
    assert role.emulator.iam.unjudged == {
        ("RecoveryFunction", "sns:ListTopics", "SNS ListTopics without a topic"): 1
    }
