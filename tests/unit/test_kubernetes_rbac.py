"""Kubernetes RBAC per function (deploy/kubernetes/hyperguard-rbac.yaml) is exactly what each
function's code calls: a grant nothing uses, or a call nothing grants, fails.

The calls are derived from the code, in three steps:
1. the object each handler builds its ClusterGateway into (functions/<name>/app.py: the
   call `gateway_for(...)` is an argument of), and the gateway methods that object's module
   calls (`gateway.<method>(`);
2. the KubernetesAdapter methods each HyperPodEksGateway method reaches (`self.kubernetes.X`,
   through the gateway's own helpers and the modules it hands its adapter to);
3. the API requests each adapter method makes: ACCESS below, whose verbs are checked
   against the lightkube calls in the method's body (`self.client.<verb>`).
A new adapter method, or a function that starts calling one, fails here until ACCESS and
the RBAC file grant it (docs/security.md says how to add a grant)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from lightkube.core.resource import NamespacedResource

from hyperguard.cluster import kueue, prerequisites

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "shared"
RBAC = ROOT / "deploy" / "kubernetes" / "hyperguard-rbac.yaml"
FUNCTIONS = ("api", "burst", "ingest_health", "inventory", "recovery", "scheduler")

Grant = tuple[str, str, str, str]  # (apiGroup, resource, verb, where)
"""`where`: "cluster" (a ClusterRoleBinding), "team" (the RoleBinding the scheduler creates in
each team's namespace: hyperguard.cluster.kueue), "default" (a node's Events' namespace) or
"kube-system" (where Karpenter and the Node Termination Handler are installed, D148)."""
RUNS = ("batch", "jobs"), ("sagemaker.amazonaws.com", "hyperpodpytorchjobs")
RBAC_GROUP = "rbac.authorization.k8s.io"


def _on(group: str, resource: str, *verbs: str, where: str = "cluster") -> set[Grant]:
    return {(group, resource, verb, where) for verb in verbs}


def _on_runs(*verbs: str, where: str) -> set[Grant]:
    return {g for group, resource in RUNS for g in _on(group, resource, *verbs, where=where)}


NODES_BY_ID = _on("", "nodes", "get", "list")  # by name when known, else the list
NODE_EVENTS = NODES_BY_ID | _on(
    "", "events", "create", where="default"
)  # name and uid, then the Event
ACCESS: dict[str, set[Grant]] = {
    "list_nodes": _on("", "nodes", "list"),
    "find_node": NODES_BY_ID,
    "node_conditions": NODES_BY_ID,
    "node_name": NODES_BY_ID,
    "cordon": NODES_BY_ID | _on("", "nodes", "patch") | NODE_EVENTS,
    "uncordon": NODES_BY_ID | _on("", "nodes", "patch") | NODE_EVENTS,
    "node_event": NODE_EVENTS,
    "set_node_health_status": NODES_BY_ID | _on("", "nodes", "patch"),
    "mark_node": NODES_BY_ID | _on("", "nodes", "patch"),
    "drain": NODES_BY_ID | _on("", "pods", "list", "delete") | _on("", "pods/eviction", "create"),
    "create_run": _on_runs("create", where="team"),
    "create_service": _on("", "services", "create", where="team"),
    "dry_run_create": _on_runs("create", where="team"),
    "dry_run_pods": _on("", "podtemplates", "create", where="team"),
    "namespace_exists": _on("", "namespaces", "get"),
    "crd_versions": _on("apiextensions.k8s.io", "customresourcedefinitions", "get"),
    "list_nodepools": _on("karpenter.sh", "nodepools", "list"),
    "list_ec2nodeclasses": _on("karpenter.k8s.aws", "ec2nodeclasses", "list"),
    "replica_log": _on("", "pods", "list", where="team") | _on("", "pods/log", "get", where="team"),
    "list_runs": _on_runs("list", where="cluster"),
    "run_pods": _on("", "pods", "list", where="team"),
    "patch_run": _on_runs("patch", where="team"),
    "delete_run": _on_runs("delete", where="team"),
    "get_workload": _on("kueue.x-k8s.io", "workloads", "get", where="team"),
    "patch_workload_status": _on("kueue.x-k8s.io", "workloads/status", "patch", where="team"),
    "delete_nodeclaim": _on("karpenter.sh", "nodeclaims", "list", "delete"),
    "list_nodeclaims": _on("karpenter.sh", "nodeclaims", "list"),
    "get_nodepool": _on("karpenter.sh", "nodepools", "get"),
    "create_nodeclaim": _on("karpenter.sh", "nodeclaims", "create"),
    "delete_nodeclaim_named": _on("karpenter.sh", "nodeclaims", "delete"),
    "annotate_nodeclaim": _on("karpenter.sh", "nodeclaims", "patch"),
    "workloads": _on("apps", "deployments", "list", where="kube-system")
    | _on("apps", "daemonsets", "list", where="kube-system"),
}
"""What each public KubernetesAdapter method asks the API server for, and where."""
OBJECT_METHODS = {"get_object": "get", "create_object": "create", "patch_object": "patch"}
"""The adapter's generic methods, on whichever kind the caller names: hyperguard.cluster.kueue
is their one caller (checked below), so they reach the kinds it ensures."""
BOOTSTRAP = {(RBAC_GROUP, "rolebindings")}
"""What grants in a team's namespace, so cannot itself be granted there: it is written right
after the namespace is created, before any grant in it can exist."""


def _object_grant(resource: Any, verb: str) -> Grant:
    group, plural = resource._api_info.resource.group, resource._api_info.plural
    in_team = issubclass(resource, NamespacedResource) and (group, plural) not in BOOTSTRAP
    return group, plural, verb, "team" if in_team else "cluster"


ACCESS |= {
    method: {_object_grant(resource, verb) for resource in kueue._RESOURCES.values()}
    for method, verb in OBJECT_METHODS.items()
}
# A RoleBinding to a ClusterRole whose permissions its creator does not hold is refused unless
# the creator may `bind` that role (kube-apiserver's escalation check): creating the team's
# RoleBindings needs it, for exactly the roles they bind (checked below).
ACCESS["create_object"] |= _on(RBAC_GROUP, "clusterroles", "bind")
# HyperGuard marks its AdmissionCheck Active, as the check's controller (D170).
ACCESS["patch_object"] |= _on("kueue.x-k8s.io", "admissionchecks/status", "patch")
AUTHORIZING_VERBS = {"bind"}
LIGHTKUBE_VERBS = {"log": "get"}
"""lightkube calls whose RBAC verb has another name (`log` reads the pods/log subresource)."""
"""Verbs that authorize another call rather than being one."""

CLUSTER_WIDE_ON_PURPOSE: dict[tuple[str, str, str], str] = {
    **{
        grant[:3]: "drain evicts every pod on the node, whatever its namespace (kubectl drain)"
        for grant in _on("", "pods", "list", "delete") | _on("", "pods/eviction", "create")
    },
    **{
        grant[:3]: "a node's or a job's runs are found with one list across the teams' "
        "namespaces (read only; writing them is granted per team namespace)"
        for grant in _on_runs("list", where="cluster")
    },
    **{
        grant[:3]: "a team's RoleBindings are written right after its namespace is created, "
        "before anything can be granted in it; `bind` limits them to the in-team roles"
        for grant in _on(RBAC_GROUP, "rolebindings", "get", "create", "patch")
    },
}
"""Namespaced resources granted cluster-wide, and why; no other is."""
NAMESPACED = {
    "pods",
    "pods/eviction",
    "jobs",
    "hyperpodpytorchjobs",
    "localqueues",
    "workloads",
    "workloads/status",
    "events",
    "rolebindings",
    "deployments",
    "daemonsets",
}


def _source(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _module_path(module: str) -> Path:
    return LIBRARY / (module.replace(".", "/") + ".py")


def _is_gateway_for(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "gateway_for"
    )


def gateway_holders(function: str) -> list[Path]:
    """The modules of the classes the handler hands its ClusterGateway to: `gateway_for(...)`
    as an argument, or a name bound to it."""
    tree = _source(ROOT / "functions" / function / "app.py")
    imported = {
        alias.asname or alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    bound = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and _is_gateway_for(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    holders = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        arguments = [*call.args, *(k.value for k in call.keywords)]
        takes_gateway = any(
            _is_gateway_for(a) or (isinstance(a, ast.Name) and a.id in bound) for a in arguments
        )
        if takes_gateway and isinstance(call.func, ast.Name):
            holders.append(_module_path(imported[call.func.id]))
    assert holders, f"functions/{function}/app.py hands gateway_for(...) to nothing"
    return holders


def gateway_calls(function: str) -> set[str]:
    """The gateway methods the holders' modules call, and the modules of their own packages
    they import (the scheduler's service hands the gateway to its snapshot reader and
    applier)."""
    calls: set[str] = set()
    for holder in gateway_holders(function):
        package = holder.parent.relative_to(LIBRARY).as_posix().replace("/", ".")
        modules = {holder} | {
            _module_path(node.module)
            for node in ast.walk(_source(holder))
            if isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.rpartition(".")[0] == package
            and _module_path(node.module).is_file()
        }
        calls |= {
            call
            for module in modules
            for call in re.findall(r"\bgateway\.(\w+)\(", module.read_text())
        }
    return calls


def _methods(tree: ast.Module, class_name: str) -> dict[str, ast.FunctionDef]:
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def _self_attribute(node: ast.AST, *path: str) -> str | None:
    """`name` of `self.<path...>.name`, else None."""
    if not isinstance(node, ast.Attribute):
        return None
    inner: ast.AST = node.value
    for part in reversed(path):
        if not (isinstance(inner, ast.Attribute) and inner.attr == part):
            return None
        inner = inner.value
    return node.attr if isinstance(inner, ast.Name) and inner.id == "self" else None


def adapter_methods(gateway_method: str) -> set[str]:
    """KubernetesAdapter methods a HyperPodEksGateway method reaches."""
    path = _module_path("hyperguard.cluster.hyperpod_eks")
    tree = _source(path)
    methods = _methods(tree, "HyperPodEksGateway")
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    imported = {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    found: set[str] = set()
    seen: set[str] = set()
    todo: list[ast.FunctionDef] = [methods[gateway_method]]
    while todo:
        body = todo.pop()
        for node in ast.walk(body):
            if (name := _self_attribute(node, "kubernetes")) is not None:
                found.add(name)
            elif (name := _self_attribute(node)) in methods and name not in seen:
                seen.add(name)
                todo.append(methods[name])
            elif isinstance(node, ast.Name) and node.id in functions and node.id not in seen:
                seen.add(node.id)
                todo.append(functions[node.id])
            elif isinstance(node, ast.Call) and _hands_over_adapter(node):
                assert isinstance(node.func, ast.Name)
                helper = _module_path(imported[node.func.id]).read_text()
                found |= set(re.findall(r"\.kubernetes\.(\w+)\(", helper))
    return found & set(
        _methods(_source(_module_path("hyperguard.cluster.kubernetes")), "KubernetesAdapter")
    )


def _hands_over_adapter(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and any(
        _self_attribute(argument) == "kubernetes" for argument in call.args
    )


def required(function: str) -> set[Grant]:
    grants: set[Grant] = set()
    for method in sorted(gateway_calls(function)):
        for adapter_method in sorted(adapter_methods(method)):
            assert adapter_method in ACCESS, (
                f"{function} reaches KubernetesAdapter.{adapter_method} (through "
                f"gateway.{method}), which ACCESS does not map: map it and grant it"
            )
            grants |= ACCESS[adapter_method]
    return grants


def _documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(RBAC.read_text()) if d]


def _rules(role: dict[str, Any], where: str) -> Iterator[Grant]:
    for rule in role.get("rules") or []:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    yield group, resource, verb, where


def _group(function: str) -> str:
    return "hyperguard-" + function.replace("_", "-")


def _names(binding: dict[str, Any]) -> set[str]:
    return {s["name"] for s in binding.get("subjects") or [] if s["kind"] == "Group"}


def granted(function: str) -> set[Grant]:
    """What the function's own Kubernetes group is granted, by every binding naming it: the
    file's ClusterRoleBindings (cluster-wide) and RoleBindings (in `default`; in
    `kube-system`, where the other repairers are read), and the RoleBindings the scheduler
    creates in each team's namespace (kueue.team_objects)."""
    group = _group(function)
    documents = _documents()
    cluster_roles = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ClusterRole"}
    roles = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d
        for d in documents
        if d["kind"] == "Role"
    }
    team_bindings = [o for o in kueue.team_objects("any") if o["kind"] == "RoleBinding"]
    grants: set[Grant] = set()
    for binding in (d for d in documents if d["kind"] == "ClusterRoleBinding"):
        if group in _names(binding):
            grants |= set(_rules(cluster_roles[binding["roleRef"]["name"]], "cluster"))
    for binding in (d for d in documents if d["kind"] == "RoleBinding"):
        namespace = binding["metadata"]["namespace"]
        assert namespace in ("default", "kube-system"), (
            f"a RoleBinding in {namespace}: say where it grants"
        )
        if group in _names(binding):
            assert binding["roleRef"]["kind"] == "Role"
            role = roles[(namespace, binding["roleRef"]["name"])]
            grants |= set(_rules(role, namespace))
    for binding in team_bindings:
        if group in _names(binding):
            grants |= set(_rules(cluster_roles[binding["roleRef"]["name"]], "team"))
    return grants


