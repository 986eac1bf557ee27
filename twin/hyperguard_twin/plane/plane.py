"""The twin's Kubernetes: upstream etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, KWOK (the nodes' kubelets), Kueue and Karpenter (with the twin's AWS cloud
provider), each its own process on 127.0.0.1, started in the order a cluster comes up.

kube-apiserver serves TLS with the RBAC authorizer on. Callers authenticate as on EKS: the
service's functions with EKS bearer tokens, which kube-apiserver sends to the twin's token
authenticator (a TokenReview webhook, `authn.py`) that maps each IAM role to the user and
groups of its EKS access entry; the twin's own components with client certificates (kcm
and the scheduler as the identities kubeadm gives them, the others in system:masters, as
an add-on's operator would run them).

What the controllers' flags set for the twin, and why, is in `PlaneTimings` and in
docs/architecture.md ("Clocks").
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from hyperguard_twin.plane import bootstrap
from hyperguard_twin.plane.authn import Identity, TokenReviewServer
from hyperguard_twin.plane.components import Built
from hyperguard_twin.plane.kube import KubeClient, wait_for
from hyperguard_twin.plane.pki import SERVICE_IP, ClusterPki, KeyPair

STOP_GRACE_S = 1.0
"""How long the components have to exit on SIGTERM when the plane stops."""
WORKDIR_PREFIX = "hyperguard-plane-"
OWNER_FILE = "owner.pid"
"""The process that started the plane; its folder outlives it only if it was killed."""

HOST = "127.0.0.1"
SERVICE_RANGE = "10.96.0.0/16"
_log = logging.getLogger(__name__)


class PlaneError(RuntimeError):
    pass


@dataclass(frozen=True)
class PlaneTimings:
    """Controller settings the twin sets (real controllers run on wall time; the simulated
    cluster's durations stay data of the simulator).

    `node_monitor_grace_s`: how long kube-controller-manager waits for a node's heartbeat
    before it marks the node Unknown (its default 50 s: KWOK renews the leases, so only a
    stopped KWOK would reach it). `karpenter_batch_idle_s` / `karpenter_batch_max_s`:
    Karpenter's provisioning batch window (its defaults 1 s / 10 s)."""

    node_monitor_grace_s: int = 50
    karpenter_batch_idle_s: int = 1
    karpenter_batch_max_s: int = 10
    not_ready_toleration_s: int = 300
    """How long a pod tolerates its node being NotReady or unreachable before the taint
    manager evicts it (kube-apiserver's DefaultTolerationSeconds: 300 s)."""

    @classmethod
    def for_scale(cls, scale: float) -> PlaneTimings:
        """The defaults with the one setting that stands for a duration of the simulated
        cluster put on its clock: a NotReady node's pods are evicted after 300 simulated
        seconds (the published default), as a real cluster evicts them after 300 real ones.
        The rest stays the upstream defaults: they pace the controllers, not the cluster."""
        return cls(not_ready_toleration_s=max(1, round(300 / scale)))


@dataclass
class PlaneSettings:
    """What the account around the cluster gives it.

    `authenticate` maps a bearer token to an identity (None: refused), or is None for a
    plane without token authentication. `aws_env` is the environment Karpenter's cloud
    provider reaches EC2 with (the emulator's endpoint, region, credentials);
    `instance_types` the instance types it offers (its file's JSON)."""

    cluster_name: str
    authenticate: Callable[[str], Identity | None] | None = None
    aws_env: Mapping[str, str] = field(default_factory=dict)
    instance_types: list[dict[str, Any]] = field(default_factory=list)
    timings: PlaneTimings = field(default_factory=PlaneTimings)
    feature_gates: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)
    """Per component (karpenter, kueue): feature gates to set, as its flag takes them."""
    api_only: bool = False
    """Only etcd and kube-apiserver, with the CRDs installed: an API server where nothing
    reconciles, for a benchmark that plays the cluster's side itself (bench/scheduler.py)."""


