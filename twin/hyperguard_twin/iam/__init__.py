"""IAM as AWS enforces it, for the stack's roles. A request signed with credentials the twin
handed to a function (its execution role's) or to the forwarder (ForwarderRole's) is
authenticated and authorized before moto serves it: moto finds the STS session behind the
access key and checks the SigV4 signature and the session token (`moto.iam.access_control`),
and the role's inline and managed policies are read from the emulator's IAM at that moment,
so a policy changed through the IAM API applies to the next call. A refused call gets the
service's own answer (DynamoDB's AccessDeniedException, S3's AccessDenied, EC2's
UnauthorizedOperation, SNS's AuthorizationError, ...) and never reaches moto. Everyone else
(the twin's set-up and simulated cloud, tests, the CLI) keeps moto's default: no IAM.

moto's own access control (`INITIAL_NO_AUTH_ACTION_COUNT`) is not used: it compares every
policy's Resource with "*" except for S3, SQS, IAM and STS (so each of the template's
table-, cluster- or bus-scoped grants is refused), names a transaction's action
`TransactWriteItems` where IAM checks each item's own action, evaluates StringEquals only
and lets a condition whose key the request lacks pass, answers JSON services in XML, and
refuses the root credentials the twin deploys with. Here the twin says what AWS authorizes
a request against (`authorizations`: actions, resource ARNs and condition keys, per the
Service Authorization Reference), evaluates the policies as IAM's policy evaluation logic
does for identity-based policies in one account (`policy`), and refuses or lets the request
through at the emulator's edge (`enforcement`).

What cannot be judged is let through and counted (`IamEnforcement.unjudged`): an operation
whose resources the twin does not derive, a task token no running execution holds, a
condition operator or key the twin does not evaluate, a policy variable.
"""