def test_each_function_is_granted_exactly_what_its_code_calls_where_it_calls_it() -> None:
    for function in FUNCTIONS:
        given = granted(function)
        needed = required(function)
        assert given == needed, (
            function,
            "granted, never called (there):",
            sorted(given - needed),
            "called, never granted (there):",
            sorted(needed - given),
        )
        wide_on_namespaced = {g[:3] for g in given if g[3] == "cluster" and g[1] in NAMESPACED}
        assert wide_on_namespaced <= set(CLUSTER_WIDE_ON_PURPOSE), (
            function,
            sorted(wide_on_namespaced - set(CLUSTER_WIDE_ON_PURPOSE)),
        )


def test_the_in_team_roles_are_bound_only_in_team_namespaces_each_to_its_function() -> None:
    """A ClusterRoleBinding of an in-team role would grant it in every namespace; the
    scheduler may bind those roles (resourceNames) and no other, the API reads two CRDs, and
    no other rule names resources."""
    documents = _documents()
    team_bindings = [o for o in kueue.team_objects("any") if o["kind"] == "RoleBinding"]
    in_team = {b["roleRef"]["name"] for b in team_bindings}
    assert in_team == {kueue.in_team_role(f) for f in kueue.IN_TEAM_FUNCTIONS}
    for binding in team_bindings:
        function = binding["roleRef"]["name"].removeprefix("hyperguard-").removesuffix("-in-team")
        assert _names(binding) == {_group(function)}
        assert binding["metadata"]["name"] == _group(function)
    wide = {d["roleRef"]["name"] for d in documents if d["kind"] == "ClusterRoleBinding"}
    assert not wide & in_team
    named = [
        (d["metadata"]["name"], rule)
        for d in documents
        if d["kind"] in ("ClusterRole", "Role")
        for rule in d.get("rules") or []
        if rule.get("resourceNames")
    ]
    assert named == [
        (
            "hyperguard-api",  # reads the served versions of these two CRDs, no other
            {
                "apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions"],
                "verbs": ["get"],
                "resourceNames": [prerequisites.KUEUE_CRD, prerequisites.OPERATOR_CRD],
            },
        ),
        (
            "hyperguard-scheduler",
            {
                "apiGroups": [RBAC_GROUP],
                "resources": ["clusterroles"],
                "verbs": ["bind"],
                "resourceNames": sorted(in_team, reverse=True),
            },
        ),
    ]