def free_port() -> int:
    """A port free now, below Linux's ephemeral range (32768-60999) so no outgoing
    connection takes it before the component binds it."""
    import random

    for _ in range(200):
        candidate = random.randint(20_000, 32_000)
        with socket.socket() as s:
            try:
                s.bind((HOST, candidate))
            except OSError:
                continue
            return candidate
    raise PlaneError("no free port below the ephemeral range")


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the twin's process dies, however it dies, so no
    component outlives it (Linux prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def rss_bytes(self) -> int | None:
        try:
            for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None


class ControlPlane:
    """Start with `start()`, stop with `stop()`. `client()` reaches the API server as the
    twin's own controllers do (a client certificate in system:masters)."""

    def __init__(self, built: Mapping[str, Built], settings: PlaneSettings) -> None:
        # Kueue's and Karpenter's CRDs come from their modules even when they do not run.
        needed = {"kube", "etcd", "kueue", "karpenter"}
        if not settings.api_only:
            needed.add("kwok")
        missing = needed - set(built)
        if missing:
            raise PlaneError(f"components not built: {', '.join(sorted(missing))}")
        self.built = dict(built)
        self.settings = settings
        remove_abandoned_workdirs()
        self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        (self.workdir / OWNER_FILE).write_text(str(os.getpid()))
        self.pki = ClusterPki(self.workdir / "pki")
        self.port = free_port()
        self.kubelet_port = free_port()
        """KWOK's kubelet API, every node's (kubeletEndpoint)."""
        self.logs_dir = self.workdir / "pod-logs"
        """The simulated containers' log files, in the CRI log format KWOK reads."""
        self.endpoint = f"https://{HOST}:{self.port}"
        self.audit_log = self.workdir / "audit.log"
        self.processes: dict[str, Process] = {}
        self.started_at: dict[str, float] = {}
        self._authn: TokenReviewServer | None = None
        self._clients: list[KubeClient] = []
        self._admin_pair: KeyPair | None = None

    # ------------------------------------------------------------------ identity

    @property
    def ca_data(self) -> str:
        """The CA as EKS's DescribeCluster gives it: base64 of the PEM."""
        return base64.b64encode(self.pki.ca_pem).decode()

    def client(self) -> KubeClient:
        assert self._admin_pair is not None, "the plane is not started"
        client = KubeClient(self.endpoint, self.pki.ca, identity=self._admin_pair)
        self._clients.append(client)
        return client

    def token_client(self, token: str) -> KubeClient:
        client = KubeClient(self.endpoint, self.pki.ca, token=token)
        self._clients.append(client)
        return client

    def kubeconfig(
        self, name: str, *, identity: KeyPair | None = None, token: str | None = None
    ) -> Path:
        """A kubeconfig file for one identity (a client certificate or a bearer token)."""
        user: dict[str, str] = {}
        if identity is not None:
            user = {"client-certificate": str(identity.cert), "client-key": str(identity.key)}
        elif token is not None:
            user = {"token": token}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "twin",
                    "cluster": {"server": self.endpoint, "certificate-authority": str(self.pki.ca)},
                }
            ],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": "twin", "user": name}}],
            "current-context": name,
        }
        path = self.workdir / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    # ------------------------------------------------------------------ start, stop

    def start(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        try:
            self._start(deadline)
        except BaseException:
            self.stop()
            raise

    def _remaining(self, deadline: float) -> float:
        return max(1.0, deadline - time.monotonic())

    def _start(self, deadline: float) -> None:
        self._admin_pair = self.pki.client("admin", "hyperguard-twin", "system:masters")
        etcd_port, etcd_peer = free_port(), free_port()
        self._spawn(
            "etcd",
            self.built["etcd"].binary,
            [
                "--name=twin",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://{HOST}:{etcd_port}",
                f"--advertise-client-urls=http://{HOST}:{etcd_port}",
                f"--listen-peer-urls=http://{HOST}:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://{HOST}:{etcd_peer}",
                f"--initial-cluster=twin=http://{HOST}:{etcd_peer}",
                "--log-level=warn",
                "--quota-backend-bytes=2147483648",
                "--unsafe-no-fsync",  # a throwaway store: nothing to keep after a crash
            ],
        )
        wait_for(lambda: _port_open(etcd_port), self._remaining(deadline), "etcd did not listen")
        self._start_authn()
        self._start_apiserver(etcd_port)
        admin = self.client()
        wait_for(
            admin.ready,
            self._remaining(deadline),
            "kube-apiserver was not ready",
            interval_s=0.2,
        )
        self._check_alive()
        if self.settings.api_only:
            bootstrap.install_crds(admin, self.built, self._remaining(deadline))
            return
        # The CRDs before the controllers: kube-controller-manager's garbage collector
        # discovers the resources it watches at its start and again only every 30 s, and
        # until then the pods of a deleted HyperPodPyTorchJob (or of any custom owner) stay,
        # as they never would on a cluster whose CRDs were installed long before.
        bootstrap.install_crds(admin, self.built, self._remaining(deadline))
        self._start_controllers()
        kueue_port = self._start_kueue()
        bootstrap.install_kueue_webhooks(admin, self.built["kueue"], kueue_port, self.pki.ca_pem)
        gates = self._start_karpenter()
        for name, probe in (("kueue", self._kueue_probe), ("karpenter", self._karpenter_probe)):
            wait_for(partial(_http_ok, probe), self._remaining(deadline), f"{name} was not ready")
        admin.apply(bootstrap.karpenter_deployment(gates), bootstrap.FIELD_MANAGER)
        wait_for(
            lambda: admin.get(bootstrap.SERVICE_ACCOUNTS, "default", "default"),
            self._remaining(deadline),
            "kube-controller-manager made no service accounts",
        )
        self._check_alive()

    def _start_authn(self) -> None:
        if self.settings.authenticate is None:
            return
        pair = self.pki.serving("token-authenticator", HOST, "localhost")
        self._authn = TokenReviewServer(HOST, pair, self.settings.authenticate)
        self._authn.start()
        webhook = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "eks-token-authenticator",
                    "cluster": {
                        "server": self._authn.url,
                        "certificate-authority": str(self.pki.ca),
                    },
                }
            ],
            "users": [{"name": "kube-apiserver", "user": {}}],
            "contexts": [
                {
                    "name": "webhook",
                    "context": {"cluster": "eks-token-authenticator", "user": "kube-apiserver"},
                }
            ],
            "current-context": "webhook",
        }
        (self.workdir / "authn-webhook.kubeconfig").write_text(yaml.safe_dump(webhook))

    def _start_apiserver(self, etcd_port: int) -> None:
        serving = self.pki.serving("kube-apiserver", HOST, SERVICE_IP, *bootstrap_names())
        accounts = self.pki.service_account_keys()
        self._service_account_keys = accounts
        args = [
            f"--etcd-servers=http://{HOST}:{etcd_port}",
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={self.port}",
            # The address is loopback: the `kubernetes` Service keeps no endpoints (nothing
            # runs inside the twin's cluster that would need them).
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.pki.ca}",
            "--authorization-mode=Node,RBAC",
            "--anonymous-auth=false",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={accounts.cert}",
            f"--service-account-signing-key-file={accounts.key}",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--allow-privileged=true",
            "--profiling=false",
            f"--default-not-ready-toleration-seconds={self.settings.timings.not_ready_toleration_s}",
            f"--default-unreachable-toleration-seconds={self.settings.timings.not_ready_toleration_s}",
            "--event-ttl=1h",
            # The kubelets are KWOK's one server (every node's InternalIP and kubelet port), whose
            # certificate the twin's CA signed.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={self.pki.ca}",
            # Who called what: every request of an identity from outside the cluster's own
            # components (HyperGuard's functions, its forwarder, a kubeconfig from `twin
            # kubeconfig`), one JSON line each (`requests()`).
            f"--audit-policy-file={self._audit_policy()}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        ]
        if self._authn is not None:
            webhook = self.workdir / "authn-webhook.kubeconfig"
            args += [
                f"--authentication-token-webhook-config-file={webhook}",
                "--authentication-token-webhook-version=v1",
                # EKS caches a token's answer; the twin's authenticator caches it too.
                "--authentication-token-webhook-cache-ttl=1m",
            ]
        self._spawn("kube-apiserver", self.built["kube"].binary, ["kube-apiserver", *args])

    def _audit_policy(self) -> Path:
        """Metadata level for every caller but the control plane's own (kcm, the scheduler,
        kube-system's controllers, the nodes and the system:masters add-ons): their requests
        are most of the traffic and none of HyperGuard's."""
        policy = {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [
                {
                    "level": "None",
                    "users": [
                        "system:kube-controller-manager",
                        "system:kube-scheduler",
                        "system:apiserver",
                    ],
                },
                {
                    "level": "None",
                    "userGroups": [
                        "system:masters",
                        "system:nodes",
                        "system:serviceaccounts:kube-system",
                    ],
                },
                {"level": "Metadata"},
            ],
        }
        path = self.workdir / "audit-policy.yaml"
        path.write_text(yaml.safe_dump(policy))
        return path

    def requests(self) -> list[dict[str, Any]]:
        """The requests the API server answered for callers outside the control plane, in
        order: `user`, `groups`, `verb`, `resource` (with `/subresource`), `namespace`,
        `name`, `code` (the HTTP status), `authorized` (False: RBAC refused it; a 403 from
        an admission check is authorized) and `at` (the audit event's stageTimestamp)."""
        out: list[dict[str, Any]] = []
        if not self.audit_log.exists():
            return out
        with self.audit_log.open() as lines:
            for line in lines:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line the server is still writing
                if event.get("stage") != "ResponseComplete":
                    continue
                ref = event.get("objectRef") or {}
                resource = ref.get("resource", "")
                if ref.get("subresource"):
                    resource = f"{resource}/{ref['subresource']}"
                user = event.get("user") or {}
                out.append(
                    {
                        "user": user.get("username"),
                        "groups": user.get("groups") or [],
                        "verb": event.get("verb"),
                        "resource": resource or event.get("requestURI"),
                        "namespace": ref.get("namespace"),
                        "name": ref.get("name"),
                        "code": (event.get("responseStatus") or {}).get("code"),
                        "authorized": (event.get("annotations") or {}).get(
                            "authorization.k8s.io/decision"
                        )
                        != "forbid",
                        "at": event.get("stageTimestamp"),
                    }
                )
        return out

    def _start_controllers(self) -> None:
        kube = self.built["kube"].binary
        kcm = self.kubeconfig(
            "kube-controller-manager",
            identity=self.pki.client("kube-controller-manager", "system:kube-controller-manager"),
        )
        self._spawn(
            "kube-controller-manager",
            kube,
            [
                "kube-controller-manager",
                f"--kubeconfig={kcm}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self._service_account_keys.key}",
                f"--root-ca-file={self.pki.ca}",
                "--secure-port=0",
                "--controllers=*",
                f"--node-monitor-grace-period={self.settings.timings.node_monitor_grace_s}s",
            ],
        )
        scheduler = self.kubeconfig(
            "kube-scheduler", identity=self.pki.client("kube-scheduler", "system:kube-scheduler")
        )
        self._spawn(
            "kube-scheduler",
            kube,
            [
                "kube-scheduler",
                f"--kubeconfig={scheduler}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
        )
        stages = Path(__file__).with_name("stages.yaml")
        kwok_config = self.workdir / "kwok.yaml"
        kwok_config.write_text(stages.read_text())
        kwok = self.kubeconfig("kwok", identity=self.pki.client("kwok", "kwok", "system:masters"))
        # The nodes' kubelet API (containerLogs: `kubectl logs`, the pods/log subresource) is
        # KWOK's server, over TLS with a certificate kube-apiserver checks; every node's
        # InternalIP and kubelet port point at it.
        kubelet = self.pki.serving("kwok-kubelet", HOST)
        self._spawn(
            "kwok",
            self.built["kwok"].binary,
            [
                f"--kubeconfig={kwok}",
                f"--config={kwok_config}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={bootstrap.KWOK_ANNOTATION}=fake",
                "--node-lease-duration-seconds=40",
                "--cidr=10.0.0.0/16",
                f"--node-ip={HOST}",
                f"--node-port={self.kubelet_port}",
                f"--server-address={HOST}:{self.kubelet_port}",
                f"--tls-cert-file={kubelet.cert}",
                f"--tls-private-key-file={kubelet.key}",
                "--enable-crds=Logs",
            ],
        )

    def _start_kueue(self) -> int:
        port, probe = free_port(), free_port()
        serving = self.pki.serving("kueue-webhook", HOST, "localhost")
        certs = self.workdir / "kueue-certs"
        certs.mkdir()
        shutil.copyfile(serving.cert, certs / "tls.crt")
        shutil.copyfile(serving.key, certs / "tls.key")
        config = self.workdir / "kueue.yaml"
        config.write_text(yaml.safe_dump(bootstrap.kueue_configuration(port, probe, certs)))
        kubeconfig = self.kubeconfig(
            "kueue", identity=self.pki.client("kueue", "kueue", "system:masters")
        )
        gates = {"VisibilityOnDemand": False, **self.settings.feature_gates.get("kueue", {})}
        self._spawn(
            "kueue",
            self.built["kueue"].binary,
            [f"--config={config}", f"--feature-gates={_gates(gates)}", "--zap-log-level=info"],
            env={"KUBECONFIG": str(kubeconfig), "KUEUE_METRICS_CERT_DIR": str(certs)},
        )
        self._kueue_probe = f"http://{HOST}:{probe}/readyz"
        return port

    def _start_karpenter(self) -> str:
        """Start Karpenter; the feature gates it runs with, as its flag takes them."""
        types = self.workdir / "instance-types.json"
        types.write_text(json.dumps(self.settings.instance_types))
        kubeconfig = self.kubeconfig(
            "karpenter", identity=self.pki.client("karpenter", "karpenter", "system:masters")
        )
        probe, metrics = free_port(), free_port()
        gates = {"NodeRepair": False, **self.settings.feature_gates.get("karpenter", {})}
        self._spawn(
            "karpenter",
            self.built["karpenter"].binary,
            [
                "--disable-leader-election",
                f"--health-probe-port={probe}",
                f"--metrics-port={metrics}",
                f"--batch-idle-duration={self.settings.timings.karpenter_batch_idle_s}s",
                f"--batch-max-duration={self.settings.timings.karpenter_batch_max_s}s",
                f"--feature-gates={_gates(gates)}",
                "--log-level=info",
            ],
            env={
                "KUBECONFIG": str(kubeconfig),
                "CLUSTER_NAME": self.settings.cluster_name,
                "TWIN_INSTANCE_TYPES_FILE": str(types),
                "SYSTEM_NAMESPACE": "kube-system",
                **self.settings.aws_env,
            },
        )
        self._karpenter_probe = f"http://{HOST}:{probe}/readyz"
        return _gates(gates)

    def _spawn(
        self, name: str, binary: Path, args: list[str], env: Mapping[str, str] | None = None
    ) -> None:
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(exist_ok=True)
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**_base_env(), **(env or {})},
                cwd=self.workdir,
                preexec_fn=_die_with_parent,
            )
        self.processes[name] = Process(name, popen, log)
        self.started_at[name] = time.monotonic()

    def _check_alive(self) -> None:
        for process in self.processes.values():
            if not process.alive():
                raise PlaneError(
                    f"{process.name} exited with {process.popen.returncode}:\n{process.tail()}"
                )

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()
        # A throwaway cluster: each component gets STOP_GRACE_S to exit on SIGTERM (and
        # flush its log), then is killed. Their graceful shutdowns (kube-apiserver draining
        # its watches, the controllers releasing their work queues) took 12 s a twin, for
        # state that is deleted right after.
        for process in reversed(list(self.processes.values())):
            if process.alive():
                process.popen.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for process in reversed(list(self.processes.values())):
            try:
                process.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait(timeout=5)
        if self._authn is not None:
            self._authn.stop()
        if os.environ.get("HYPERGUARD_TWIN_KEEP_PLANE"):
            (self.workdir / OWNER_FILE).unlink(missing_ok=True)  # kept: no later plane takes it
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ status

    def components(self) -> list[dict[str, Any]]:
        """Each upstream component as `hyperguard twin status` shows it."""
        out = []
        for name, process in self.processes.items():
            built = next(b for b in self.built.values() if name in b.component.runs_as)
            out.append(
                {
                    "name": name,
                    "version": built.version,
                    "module": built.component.module,
                    "emulated": False,
                    "running": process.alive(),
                    "rss_bytes": process.rss_bytes(),
                }
            )
        return out


def remove_abandoned_workdirs() -> list[Path]:
    """Delete the folders of planes whose process was killed before it could stop them (etcd's
    data and the logs: about 100 MB each); those of live processes, and any without an owner
    file yet (a plane starting this moment), stay."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            owner = int((folder / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if owner == os.getpid() or _alive(owner):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def bootstrap_names() -> tuple[str, ...]:
    from hyperguard_twin.plane.pki import APISERVER_NAMES

    return APISERVER_NAMES


def _gates(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


def _base_env() -> dict[str, str]:
    """What the components inherit: the path and locale, not the twin's AWS settings (each
    component is given what it needs)."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    return {k: v for k, v in os.environ.items() if k in keep}


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((HOST, port)) == 0


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False
