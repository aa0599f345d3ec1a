"""The resource types the server serves: the core kinds a controller uses, plus every installed CRD.

A `ResourceType` holds what discovery publishes (kind, scope, verbs, short names, subresources) and what the
verbs need (the `scale` subresource's JSON paths, whether `status` is a subresource, printer columns).
`ResourceRegistry` builds the discovery documents (`/api`, `/api/v1`, `/apis`, `/apis/{group}[/{version}]`)
from what is installed, so a CRD file installed at run time (`install_crd`) is discoverable at once, as it is
on a real cluster.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dl2.core import InputError

_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML was built with it: the PyTorchJob CRD (640 KB) loads in 0.13 s instead of 1.1 s."""
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, slots=True)
class ScalePaths:
    """A CRD's `subresources.scale`: where the replica counts live in the object (dotted, no leading dot)."""

    spec_replicas: str
    status_replicas: str
    label_selector: str | None = None


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry: what `kubectl get` shows."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    status_subresource: bool = False
    """Writes to the main resource keep the stored status; `/status` writes change only status."""
    scale: ScalePaths | None = None
    extra_subresources: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Other subresources as (name, verbs), e.g. pods/binding."""
    printer_columns: tuple[PrinterColumn, ...] = ()
    custom: bool = False
    """Defined by a CRD (its objects keep any fields; strategic merge patch is refused)."""
    storage_key: tuple[str, str] = field(init=False, repr=False, compare=False)
    """(group, plural): the versions of one CRD share their objects, as in etcd."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "storage_key", (self.group, self.plural))

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def subresources(self) -> tuple[str, ...]:
        names = [name for name, _ in self.extra_subresources]
        if self.status_subresource:
            names.append("status")
        if self.scale is not None:
            names.append("scale")
        return tuple(names)

    @property
    def qualified(self) -> str:
        """`plural.group` as error messages and RBAC spell it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def discovery_entries(self) -> list[dict[str, Any]]:
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        if self.status_subresource:
            entries.append(self._sub_entry("status", self.kind, ("get", "patch", "update")))
        if self.scale is not None:
            entries.append(
                self._sub_entry("scale", "Scale", ("get", "patch", "update"), group="autoscaling", version="v1")
            )
        for name, verbs in self.extra_subresources:
            entries.append(self._sub_entry(name, self.kind if name != "binding" else "Binding", verbs))
        return entries

    def _sub_entry(
        self, name: str, kind: str, verbs: tuple[str, ...], group: str | None = None, version: str | None = None
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": f"{self.plural}/{name}",
            "singularName": "",
            "namespaced": self.namespaced,
            "kind": kind,
            "verbs": list(verbs),
        }
        if group is not None:
            entry["group"] = group
            entry["version"] = version
        return entry


def _core(plural: str, kind: str, namespaced: bool, short_names: tuple[str, ...] = (), **options: Any) -> ResourceType:
    return ResourceType("", "v1", plural, kind, namespaced, kind.lower(), short_names, **options)


CORE_RESOURCES: tuple[ResourceType, ...] = (
    _core("namespaces", "Namespace", False, ("ns",), status_subresource=True),
    _core("nodes", "Node", False, ("no",), status_subresource=True),
    _core(
        "pods",
        "Pod",
        True,
        ("po",),
        categories=("all",),
        status_subresource=True,
        extra_subresources=(("binding", ("create",)),),
    ),
    _core("events", "Event", True, ("ev",)),
    _core("configmaps", "ConfigMap", True, ("cm",)),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease"),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        "customresourcedefinition",
        ("crd", "crds"),
        status_subresource=True,
    ),
)
"""Core kinds a controller of training jobs uses: namespaces, nodes, pods (with `binding`), events, configmaps,
leases, and CRDs themselves (creating a CustomResourceDefinition object installs it)."""


def resource_types_from_crd(manifest: Mapping[str, Any], where: str = "CRD") -> list[ResourceType]:
    """One `ResourceType` per served version of a CustomResourceDefinition manifest."""
    try:
        spec = manifest["spec"]
        names = spec["names"]
        group, plural, kind = spec["group"], names["plural"], names["kind"]
        versions = spec["versions"]
    except (KeyError, TypeError) as error:
        raise InputError(where, f"not a CustomResourceDefinition: missing {error}") from None
    if manifest.get("kind") != "CustomResourceDefinition":
        raise InputError(where, f"expected kind CustomResourceDefinition, got {manifest.get('kind')!r}", field="kind")
    scope = spec.get("scope", "Namespaced")
    if scope not in ("Namespaced", "Cluster"):
        raise InputError(where, f"scope must be Namespaced or Cluster, got {scope!r}", field="spec.scope")
    types = []
    for version in versions:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        scale = subresources.get("scale")
        scale_paths = None
        if scale is not None:
            scale_paths = ScalePaths(
                _dotted(scale["specReplicasPath"]),
                _dotted(scale["statusReplicasPath"]),
                _dotted(scale["labelSelectorPath"]) if scale.get("labelSelectorPath") else None,
            )
        columns = tuple(
            PrinterColumn(c["name"], c["jsonPath"], c.get("type", "string"), int(c.get("priority", 0)))
            for c in version.get("additionalPrinterColumns") or ()
        )
        types.append(
            ResourceType(
                group,
                version["name"],
                plural,
                kind,
                scope == "Namespaced",
                names.get("singular") or kind.lower(),
                tuple(names.get("shortNames") or ()),
                tuple(names.get("categories") or ()),
                status_subresource="status" in subresources,
                scale=scale_paths,
                printer_columns=columns,
                custom=True,
            )
        )
    if not types:
        raise InputError(where, f"CRD {plural}.{group} serves no version", field="spec.versions")
    return types


def _dotted(json_path: str) -> str:
    return json_path[1:] if json_path.startswith(".") else json_path


def load_crd_manifests(path: Path) -> list[dict[str, Any]]:
    """The CustomResourceDefinition documents of a YAML file (a multi-document file may hold several)."""
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except OSError as error:
        raise InputError(str(path), f"cannot read ({error})") from None
    # a fresh copy of the parsed file each time (a server stores the manifests it installs)
    return [json.loads(text) for text in _parsed_crds(str(path), stamp)]


@functools.lru_cache(maxsize=16)
def _parsed_crds(path: str, stamp: int) -> tuple[str, ...]:
    """The CRDs of a file as JSON texts, parsed once per version of the file (every test server installs the
    same two large CRDs)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        documents = [doc for doc in yaml.load_all(text, Loader=_SAFE_LOADER) if doc is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise InputError(path, f"cannot read as YAML ({error})") from None
    crds = [doc for doc in documents if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"]
    if not crds:
        raise InputError(path, "no CustomResourceDefinition in the file")
    for doc in crds:
        resource_types_from_crd(doc, path)  # validate now: name the file
    return tuple(json.dumps(doc) for doc in crds)


class ResourceRegistry:
    """Installed resource types, by (group, version, plural), and the discovery documents built from them."""

    def __init__(self, types: Iterable[ResourceType] = CORE_RESOURCES) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for resource_type in types:
            self.install(resource_type)

    def install(self, resource_type: ResourceType) -> None:
        self._types[(resource_type.group, resource_type.version, resource_type.plural)] = resource_type

    def uninstall(self, group: str, plural: str) -> None:
        for key in [key for key in self._types if key[0] == group and key[2] == plural]:
            del self._types[key]

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(self._types.values())

    def groups(self) -> dict[str, list[str]]:
        """Non-core group -> its versions, in installation order (the first is the preferred one)."""
        groups: dict[str, list[str]] = {}
        for group, version, _ in self._types:
            if group:
                versions = groups.setdefault(group, [])
                if version not in versions:
                    versions.append(version)
        return groups

    def api_versions(self, server_address: str) -> dict[str, Any]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        }

    def api_group(self, group: str) -> dict[str, Any] | None:
        versions = self.groups().get(group)
        if not versions:
            return None
        entries = [{"groupVersion": f"{group}/{version}", "version": version} for version in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": entries,
            "preferredVersion": entries[0],
        }

    def api_group_list(self) -> dict[str, Any]:
        groups = [self.api_group(group) for group in self.groups()]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group for group in groups if group]}

    def api_resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        types = [t for (g, v, _), t in self._types.items() if g == group and v == version]
        if not types:
            return None
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": [entry for t in types for entry in t.discovery_entries()],
        }
