"""Kubernetes side of a cluster: cordon, drain, node labels and job runs, through lightkube.

The client is built from the EKS endpoint, its CA data and an EKS bearer token (see
eks_token), and rebuilt when the token is refreshed. Nodes are found by instance id through
`spec.providerID` (EKS's `aws:///<az>/<instance-id>` or HyperPod's
`aws:///<az>/sagemaker/cluster/hyperpod-<cluster-id>-<instance-id>`); the API server offers
no field selector on that field, so the adapter lists nodes once and remembers the
instance → node name mapping.
EKS burst nodes belong to Karpenter: deleting a node's NodeClaim is how one is replaced.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from functools import lru_cache, partial
from typing import Any, Protocol, cast

import httpx2
import msgspec
from lightkube import ALL_NS, ApiError, Client, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.operators import in_
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Event as CoreEvent
from lightkube.resources.core_v1 import Namespace, Pod, PodTemplate, Service
from lightkube.resources.core_v1 import Node as KubeNodeResource
from lightkube.types import CascadeType, PatchType
from pydantic import BaseModel, Field

from hyperguard.aws import client
from hyperguard.cluster.conventions import (
    HEALTH_LABEL,
    INCIDENT_TAINT,
    REASON_LABEL,
    HyperPodHealthStatus,
    instance_id_from_provider_id,
    label_safe,
)
from hyperguard.cluster.eks_token import EksTokenSource
from hyperguard.cluster.gateway import (
    ClusterError,
    DrainResult,
    InvalidRunError,
    NodeNotFoundError,
)
from hyperguard.cluster.workloads import (
    CONTAINER,
    HYPERPOD_JOB_API,
    JOB_ID_LABEL,
    ReplicaLog,
    replica_index,
)
from hyperguard.models.cluster import RunKind
from hyperguard.observability import logger

# Set when HyperGuard cordons a node someone else had already cordoned, so that uncordon
# leaves that operator's decision alone.
PRIOR_UNSCHEDULABLE_ANNOTATION = "hyperguard.io/prior-unschedulable"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
FIELD_MANAGER = "hyperguard"
EVENT_NAMESPACE = "default"
"""Where Events about cluster-scoped objects (Nodes) live, as the kubelet records them."""
EVENT_MESSAGE_MAX = 1024
"""Event messages are cut to this many characters: the 1 KB events.k8s.io/v1 allows for an
event's note, which core/v1 messages map to."""
CONFLICT_ATTEMPTS = 3
EVICTION_RETRY_S = 5.0

# Karpenter (karpenter.sh/v1): the labels it puts on its nodes, and the cluster-scoped
# NodeClaim that stands for one instance and its node.
NodeClaim = create_global_resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims")
NodePool = create_global_resource("karpenter.sh", "v1", "NodePool", "nodepools")
EC2NodeClass = create_global_resource("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses")
HyperPodJob = create_namespaced_resource(*HYPERPOD_JOB_API)
Workload = create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads")
"""Kueue's Workload: a job a team applied waits in one on HyperGuard's admission check."""
_RUN_RESOURCES: dict[RunKind, Any] = {RunKind.BATCH: Job, RunKind.HYPERPOD: HyperPodJob}

# ApiError is an httpx2.HTTPError; a body lightkube cannot decode is a msgspec.DecodeError.
TRANSPORT_ERRORS = (httpx2.HTTPError, msgspec.DecodeError)


class TokenSource(Protocol):
    def token(self) -> str: ...


class NodeCondition(BaseModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: datetime | None = None


class RunPod(BaseModel):
    """A pod of a run that has not ended, as `KubernetesAdapter.run_pods` reads it."""

    job: str
    """Its job label's value (`job_name` of the job id)."""
    run: str
    """The name of the run object that controls it (its controller owner reference)."""
    node: str
    """The node it is bound to; "" while it waits for one."""
    running: bool
    stopping: bool = False
    """Its deletion has begun (`metadata.deletionTimestamp`): its kubelet is stopping it,
    within its termination grace period (a trainer saves a checkpoint on SIGTERM)."""


class KubeNode(BaseModel):
    """A Kubernetes node as the adapter reports it."""

    name: str
    instance_id: str | None
    unschedulable: bool = False
    deleting: bool = False
    created: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, str]] = Field(default_factory=list)
    conditions: list[NodeCondition] = Field(default_factory=list)


_decoders_warm = False


