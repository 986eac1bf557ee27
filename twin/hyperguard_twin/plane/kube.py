"""A small JSON client of kube-apiserver for the twin's own controllers and set-up: the
HyperPod node lifecycle, the training operator, the instances' kubelets, bootstrapping.

Objects are plain dicts, as the API server sends them. Resources are found by discovery
(kind → plural, namespaced), so any manifest can be applied (server-side apply, the field
manager named per caller). Watches resume from the last resourceVersion and re-list on 410.
The service never uses this module: it reaches the cluster through its own adapters.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx2
import yaml

from hyperguard_twin.plane.pki import KeyPair

Obj = dict[str, Any]
_log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it (its wheels do): ten times the pure-Python
one's speed on the CRDs every plane installs."""


class KubeApiError(RuntimeError):
    """An API call the server refused: `code` is the HTTP status, `reason` the Status's."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class Resource:
    api_version: str
    plural: str
    namespaced: bool

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name)}"
        if subresource:
            base += f"/{subresource}"
        return base


def resource(api_version: str, plural: str, *, namespaced: bool = True) -> Resource:
    return Resource(api_version, plural, namespaced)


NODES = resource("v1", "nodes", namespaced=False)
PODS = resource("v1", "pods")
NAMESPACES = resource("v1", "namespaces", namespaced=False)
EVENTS = resource("v1", "events")
LEASES = resource("coordination.k8s.io/v1", "leases")
JOBS = resource("batch/v1", "jobs")
HYPERPOD_PYTORCH_JOBS = resource("sagemaker.amazonaws.com/v1", "hyperpodpytorchjobs")
NODECLAIMS = resource("karpenter.sh/v1", "nodeclaims", namespaced=False)
NODEPOOLS = resource("karpenter.sh/v1", "nodepools", namespaced=False)
EC2NODECLASSES = resource("karpenter.k8s.aws/v1", "ec2nodeclasses", namespaced=False)
WORKLOADS = resource("kueue.x-k8s.io/v1beta2", "workloads")
PRIORITY_CLASSES = resource("kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", namespaced=False)


def manifest_documents(path: Path) -> list[Obj]:
    """The non-empty documents of a YAML manifest file, safely loaded."""
    return [d for d in yaml.load_all(path.read_text(), Loader=_YAML_LOADER) if d]


class KubeClient:
    """Calls to one API server as one identity (a client certificate, or a bearer token)."""

    def __init__(
        self,
        endpoint: str,
        ca: Path,
        *,
        identity: KeyPair | None = None,
        token: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.endpoint = endpoint
        context = ssl.create_default_context(cafile=str(ca))
        if identity is not None:
            context.load_cert_chain(str(identity.cert), str(identity.key))
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx2.Client(
            base_url=endpoint,
            verify=context,
            headers=headers,
            timeout=timeout_s,
            trust_env=False,
        )
        self._context = context
        self._headers = headers
        self._kinds: dict[tuple[str, str], Resource] = {}
        self._kinds_lock = threading.Lock()

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ calls

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Obj:
        content = None
        if body is not None:
            # JSON for an apply too, as kubectl sends it: YAML's superset parses it, and
            # dumping the CRDs as YAML was a second of a twin's start.
            content = json.dumps(body)
        response = self._http.request(
            method,
            path,
            content=content,
            params=dict(params or {}),
            headers={"Content-Type": content_type} if content is not None else {},
        )
        if response.status_code >= 400:
            try:
                status = response.json()
            except ValueError:
                status = {"reason": response.reason_phrase, "message": response.text[:500]}
            raise KubeApiError(
                response.status_code, str(status.get("reason", "")), str(status.get("message", ""))
            )
        return dict(response.json()) if response.content else {}

    def ready(self) -> bool:
        """kube-apiserver's /readyz answers ok."""
        response = self._http.get("/readyz")
        return response.status_code == 200 and response.text.strip() == "ok"

    def get(self, rt: Resource, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self.request("GET", rt.path(namespace, name))
        except KubeApiError as error:
            if error.code == 404:
                return None
            raise

    def list_objects(
        self,
        rt: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        return self.list_with_version(
            rt, namespace, label_selector=label_selector, field_selector=field_selector
        )[0]

    def list_with_version(
        self,
        rt: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        params: dict[str, str] = {"limit": "500"}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        items: list[Obj] = []
        while True:
            page = self.request("GET", rt.path(namespace), params=params)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion", ""))
            params["continue"] = meta["continue"]

    def create(self, rt: Resource, obj: Obj, namespace: str | None = None) -> Obj:
        return self.request("POST", rt.path(namespace), obj)

    def patch(
        self,
        rt: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        content_type: str = MERGE,
    ) -> Obj:
        return self.request(
            "PATCH", rt.path(namespace, name, subresource), patch, content_type=content_type
        )

    def delete(
        self,
        rt: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str | None = None,
        grace_period_s: int | None = None,
    ) -> bool:
        """Delete; False when it was not there."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation:
            body["propagationPolicy"] = propagation
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        try:
            self.request("DELETE", rt.path(namespace, name), body)
        except KubeApiError as error:
            if error.code == 404:
                return False
            raise
        return True

    def delete_collection(
        self, rt: Resource, namespace: str | None = None, *, grace_period_s: int | None = None
    ) -> None:
        """Delete every object of a kind (in a namespace), as `kubectl delete --all`."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        self.request("DELETE", rt.path(namespace), body)

    # ------------------------------------------------------------------ manifests

    def resource_of(self, api_version: str, kind: str) -> Resource:
        """The resource a kind is served as (discovery, remembered)."""
        key = (api_version, kind)
        with self._kinds_lock:
            if key in self._kinds:
                return self._kinds[key]
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        for entry in self.request("GET", base).get("resources") or []:
            if entry.get("kind") == kind and "/" not in str(entry.get("name")):
                found = Resource(api_version, str(entry["name"]), bool(entry.get("namespaced")))
                with self._kinds_lock:
                    self._kinds[key] = found
                return found
        raise KubeApiError(404, "NotFound", f"{api_version} serves no kind {kind}")

    def apply(self, manifest: Obj, field_manager: str, *, force: bool = True) -> Obj:
        """Server-side apply of one manifest, as `kubectl apply --server-side` does."""
        rt = self.resource_of(str(manifest["apiVersion"]), str(manifest["kind"]))
        meta = manifest.get("metadata") or {}
        params = {"fieldManager": field_manager, "force": "true" if force else "false"}
        return self.request(
            "PATCH",
            rt.path(meta.get("namespace"), meta["name"]),
            manifest,
            content_type=APPLY,
            params=params,
        )

    def apply_file(self, path: Path, field_manager: str = "kubectl") -> None:
        """Every document of a manifest file, as `kubectl apply --server-side -f` does."""
        for document in manifest_documents(path):
            self.apply(document, field_manager)

    # ------------------------------------------------------------------ watches

    def watch(
        self,
        rt: Resource,
        on_event: Callable[[str, Obj], None],
        stop: threading.Event,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        on_relist: Callable[[list[Obj]], None] | None = None,
    ) -> None:
        """List, then watch from that version until `stop`: `on_relist` gets the whole list
        (at the start and after every 410), `on_event` every change after it."""
        version = ""
        while not stop.is_set():
            try:
                if not version:
                    items, version = self.list_with_version(
                        rt, namespace, label_selector=label_selector
                    )
                    if on_relist is not None:
                        on_relist(items)
                version = self._watch_once(rt, namespace, label_selector, version, on_event, stop)
            except KubeApiError as error:
                if error.code == 410:
                    version = ""
                    continue
                _log.warning("watch of %s failed: %s", rt.plural, error)
                stop.wait(0.5)
            except httpx2.HTTPError as error:
                if stop.is_set():
                    return
                _log.info("watch of %s broke (%s); resuming", rt.plural, error)
                stop.wait(0.2)

    def _watch_once(
        self,
        rt: Resource,
        namespace: str | None,
        label_selector: str | None,
        version: str,
        on_event: Callable[[str, Obj], None],
        stop: threading.Event,
    ) -> str:
        params = {
            "watch": "true",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "60",
        }
        if label_selector:
            params["labelSelector"] = label_selector
        with self._http.stream(
            "GET",
            rt.path(namespace) + "?" + urlencode(params),
            timeout=httpx2.Timeout(5.0, read=90.0),
        ) as response:
            if response.status_code >= 400:
                response.read()
                raise KubeApiError(
                    response.status_code, response.reason_phrase, response.text[:300]
                )
            for line in response.iter_lines():
                if stop.is_set():
                    break
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise KubeApiError(
                        int(obj.get("code") or 500), str(obj.get("reason")), str(obj.get("message"))
                    )
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind != "BOOKMARK":
                    on_event(str(kind), obj)
        return version


def start_watches(
    kube: KubeClient,
    name: str,
    watches: Iterable[tuple[Resource, Callable[[str, Obj], None], str | None]],
    stop: threading.Event,
) -> list[threading.Thread]:
    """One daemon thread per (resource, handler, label selector or None), named
    `name`-plural, each watching with `kube` until `stop`: a controller's watches."""
    threads = []
    for rt, on_event, label_selector in watches:
        thread = threading.Thread(
            target=kube.watch,
            args=(rt, on_event, stop),
            kwargs={"label_selector": label_selector},
            name=f"{name}-{rt.plural}",
            daemon=True,
        )
        thread.start()
        threads.append(thread)
    return threads


def wait_for(
    condition: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.1
) -> Any:
    """Poll `condition` until it returns something truthy; TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = condition()
        except (KubeApiError, httpx2.HTTPError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s:.0f} s")
        time.sleep(interval_s)