def test_access_says_what_the_adapter_methods_ask_for() -> None:
    """The verbs in ACCESS are the lightkube calls each adapter method makes (through its
    helpers), and every public method of the adapter is mapped."""
    path = _module_path("hyperguard.cluster.kubernetes")
    methods = _methods(_source(path), "KubernetesAdapter")
    public = {m for m in methods if not m.startswith("_") and m not in ("client", "token")}
    assert public == set(ACCESS), sorted(public ^ set(ACCESS))
    callers = {
        path.relative_to(LIBRARY).as_posix()
        for path in (LIBRARY / "hyperguard").rglob("*.py")
        if "twin" not in path.parts
        # S3's GetObject (`self.s3.get_object`) shares a name, not the adapter
        and re.search(r"(?<!s3)\.(" + "|".join(OBJECT_METHODS) + r")\(", path.read_text())
    }
    assert callers == {"hyperguard/cluster/kueue.py"}, callers
    for name, grants in ACCESS.items():
        verbs: set[str] = set()
        todo, seen = [methods[name]], {name}
        while todo:
            for node in ast.walk(todo.pop()):
                if (verb := _self_attribute(node, "client")) is not None:
                    verbs.add(LIGHTKUBE_VERBS.get(verb, verb))
                elif (helper := _self_attribute(node)) in methods and helper not in seen:
                    seen.add(helper)
                    todo.append(methods[helper])
        asked = {verb for _, _, verb, _ in grants} - AUTHORIZING_VERBS
        assert verbs == asked, (name, sorted(verbs))


def test_every_function_has_its_own_group_in_the_template() -> None:
    template = (ROOT / "template.yaml").read_text()
    for function in FUNCTIONS:
        assert f"KubernetesGroups: [hyperguard-{function.replace('_', '-')}]" in template