def warm_decoders() -> None:
    """Every lightkube model the adapter reads decoded once, in one thread, before any call
    (the first caller builds it; callers wait on the client's lock). msgspec builds a type's
    decoding information on its first decode, and two threads doing that at once for the
    same type crash the process: a segmentation fault in msgspec 0.22.0 (D170). An empty
    list decodes the item type's whole model, nested types included (msgspec resolves them
    when it builds the decoder)."""
    global _decoders_warm
    if _decoders_warm:
        return
    from lightkube.core import decoders
    from lightkube.models import meta_v1
    from lightkube.resources.rbac_authorization_v1 import RoleBinding

    models: tuple[Any, ...] = (
        KubeNodeResource,
        Pod,
        Job,
        Namespace,
        Service,
        PodTemplate,
        CoreEvent,
        Deployment,
        DaemonSet,
        CustomResourceDefinition,
        RoleBinding,
    )
    for model in models:
        decoders.decode_list(b'{"items": []}', model)
    for model in (Pod.Eviction, meta_v1.Status):
        decoders.decode_object(b"{}", model)
    decoders.decode_watch_event(b'{"type": "ADDED", "object": {}}')
    _decoders_warm = True


def _code(error: ApiError) -> int:
    return int(error.status.code or error.response.status_code)


@lru_cache(maxsize=8)
def _eks_connection(cluster_name: str) -> tuple[str, str]:
    cluster = client("eks").describe_cluster(name=cluster_name)["cluster"]
    return cluster["endpoint"], cluster["certificateAuthority"]["data"]


