"""The upstream components the twin's Kubernetes runs, built from their Go modules.

Each component is a small Go module under `twin/components/<name>` whose go.mod pins the
upstream module and whose go.sum holds the checksums of everything it builds from: that
folder is the one place a version is set. `ensure_built` builds each into a cache outside
the repository, keyed by a digest of the wrapper's files, the Go toolchain that builds it
and the platform, so a component is rebuilt only when its pin (or the toolchain) changes.
Go's own module and build caches make a rebuild after a small change fast.

The cache is `$HYPERGUARD_COMPONENTS_CACHE`, else `$XDG_CACHE_HOME/hyperguard/components`,
else `~/.cache/hyperguard/components`. Each build lands in `<name>-<key>/`: `bin/<binary>`,
the manifests the twin applies from the same module (`manifests/`), and `build.json` (module,
version, Go, seconds, size). A build is written to a temporary folder and renamed into place,
so a cache entry is complete or absent.

`python -m hyperguard_twin.plane.components` builds every component, with progress on
stderr (`make components`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WRAPPERS = Path("twin") / "components"
CACHE_ENV = "HYPERGUARD_COMPONENTS_CACHE"
BUILD_FORMAT = 1
"""Bump when what a cache entry holds changes shape: every component is built again."""

Progress = Callable[[str], None]


class ComponentBuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class SourcePatch:
    """One literal of an upstream file replaced at build time (`go build -overlay`): the
    upstream module is built as published except for this. The build fails when `old` is not
    in the file exactly once (a new version moved it: look again)."""

    module: str
    path: str
    old: str
    new: str
    why: str


@dataclass(frozen=True)
class Component:
    """One binary built from one wrapper module.

    `package` is what `go build` builds ("." for the wrapper's own main); `module` the
    upstream module whose version the wrapper pins (shown as the component's version and set
    into `version_vars` at link time, where the upstream build sets it); `runs_as` the
    control-plane components the binary is started as; `manifests` (module, path in the
    module, name under manifests/) the files the twin applies from the same module.
    """

    name: str
    package: str
    module: str
    runs_as: tuple[str, ...]
    version_vars: tuple[str, ...] = ()
    manifests: tuple[tuple[str, str, str], ...] = ()
    patches: tuple[SourcePatch, ...] = ()

    @property
    def binary(self) -> str:
        return self.name


_KUBE_VERSION_VARS = tuple(
    f"{package}.{var}"
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
    for var in ("gitVersion", "gitMajor", "gitMinor", "gitTreeState")
)
KUEUE_MODULE = "sigs.k8s.io/kueue"
AWS_PROVIDER_MODULE = "github.com/aws/karpenter-provider-aws"

COMPONENTS: tuple[Component, ...] = (
    Component(
        "kube",
        ".",
        "k8s.io/kubernetes",
        ("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
        _KUBE_VERSION_VARS,
    ),
    Component("etcd", ".", "go.etcd.io/etcd/server/v3", ("etcd",)),
    Component(
        "kwok",
        "sigs.k8s.io/kwok/cmd/kwok",
        "sigs.k8s.io/kwok",
        ("kwok",),
        # Logs: where a simulated container's log file is, per pod (the kubelet's
        # containerLogs endpoint KWOK serves, which `kubectl logs` reaches).
        manifests=(
            ("sigs.k8s.io/kwok", "kustomize/crd/bases/kwok.x-k8s.io_logs.yaml", "logs-crd.yaml"),
        ),
    ),
    Component(
        "kueue",
        "sigs.k8s.io/kueue/cmd/kueue",
        KUEUE_MODULE,
        ("kueue",),
        ("sigs.k8s.io/kueue/pkg/version.GitVersion",),
        (
            (KUEUE_MODULE, "config/components/crd/bases", "crds"),
            (KUEUE_MODULE, "config/components/webhook/manifests.yaml", "webhooks.yaml"),
        ),
        (
            SourcePatch(
                KUEUE_MODULE,
                "cmd/kueue/main.go",
                'metricsCertPath := "/etc/kueue/metrics/certs"',
                'metricsCertPath := func() string { if dir := os.Getenv("KUEUE_METRICS_CERT_DIR"); '
                'dir != "" { return dir }; return "/etc/kueue/metrics/certs" }()',
                "with its internal certificate management off, Kueue reads the metrics server's "
                "certificate from /etc/kueue/metrics/certs and exits when it is not there; a Kueue "
                "out of the cluster has no such folder (it would need root to write one), so the "
                "folder comes from KUEUE_METRICS_CERT_DIR when that is set",
            ),
        ),
    ),
    Component(
        "karpenter",
        ".",
        "sigs.k8s.io/karpenter",
        ("karpenter",),
        ("sigs.k8s.io/karpenter/pkg/operator.Version",),
        ((AWS_PROVIDER_MODULE, "pkg/apis/crds", "crds"),),
    ),
)


@dataclass
class Built:
    """A component in the cache."""

    component: Component
    path: Path
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def binary(self) -> Path:
        return self.path / "bin" / self.component.binary

    @property
    def manifests(self) -> Path:
        return self.path / "manifests"

    @property
    def version(self) -> str:
        return str(self.info.get("version", ""))


def cache_root() -> Path:
    if configured := os.environ.get(CACHE_ENV):
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hyperguard" / "components"


def _go(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            ["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
    except FileNotFoundError as error:
        raise ComponentBuildError(
            "the Go toolchain (go) is not on PATH: the twin builds Kubernetes from Go modules "
            "(Go 1.26 or newer; go.dev/doc/install)"
        ) from error
    if done.returncode != 0:
        raise ComponentBuildError(f"go {' '.join(args)} in {cwd} failed:\n{done.stderr.strip()}")
    return done.stdout


def go_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a build runs in: the toolchain the wrapper's go.mod asks for
    (GOTOOLCHAIN=auto fetches a newer one from the module proxy when the machine's is
    older), read-only go.mod and go.sum (a build never changes a pin), no cgo."""
    env = dict(base if base is not None else os.environ)
    env |= {"GOTOOLCHAIN": "auto", "GOFLAGS": "-mod=readonly -buildvcs=false", "CGO_ENABLED": "0"}
    return env


def pinned_version(wrapper: Path, module: str) -> str:
    """The version of `module` the wrapper's go.mod requires."""
    text = (wrapper / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if match is None:
        raise ComponentBuildError(f"{wrapper / 'go.mod'} does not require {module}")
    return match.group(1)


def _wrapper_files(wrapper: Path) -> list[Path]:
    return sorted(
        p for p in wrapper.rglob("*") if p.is_file() and p.suffix in {".go", ".mod", ".sum"}
    )


def cache_key(wrapper: Path, go_version: str, component: Component) -> str:
    """What the cached build is made of: the Go version, the machine, the component's source
    patches, the manifests it copies, and the wrapper module (its pins)."""
    digest = hashlib.sha256(f"{BUILD_FORMAT}\n{go_version}\n{platform.machine()}\n".encode())
    for patch in component.patches:
        digest.update(f"{patch.module}\0{patch.path}\0{patch.old}\0{patch.new}\0".encode())
    for module, source, name in component.manifests:
        digest.update(f"{module}\0{source}\0{name}\0".encode())
    for path in _wrapper_files(wrapper):
        digest.update(path.relative_to(wrapper).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _version_flags(component: Component, version: str) -> list[str]:
    values = {"gitTreeState": "clean"}
    if match := re.match(r"v(\d+)\.(\d+)", version):
        values |= {"gitMajor": match.group(1), "gitMinor": match.group(2)}
    flags = []
    for target in component.version_vars:
        var = target.rsplit(".", 1)[1]
        flags.append(f"-X '{target}={values.get(var, version)}'")
    return flags


def _module_dir(module: str, wrapper: Path, env: dict[str, str]) -> Path:
    directory = _go(["list", "-m", "-f", "{{.Dir}}", module], wrapper, env).strip()
    if not directory:
        _go(["mod", "download", module], wrapper, env)
        directory = _go(["list", "-m", "-f", "{{.Dir}}", module], wrapper, env).strip()
    return Path(directory)


def _patched_main(component: Component, wrapper: Path, env: dict[str, str], into: Path) -> Path:
    """A module to build the component's main package from: the wrapper's go.mod and
    go.sum (the same pins and checksums) with the upstream main package's files, the source
    patches applied. Go does not let a build replace files in its module cache
    (`-overlay`), so the main package is built from this copy; every other package comes
    from the module cache as published."""
    upstream = _module_dir(component.module, wrapper, env) / component.package.removeprefix(
        component.module + "/"
    )
    into.mkdir(parents=True)
    for name in ("go.mod", "go.sum"):
        shutil.copyfile(wrapper / name, into / name)
    for source in upstream.glob("*.go"):
        if not source.name.endswith("_test.go"):
            (into / source.name).write_text(source.read_text())
    for patch in component.patches:
        target = into / Path(patch.path).name
        text = target.read_text() if target.is_file() else ""
        if (
            Path(patch.path).parent != Path(component.package.removeprefix(component.module + "/"))
            or text.count(patch.old) != 1
        ):
            raise ComponentBuildError(
                f"{patch.module}/{patch.path} no longer holds {patch.old!r} once in the main "
                f"package: the twin's patch of {component.name} must be looked at again "
                f"({patch.why})"
            )
        target.write_text(text.replace(patch.old, patch.new))
    for path in into.iterdir():
        path.chmod(0o644)
    return into


def _copy_manifests(component: Component, wrapper: Path, env: dict[str, str], into: Path) -> None:
    for module, source, name in component.manifests:
        found = _module_dir(module, wrapper, env) / source
        target = into / name
        if found.is_dir():
            shutil.copytree(found, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found, target)
        for path in [target, *target.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)  # module cache files are read-only


def lookup(root: Path, component: Component) -> tuple[Path, str, str, dict[str, str]]:
    """Where `component` is (or would be) cached: (path, version, go version, build env)."""
    wrapper = root / WRAPPERS / component.name
    env = go_env()
    go_version = _go(["env", "GOVERSION"], wrapper, env).strip()
    path = cache_root() / f"{component.name}-{cache_key(wrapper, go_version, component)}"
    return path, pinned_version(wrapper, component.module), go_version, env


def build(root: Path, component: Component, progress: Progress) -> Built:
    """The component from the cache, built first if its key is not there."""
    path, version, go_version, env = lookup(root, component)
    if (path / "build.json").is_file():
        return Built(component, path, json.loads((path / "build.json").read_text()))
    wrapper = root / WRAPPERS / component.name
    progress(f"building {component.name} ({component.module} {version}, {go_version}) ...")
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{component.name}-", dir=path.parent))
    try:
        ldflags = " ".join(["-s", "-w", *_version_flags(component, version)])
        output = staging / "bin" / component.binary
        package, directory = component.package, wrapper
        if component.patches:
            package, directory = ".", _patched_main(component, wrapper, env, staging / "src")
        _go(
            ["build", "-trimpath", "-ldflags", ldflags, "-o", str(output), package],
            directory,
            env,
        )
        shutil.rmtree(staging / "src", ignore_errors=True)
        _copy_manifests(component, wrapper, env, staging / "manifests")
        info = {
            "component": component.name,
            "module": component.module,
            "version": version,
            "go": go_version,
            "runs_as": list(component.runs_as),
            "build_seconds": round(time.monotonic() - started, 1),
            "binary_bytes": output.stat().st_size,
            "patches": [patch.why for patch in component.patches],
        }
        (staging / "build.json").write_text(json.dumps(info, indent=2) + "\n")
        try:
            staging.rename(path)
        except OSError:  # another build of the same key finished first: keep that one
            if not (path / "build.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress(f"built {component.name} in {info['build_seconds']:.0f} s")
    return Built(component, path, json.loads((path / "build.json").read_text()))


def ensure_built(
    root: Path, progress: Progress | None = None, only: Iterable[str] | None = None
) -> dict[str, Built]:
    """Every component (or those named in `only`), from the cache or built now."""
    report = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    wanted = set(only) if only is not None else None
    return {
        c.name: build(root, c, report) for c in COMPONENTS if wanted is None or c.name in wanted
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path.cwd()
    started = time.monotonic()
    try:
        built = ensure_built(root)
    except ComponentBuildError as error:
        print(f"hyperguard: {error}", file=sys.stderr)
        return 1
    for item in built.values():
        print(
            f"{item.component.name:<10} {item.info['module']} {item.version}  {item.binary}",
            file=sys.stderr,
        )
    print(f"components ready in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