class KubernetesAdapter:
    """Cordon, drain, label and Job calls against one EKS cluster's API server.

    `cluster_name` is the EKS cluster name (it is signed into the token). Without `endpoint`
    and `ca_data` the adapter reads them once with eks:DescribeCluster. Pass `client` to use
    a prepared lightkube Client instead (tests inject one with an httpx2 MockTransport).
    """

    def __init__(
        self,
        cluster_name: str,
        *,
        endpoint: str | None = None,
        ca_data: str | None = None,
        client: Client | None = None,
        tokens: TokenSource | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        eviction_retry_s: float = EVICTION_RETRY_S,
    ) -> None:
        self.cluster_name = cluster_name
        self._endpoint = endpoint
        self._ca_data = ca_data
        self._injected_client = client
        self._tokens: TokenSource = tokens or EksTokenSource(cluster_name)
        self._sleep = sleep
        self._clock = clock
        self._eviction_retry_s = eviction_retry_s
        self._built: tuple[str, Client] | None = None
        self._building = threading.Lock()  # a client and its models are made once
        self._node_names: dict[str, str] = {}

    @property
    def client(self) -> Client:
        with self._building:
            warm_decoders()
            if self._injected_client is not None:
                return self._injected_client
            return self._client()

    def _client(self) -> Client:
        token = self._tokens.token()
        if self._built is None or self._built[0] != token:
            if self._built is not None:
                self._built[1].close()
            if self._endpoint is None or self._ca_data is None:
                self._endpoint, self._ca_data = _eks_connection(self.cluster_name)
            config = KubeConfig.from_one(
                cluster=Cluster(server=self._endpoint, certificate_auth_data=self._ca_data),
                user=User(token=token),
            )
            client = Client(config=config, trust_env=False, field_manager=FIELD_MANAGER)
            self._built = (token, client)
        return self._built[1]

    # nodes

    def list_nodes(self) -> list[KubeNode]:
        nodes = [
            self._view(node) for node in self._api(lambda: list(self.client.list(KubeNodeResource)))
        ]
        self._node_names = {n.instance_id: n.name for n in nodes if n.instance_id}
        return nodes

    def find_node(self, instance_id: str) -> KubeNode:
        """Raises NodeNotFoundError when no node has this instance id as its providerID."""
        return self._view(self._get_node(instance_id))

    def node_conditions(self, instance_id: str) -> list[NodeCondition]:
        return self.find_node(instance_id).conditions

    def cordon(self, instance_id: str, *, incident_id: str, reason: str) -> bool:
        """Mark the node unschedulable for `incident_id`. Returns False when this incident has
        already cordoned it: the node is never touched twice for one incident."""
        incident = label_safe(incident_id)

        def change(node: KubeNodeResource) -> dict[str, Any] | None:
            taints = node.spec.taints if node.spec and node.spec.taints else []
            ours = [t for t in taints if t.key == INCIDENT_TAINT]
            if any(t.value == incident for t in ours):
                return None
            metadata: dict[str, Any] = {"labels": {REASON_LABEL: label_safe(reason)}}
            if node.spec and node.spec.unschedulable and not ours:
                metadata["annotations"] = {PRIOR_UNSCHEDULABLE_ANNOTATION: "true"}
            kept = [t.to_dict() for t in taints if t.key != INCIDENT_TAINT]
            new_taint = {"key": INCIDENT_TAINT, "value": incident, "effect": "NoSchedule"}
            return {
                "metadata": metadata,
                "spec": {"unschedulable": True, "taints": [*kept, new_taint]},
            }

        cordoned = self._patch_node(instance_id, change)
        if cordoned:
            self.node_event(
                instance_id,
                "HyperGuardCordoned",
                f"cordoned for incident {incident_id}: {reason}",
                key=incident_id,
            )
        return cordoned

    def uncordon(self, instance_id: str) -> bool:
        """Remove HyperGuard's taint and label; make the node schedulable unless it was
        cordoned before HyperGuard cordoned it. Returns False when there was nothing to undo."""

        def change(node: KubeNodeResource) -> dict[str, Any] | None:
            taints = node.spec.taints if node.spec and node.spec.taints else []
            labels = node.metadata.labels if node.metadata and node.metadata.labels else {}
            annotations = node.metadata.annotations if node.metadata else None
            ours = [t for t in taints if t.key == INCIDENT_TAINT]
            if not ours and REASON_LABEL not in labels:
                return None
            prior = (annotations or {}).get(PRIOR_UNSCHEDULABLE_ANNOTATION) == "true"
            spec: dict[str, Any] = {
                "taints": [t.to_dict() for t in taints if t.key != INCIDENT_TAINT]
            }
            if not prior:
                spec["unschedulable"] = False
            metadata = {
                "labels": {REASON_LABEL: None},
                "annotations": {PRIOR_UNSCHEDULABLE_ANNOTATION: None},
            }
            return {"metadata": metadata, "spec": spec}

        uncordoned = self._patch_node(instance_id, change)
        if uncordoned:
            self.node_event(
                instance_id, "HyperGuardUncordoned", "returned to service", warning=False
            )
        return uncordoned

    def node_event(
        self, instance_id: str, reason: str, message: str, *, warning: bool = True, key: str = ""
    ) -> bool:
        """Record a Kubernetes Event on the node (what `kubectl describe node` and `kubectl
        events` show), as the kubelet does: in namespace default, about the Node. Its name
        is derived from the node, `reason` and `key`, so a retried step records it once.
        Best effort: an event that cannot be written is logged, never an error (False)."""
        try:
            node = self._get_node(instance_id)
            name = node.metadata.name if node.metadata and node.metadata.name else instance_id
            now = datetime.now(UTC)
            digest = hashlib.sha256(f"{reason}|{key or now.isoformat()}".encode()).hexdigest()
            event = CoreEvent(
                metadata=ObjectMeta(name=f"{name}.{digest[:16]}", namespace=EVENT_NAMESPACE),
                involvedObject=ObjectReference(
                    apiVersion="v1",
                    kind="Node",
                    name=name,
                    uid=node.metadata.uid if node.metadata else None,
                ),
                reason=reason,
                message=message[:EVENT_MESSAGE_MAX],
                type="Warning" if warning else "Normal",
                source=EventSource(component=FIELD_MANAGER),
                reportingComponent=FIELD_MANAGER,
                reportingInstance=FIELD_MANAGER,
                firstTimestamp=now,
                lastTimestamp=now,
                count=1,
            )
            self._request(
                f"create event on node {name}",
                lambda: self.client.create(event, namespace=EVENT_NAMESPACE),
                expected=(409,),
            )
        except (ClusterError, NodeNotFoundError) as error:
            logger.warning("node event not recorded", extra={"reason": reason, "error": str(error)})
            return False
        return True

    def set_node_health_status(self, instance_id: str, status: HyperPodHealthStatus) -> bool:
        """Set HyperPod's node-health-status label. Returns False when it already has `status`."""
        value = HyperPodHealthStatus(status).value

        def change(node: KubeNodeResource) -> dict[str, Any] | None:
            labels = node.metadata.labels if node.metadata and node.metadata.labels else {}
            if labels.get(HEALTH_LABEL) == value:
                return None
            return {"metadata": {"labels": {HEALTH_LABEL: value}}}

        return self._patch_node(instance_id, change)

    def mark_node(
        self,
        instance_id: str,
        *,
        labels: dict[str, str | None] | None = None,
        annotations: dict[str, str | None] | None = None,
    ) -> bool:
        """Set (None: remove) HyperGuard's labels and annotations on the node. Returns False
        when it already had them."""
        wanted = {"labels": labels or {}, "annotations": annotations or {}}

        def change(node: KubeNodeResource) -> dict[str, Any] | None:
            meta = node.metadata or ObjectMeta()
            have = {"labels": meta.labels or {}, "annotations": meta.annotations or {}}
            patch = {
                kind: {k: v for k, v in values.items() if have[kind].get(k) != v}
                for kind, values in wanted.items()
            }
            patch = {kind: values for kind, values in patch.items() if values}
            return {"metadata": patch} if patch else None

        return self._patch_node(instance_id, change)

    def drain(
        self, instance_id: str, *, deadline_s: float, force: bool = True, evict: bool = True
    ) -> DrainResult:
        """Evict every pod but DaemonSet and mirror pods. Evictions a PodDisruptionBudget
        refuses (429) are retried until `deadline_s` (0: one round); pods left then are
        deleted with a zero grace period and reported as forced, or, without `force`,
        reported as blocked for a later call. Without `evict` (another system drains the
        node), none is evicted: the pods left are deleted (`force`) or reported blocked."""
        node_name = self._get_node_name(instance_id)
        deadline = self._clock() + deadline_s
        pods = self._api(
            lambda: list(
                self.client.list(Pod, namespace=ALL_NS, fields={"spec.nodeName": node_name})
            )
        )
        pending = [
            f"{pod.metadata.namespace}/{pod.metadata.name}"
            for pod in pods
            if pod.metadata is not None and _evictable(pod)
        ]
        result = DrainResult()
        while evict:
            still_blocked = []
            for key in pending:
                if self._evict(key):
                    result.evicted.append(key)
                else:
                    still_blocked.append(key)
            pending = still_blocked
            remaining = deadline - self._clock()
            if not pending or remaining <= 0:
                break
            self._sleep(min(self._eviction_retry_s, remaining))
        if not force:
            result.blocked.extend(pending)
            return result
        for key in pending:
            if self._force_delete(key):
                result.forced.append(key)
            else:
                result.blocked.append(key)
        return result

    # runs of jobs (batch/v1 Jobs and HyperPodPyTorchJobs)

    def create_run(self, manifest: dict[str, Any]) -> str | None:
        """Create a run object: its uid, or None when it already exists (409)."""
        resource = _RUN_RESOURCES[RunKind(manifest["kind"])]
        obj = resource.from_dict(manifest)
        meta = manifest["metadata"]
        what = f"create {manifest['kind']} {meta['namespace']}/{meta['name']}"
        try:
            code, created = self._attempt(what, lambda: self.client.create(obj), (409,))
        except ClusterError as error:
            cause = error.__cause__
            if isinstance(cause, ApiError) and _code(cause) == 422:
                # Invalid: the same object would be refused again (its template is the job's).
                raise InvalidRunError(str(error)) from cause
            raise
        if code is not None or created is None:
            return None
        return str(created.metadata.uid) if created.metadata else None

    def create_service(self, manifest: dict[str, Any]) -> bool:
        """Create a Service (a run's headless one). False when it already exists (409)."""
        meta = manifest["metadata"]
        what = f"create Service {meta['namespace']}/{meta['name']}"
        obj = cast(Service, Service.from_dict(manifest))
        return self._request(what, lambda: self.client.create(obj), expected=(409,)) is None

    def replica_log(
        self, namespace: str, job: str, replica: int, *, tail_lines: int, limit_bytes: int
    ) -> ReplicaLog | None:
        """The last `tail_lines` lines (at most `limit_bytes`) of the training container of the
        newest pod of `replica` among the job's pods (its job label's value `job`) in
        `namespace`, through pods/log; None when the job has no such pod."""
        pods = self._api(
            lambda: list(self.client.list(Pod, namespace=namespace, labels={JOB_ID_LABEL: job}))
        )
        never = datetime.min.replace(tzinfo=UTC)
        mine = [
            (p.metadata.creationTimestamp or never, p.metadata.name, p)
            for p in pods
            if p.metadata and p.metadata.name and replica_index(p.metadata.to_dict()) == replica
        ]
        if not mine:
            return None
        _, name, pod = max(mine, key=lambda found: (found[0], found[1]))
        found = ReplicaLog(
            replica=replica,
            pod=name,
            node=(pod.spec.nodeName if pod.spec else None) or "",
            phase=(pod.status.phase if pod.status else None) or "",
            lines=[],
        )
        # The training container is the pod's first (hyperguard.cluster.pod_template).
        containers = pod.spec.containers if pod.spec else []
        container = containers[0].name if containers else CONTAINER
        size = 0
        try:
            for line in self.client.log(
                name, namespace=namespace, container=container, tail_lines=tail_lines
            ):
                size += len(line.encode())
                if size > limit_bytes:
                    found.truncated = True
                    break
                found.lines.append(line.rstrip("\n"))
        except ApiError as error:
            found.unavailable = f"{_code(error)}: {error.status.message}"
        except TRANSPORT_ERRORS as error:
            raise ClusterError(
                f"logs of {namespace}/{name} on {self.cluster_name}: {error}"
            ) from error
        return found

    def namespace_exists(self, name: str) -> bool:
        return (
            self._get(f"get namespace {name}", lambda: self.client.get(Namespace, name)) is not None
        )

    def dry_run_create(self, manifest: dict[str, Any]) -> str | None:
        """Send a run object to the API server as a dry run (`dryRun=All`: authorization,
        admission and validation run, nothing is stored). None when it would be created,
        otherwise the API server's refusal in one line; a transport failure is a
        ClusterError."""
        resource = _RUN_RESOURCES[RunKind(manifest["kind"])]
        refusal = self._dry_run(manifest, resource.from_dict(manifest))
        return None if refusal is None else refusal[1]

    def dry_run_pods(self, run: dict[str, Any], template: dict[str, Any]) -> tuple[int, str] | None:
        """Have the API server validate the pods `run` (a HyperPodPyTorchJob) makes of
        `template`: its CRD's schema leaves a pod template to the training operator, which
        would only find a pod refused when it creates it. Sent as a core/v1 PodTemplate named
        and placed as the run, as a dry run (pod validation and admission run, nothing is
        stored). None when it is valid, otherwise the HTTP status and the refusal in one
        line; a transport failure is a ClusterError."""
        meta = run["metadata"]
        manifest = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "template": template,
        }
        return self._dry_run(manifest, PodTemplate.from_dict(manifest))

    def _dry_run(self, manifest: dict[str, Any], obj: Any) -> tuple[int, str] | None:
        try:
            self.client.create(obj, dry_run=True)
        except ApiError as error:
            status = error.status
            line = f"{_code(error)} {status.reason or ''}: {status.message}".replace(" :", ":")
            return _code(error) or 0, line
        except TRANSPORT_ERRORS as error:
            meta = manifest["metadata"]
            raise ClusterError(
                f"dry run of {manifest['kind']} {meta['namespace']}/{meta['name']} on "
                f"{self.cluster_name}: {error}"
            ) from error
        return None

    def list_runs(self, labels: dict[str, Any]) -> list[dict[str, Any]]:
        """Run objects of both kinds in any namespace carrying `labels`, as JSON. A cluster
        without the HyperPod training operator's CRD simply has no HyperPodPyTorchJobs."""
        found: list[dict[str, Any]] = []
        for kind, resource in _RUN_RESOURCES.items():
            try:
                objects = list(self.client.list(resource, namespace=ALL_NS, labels=labels))
            except ApiError as error:
                if _code(error) == 404 and kind is RunKind.HYPERPOD:
                    continue
                raise ClusterError(f"list {kind.value}s on {self.cluster_name}: {error}") from error
            except TRANSPORT_ERRORS as error:
                raise ClusterError(f"list {kind.value}s on {self.cluster_name}: {error}") from error
            for obj in objects:
                data = obj.to_dict()
                data.setdefault("kind", kind.value)
                found.append(data)
        return found

    def run_pods(self, namespace: str, job_names: Collection[str]) -> list[RunPod]:
        """The pods of these jobs (their job label's values) in `namespace` that have not
        ended, those being stopped too: the run object that owns each and the node it is
        bound to ("" while it waits for one)."""
        if not job_names:
            return []
        labels: dict[str, Any] = {JOB_ID_LABEL: in_(sorted(job_names))}
        pods = self._api(lambda: list(self.client.list(Pod, namespace=namespace, labels=labels)))
        found: list[RunPod] = []
        for pod in pods:
            meta, spec, status = pod.metadata, pod.spec, pod.status
            if meta is None or (status is not None and status.phase in ("Succeeded", "Failed")):
                continue
            owner = next((o.name for o in meta.ownerReferences or [] if o.controller), "")
            found.append(
                RunPod(
                    job=(meta.labels or {}).get(JOB_ID_LABEL, ""),
                    run=owner,
                    node=(spec.nodeName if spec is not None else None) or "",
                    running=status is not None and status.phase == "Running",
                    stopping=meta.deletionTimestamp is not None,
                )
            )
        return found

    def patch_run(self, kind: RunKind, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        """JSON merge patch of a run object; False when it is gone (404)."""
        gone = self._request(
            f"patch {kind.value} {namespace}/{name}",
            partial(
                self.client.patch,
                _RUN_RESOURCES[kind],
                name,
                patch,
                namespace=namespace,
                patch_type=PatchType.MERGE,
            ),
            expected=(404,),
        )
        return gone is None

    def delete_run(self, kind: RunKind, namespace: str, name: str) -> bool:
        """Delete a run object with its pods; False when it was gone."""
        gone = self._request(
            f"delete {kind.value} {namespace}/{name}",
            partial(
                self.client.delete,
                _RUN_RESOURCES[kind],
                name,
                namespace=namespace,
                cascade=CascadeType.BACKGROUND,
            ),
            expected=(404,),
        )
        return gone is None

    def node_name(self, instance_id: str) -> str:
        return self._get_node_name(instance_id)

    # Karpenter

    def delete_nodeclaim(self, instance_id: str) -> bool:
        """Delete the Karpenter NodeClaim of the instance; Karpenter then drains the node and
        terminates the instance. Returns False when there was none left to delete (no
        NodeClaim has this instance as its providerID, or it is already being deleted).

        The NodeClaim is found by its status.providerID rather than through the node, so
        that an instance whose node never registered, or is already gone, is found too."""
        claims = self._api(lambda: list(self.client.list(NodeClaim)))
        for claim in claims:
            status = claim.get("status") or {}
            meta = claim.metadata
            holder = f"NodeClaim {meta.name if meta else ''}"
            if instance_id_from_provider_id(status.get("providerID"), holder=holder) != instance_id:
                continue
            if meta is None or meta.name is None or meta.deletionTimestamp is not None:
                return False
            gone = self._request(
                f"delete NodeClaim {meta.name}",
                partial(self.client.delete, NodeClaim, meta.name),
                expected=(404,),
            )
            return gone is None
        return False

    def list_nodeclaims(self, labels: dict[str, Any]) -> list[dict[str, Any]]:
        """NodeClaims carrying `labels` (a value of ... means the label exists), as JSON."""
        claims = self._api(lambda: list(self.client.list(NodeClaim, labels=labels)))
        return [claim.to_dict() for claim in claims]  # type: ignore[no-untyped-call]

    def get_nodepool(self, name: str) -> dict[str, Any] | None:
        """The NodePool `name` as JSON; None when there is none (404)."""
        pool = self._get(f"get NodePool {name}", lambda: self.client.get(NodePool, name))
        if pool is None:
            return None
        found: dict[str, Any] = pool.to_dict()  # type: ignore[no-untyped-call]
        return found

    def crd_versions(self, name: str) -> list[str] | None:
        """The versions the API server serves of CRD `name` (e.g.
        `clusterqueues.kueue.x-k8s.io`); None when it is not installed."""
        crd = self._get(
            f"get CustomResourceDefinition {name}",
            lambda: self.client.get(CustomResourceDefinition, name),
        )
        if crd is None or crd.spec is None:
            return None
        return [v.name for v in crd.spec.versions if v.served]

    def list_nodepools(self) -> list[dict[str, Any]]:
        """Every Karpenter NodePool, as JSON."""
        pools = self._api(lambda: list(self.client.list(NodePool)))
        return [pool.to_dict() for pool in pools]  # type: ignore[no-untyped-call]

    def list_ec2nodeclasses(self) -> list[dict[str, Any]] | None:
        """Every EC2NodeClass (Karpenter's AWS provider), as JSON; None when its CRD is not
        installed (EKS Auto Mode's NodePools use its own NodeClass)."""
        code, classes = self._attempt(
            "list EC2NodeClasses", lambda: list(self.client.list(EC2NodeClass)), (404,)
        )
        if code is not None or classes is None:
            return None
        return [c.to_dict() for c in classes]  # type: ignore[no-untyped-call]

    def create_nodeclaim(self, manifest: dict[str, Any]) -> bool:
        """Create a NodeClaim. False when one of that name exists already (409)."""
        what = f"create NodeClaim {manifest['metadata']['name']}"
        obj = NodeClaim.from_dict(manifest)
        return self._request(what, lambda: self.client.create(obj), expected=(409,)) is None

    def delete_nodeclaim_named(self, name: str) -> bool:
        """Delete the NodeClaim `name`. False when it was already gone (404)."""
        call = partial(self.client.delete, NodeClaim, name)
        return self._request(f"delete NodeClaim {name}", call, expected=(404,)) is None

    def annotate_nodeclaim(self, name: str, annotations: dict[str, str | None]) -> bool:
        """Merge-patch the NodeClaim's annotations (None removes one). False when gone."""
        patch = {"metadata": {"annotations": annotations}}
        call = partial(self.client.patch, NodeClaim, name, patch, patch_type=PatchType.MERGE)
        return self._request(f"annotate NodeClaim {name}", call, expected=(404,)) is None

    # other objects, as JSON (the Kueue objects HyperGuard keeps: hyperguard.cluster.kueue)

    def get_object(
        self, resource: Any, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """The object `name` of a lightkube resource class; None when there is none (404)."""
        what = f"get {resource.__name__} {name}"
        found = self._get(what, partial(self.client.get, resource, name, namespace=namespace))
        return None if found is None else dict(found.to_dict())

    def create_object(self, resource: Any, manifest: dict[str, Any]) -> bool:
        """Create an object of a lightkube resource class. False when it exists (409)."""
        what = f"create {resource.__name__} {manifest['metadata']['name']}"
        call = partial(self.client.create, resource.from_dict(manifest))
        return self._request(what, call, expected=(409,)) is None

    def patch_object(
        self, resource: Any, name: str, patch: dict[str, Any], namespace: str | None = None
    ) -> bool:
        """JSON merge patch of an object. False when it is gone (404)."""
        call = partial(
            self.client.patch,
            resource,
            name,
            patch,
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
        return self._request(f"patch {resource.__name__} {name}", call, expected=(404,)) is None

    def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Kueue Workload `name` in `namespace`; None when there is none (404)."""
        what = f"get Workload {namespace}/{name}"
        found = self._get(what, partial(self.client.get, Workload, name, namespace=namespace))
        return None if found is None else dict(found.to_dict())

    def patch_workload_status(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        """JSON merge patch of a Kueue Workload's status; False when it is gone (404)."""
        call = partial(
            self.client.patch,
            Workload.Status,
            name,
            patch,
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
        what = f"patch Workload {namespace}/{name} status"
        return self._request(what, call, expected=(404,)) is None

    def workloads(self, namespace: str, name: str) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """The Deployments and DaemonSets in `namespace` labelled `app.kubernetes.io/name:
        <name>` (as their Helm charts label them): each one's kind, name and containers."""
        found: list[tuple[str, str, list[dict[str, Any]]]] = []
        labels: dict[str, Any] = {"app.kubernetes.io/name": name}
        for kind in (Deployment, DaemonSet):

            def listed(kind: Any = kind) -> list[Any]:
                return list(self.client.list(kind, namespace=namespace, labels=labels))

            for obj in self._get(f"list {kind.__name__}s in {namespace}", listed) or []:
                data = obj.to_dict()
                template = ((data.get("spec") or {}).get("template") or {}).get("spec") or {}
                found.append(
                    (kind.__name__, str(data["metadata"]["name"]), template.get("containers") or [])
                )
        return found

    # internals

    def _api[T](self, call: Callable[[], T]) -> T:
        try:
            return call()
        except TRANSPORT_ERRORS as error:
            raise ClusterError(f"Kubernetes API on {self.cluster_name}: {error}") from error

    def _request(
        self, what: str, call: Callable[[], object], *, expected: Collection[int] = ()
    ) -> int | None:
        """Make one API call: None when it succeeds, the HTTP status when it fails with one
        of `expected`; any other failure is a ClusterError."""
        return self._attempt(what, call, expected)[0]

    def _get[T](self, what: str, call: Callable[[], T]) -> T | None:
        """Read one object: None when it does not exist (404); any other failure is a
        ClusterError."""
        return self._attempt(what, call, (404,))[1]

    def _attempt[T](
        self, what: str, call: Callable[[], T], expected: Collection[int]
    ) -> tuple[int | None, T | None]:
        """(None, the call's result), or (the HTTP status, None) for a failure in
        `expected`; any other failure is a ClusterError naming `what` and the cluster."""
        try:
            return None, call()
        except ApiError as error:
            if _code(error) in expected:
                return _code(error), None
            raise ClusterError(f"{what} on {self.cluster_name}: {error}") from error
        except TRANSPORT_ERRORS as error:
            raise ClusterError(f"{what} on {self.cluster_name}: {error}") from error

    def _get_node(self, instance_id: str) -> KubeNodeResource:
        name = self._node_names.get(instance_id)
        if name is not None:
            node = self._get(f"get node {name}", lambda: self.client.get(KubeNodeResource, name))
            if node and _instance_of(node) == instance_id:
                return node
        for node in self._api(lambda: list(self.client.list(KubeNodeResource))):
            found = _instance_of(node)
            if found and node.metadata and node.metadata.name:
                self._node_names[found] = node.metadata.name
            if found == instance_id:
                return node
        raise NodeNotFoundError(instance_id)

    def _get_node_name(self, instance_id: str) -> str:
        name = self._node_names.get(instance_id)
        if name is None:
            node = self._get_node(instance_id)
            name = node.metadata.name if node.metadata and node.metadata.name else None
        if name is None:
            raise NodeNotFoundError(instance_id)
        return name

    def _patch_node(
        self,
        instance_id: str,
        change: Callable[[KubeNodeResource], dict[str, Any] | None],
    ) -> bool:
        """Read the node, compute a JSON merge patch and apply it guarded by the node's
        resourceVersion, so a concurrent writer (the kubelet, HyperPod's agents) makes us
        re-read rather than overwrite its taints."""
        for _ in range(CONFLICT_ATTEMPTS):
            node = self._get_node(instance_id)
            patch = change(node)
            if patch is None:
                return False
            meta = node.metadata or ObjectMeta()
            name = meta.name or ""
            patch.setdefault("metadata", {})["resourceVersion"] = meta.resourceVersion
            conflict = self._request(
                f"patch node {name}",
                partial(
                    self.client.patch, KubeNodeResource, name, patch, patch_type=PatchType.MERGE
                ),
                expected=(409,),
            )
            if conflict is None:
                return True
        raise ClusterError(
            f"node for {instance_id} kept changing; gave up after {CONFLICT_ATTEMPTS} tries"
        )

    def _evict(self, key: str) -> bool:
        """True when the pod is evicted or already gone; False when a PDB refuses (429)."""
        namespace, name = key.split("/", 1)
        eviction = Pod.Eviction(metadata=ObjectMeta(name=name, namespace=namespace))
        refused = self._request(
            f"evict pod {key}",
            lambda: self.client.create(eviction, name=name, namespace=namespace),
            expected=(404, 429),
        )
        return refused != 429

    def _force_delete(self, key: str) -> bool:
        namespace, name = key.split("/", 1)
        try:
            self.client.delete(Pod, name, namespace=namespace, grace_period=0)
        except ApiError as error:
            return _code(error) == 404
        except TRANSPORT_ERRORS:
            return False
        return True

    @staticmethod
    def _view(node: KubeNodeResource) -> KubeNode:
        meta = node.metadata or ObjectMeta()
        spec = node.spec
        conditions = node.status.conditions if node.status and node.status.conditions else []
        return KubeNode(
            name=meta.name or "",
            instance_id=_instance_of(node),
            unschedulable=bool(spec and spec.unschedulable),
            deleting=meta.deletionTimestamp is not None,
            created=meta.creationTimestamp,
            labels=dict(meta.labels or {}),
            annotations=dict(meta.annotations or {}),
            taints=[
                {k: str(v) for k, v in t.to_dict().items()}
                for t in (spec.taints if spec and spec.taints else [])
            ],
            conditions=[
                NodeCondition(
                    type=c.type,
                    status=c.status,
                    reason=c.reason,
                    message=c.message,
                    last_transition_time=c.lastTransitionTime,
                )
                for c in conditions
            ],
        )


def _evictable(pod: Pod) -> bool:
    meta = pod.metadata
    if meta is None:
        return False
    if meta.annotations and MIRROR_POD_ANNOTATION in meta.annotations:
        return False
    return not any(owner.kind == "DaemonSet" for owner in meta.ownerReferences or [])


def _instance_of(node: KubeNodeResource) -> str | None:
    """The node's instance id by its providerID (None: not set yet, or of an unknown form)."""
    name = node.metadata.name if node.metadata else None
    provider_id = node.spec.providerID if node.spec else None
    return instance_id_from_provider_id(provider_id, holder=f"node {name or ''}")
