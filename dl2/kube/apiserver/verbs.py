"""The API verbs on stored objects, with the semantics of a real API server.

- create: 201 with `uid`, `creationTimestamp`, `generation: 1`, `resourceVersion`; `generateName` draws a
  suffix; the namespace must exist; 409 AlreadyExists.
- update (PUT) and patch (merge, JSON, strategic merge for core kinds; 415 for strategic merge on CRDs): a
  stale `metadata.resourceVersion` in the body gets 409 Conflict; server-managed metadata is kept;
  `generation` grows when anything outside `metadata` and `status` changes; a write that changes nothing
  is not stored (no new resource version, no event), as etcd's guaranteed update skips it.
- status subresource: writes to the main resource keep the stored status, writes to `/status` change only
  status (and never `generation`).
- scale subresource (CRDs that declare one): an `autoscaling/v1 Scale` read from and written to the CRD's
  `specReplicasPath`/`statusReplicasPath`/`labelSelectorPath`.
- delete: with finalizers the object only gets a `deletionTimestamp` and goes when its finalizers are removed;
  preconditions (uid, resourceVersion) are checked; deleting a namespace deletes what it holds.
- `pods/binding`: sets `spec.nodeName` once (409 if the pod is bound).

These are the operations the HTTP handler serves and the simulated cluster calls in-process (so its writes
produce the same events and versions as a client's).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dl2.kube.apiserver import errors
from dl2.kube.apiserver.errors import ApiError
from dl2.kube.apiserver.patches import json_patch, merge_patch, strategic_merge_patch
from dl2.kube.apiserver.resources import ResourceRegistry, ResourceType, resource_types_from_crd
from dl2.kube.apiserver.selectors import FieldSelector, LabelSelector
from dl2.kube.apiserver.store import ObjectStore, Stored

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = (MERGE_PATCH, JSON_PATCH, STRATEGIC_MERGE_PATCH)

_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The alphabet Kubernetes draws `generateName` suffixes from (no vowels, no confusable characters)."""
_SERVER_METADATA = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds")
_NAMESPACES_KEY = ("", "namespaces")


def utc_now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class ListResult:
    items: list[Stored]
    rv: int
    continue_token: str | None = None
    remaining: int | None = None


def nested(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def with_nested(obj: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of `obj` with `value` at the dotted path (intermediate objects created; other branches shared)."""
    head, _, rest = dotted.partition(".")
    if not rest:
        return {**obj, head: value}
    child = obj.get(head)
    return {**obj, head: with_nested(child if isinstance(child, dict) else {}, rest, value)}


def _content(raw: dict[str, Any]) -> dict[str, Any]:
    """What `generation` tracks: everything but metadata and status."""
    return {key: value for key, value in raw.items() if key not in ("metadata", "status")}


def _without_rv(raw: dict[str, Any]) -> dict[str, Any]:
    metadata = {key: value for key, value in raw.get("metadata", {}).items() if key != "resourceVersion"}
    return {**raw, "metadata": metadata}


class Verbs:
    """Kubernetes write and read semantics over an `ObjectStore` (see the module docstring)."""

    def __init__(
        self, registry: ResourceRegistry, store: ObjectStore, seed: int = 0, now: Callable[[], str] = utc_now
    ) -> None:
        self.registry = registry
        self.store = store
        self.now = now
        self._rng = random.Random(seed)
        namespaces = registry.lookup("", "v1", "namespaces")
        if namespaces is None:
            raise KeyError("the registry must serve v1/namespaces")
        self.namespaces = namespaces

    # -- reads ----------------------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Stored:
        stored = self.store.get(rt, self._scope(rt, namespace), name)
        if stored is None:
            raise errors.not_found(rt.plural, rt.group, name)
        return stored

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListResult:
        """Objects in key order; `limit` pages them (a `continue` token resumes after the last key; the pages come
        from the current state, not from a snapshot at the first page's version)."""
        labels = labels or LabelSelector()
        fields = fields or FieldSelector()
        scope = None if not rt.namespaced else namespace
        start: tuple[str, str] | None = None
        if continue_token:
            start = self._decode_continue(rt, continue_token)
        name = fields.value_of("metadata.name")
        if name is not None and start is None and (scope is not None or not rt.namespaced):
            found = self.store.get(rt, scope or "", name)  # one object: no scan (leader election, named watches)
            candidates = [found] if found is not None else []
        else:
            candidates = self.store.scan(rt, scope)
        items = [
            stored
            for stored in candidates
            if (start is None or stored.key > start)
            and labels.matches(stored.raw["metadata"].get("labels"))
            and fields.matches(stored.raw)
        ]
        rv = self.store.rv
        if limit is not None and limit > 0 and len(items) > limit:
            remaining = len(items) - limit
            items = items[:limit]
            token = base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": list(items[-1].key)}).encode()).decode()
            return ListResult(items, rv, token, remaining)
        return ListResult(items, rv)

    def _decode_continue(self, rt: ResourceType, token: str) -> tuple[str, str]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            rv, (namespace, name) = int(data["rv"]), data["start"]
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise errors.bad_request(f"invalid continue token {token!r}") from None
        if rv < self.store.bucket(rt).window_start:
            raise errors.expired(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter."
            )
        return str(namespace), str(name)

    def _scope(self, rt: ResourceType, namespace: str | None) -> str:
        if not rt.namespaced:
            return ""
        if not namespace:
            raise errors.bad_request(f"{rt.qualified} is namespaced: the request needs a namespace")
        return namespace

    # -- create ---------------------------------------------------------------------------------------------

    def create(self, rt: ResourceType, namespace: str | None, body: Any) -> Stored:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of a create must be a JSON object")
        metadata = body.get("metadata")
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            raise errors.bad_request("metadata must be an object")
        scope = self._scope(rt, namespace)
        if rt.namespaced and metadata.get("namespace") not in (None, "", scope):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        name = metadata.get("name") or ""
        if not name:
            prefix = metadata.get("generateName") or ""
            if not prefix:
                raise errors.invalid(rt.kind, "", "metadata.name: Required value: name or generateName is required")
            name = prefix + "".join(self._rng.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))
        _check_name(rt, name)
        if rt.namespaced and self.store.get(self.namespaces, "", scope) is None:
            raise ApiError(404, "NotFound", f'namespaces "{scope}" not found', {"name": scope, "kind": "namespaces"})
        if self.store.get(rt, scope, name) is not None:
            raise errors.already_exists(rt.plural, rt.group, name)
        new_metadata = {
            key: value for key, value in metadata.items() if key not in ("resourceVersion", *_SERVER_METADATA)
        }
        new_metadata["name"] = name
        if rt.namespaced:
            new_metadata["namespace"] = scope
        new_metadata["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        new_metadata["creationTimestamp"] = self.now()
        new_metadata["generation"] = 1
        raw = {**body, "apiVersion": rt.api_version, "kind": rt.kind, "metadata": new_metadata}
        if rt.status_subresource and rt.custom:
            raw.pop("status", None)  # a CR's status is written through /status only
        if rt.storage_key == _NAMESPACES_KEY:
            raw["status"] = {"phase": "Active"}
        stored = self.store.put(rt, raw, "ADDED", None)
        if rt.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            stored = self._establish(rt, stored)
        return stored

    # -- update and patch -----------------------------------------------------------------------------------

    def replace(
        self, rt: ResourceType, namespace: str | None, name: str, body: Any, subresource: str | None = None
    ) -> Stored:
        """PUT: the whole object (or, with `subresource='status'`, its status)."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of an update must be a JSON object")
        current = self.get(rt, namespace, name)
        metadata = body.get("metadata") or {}
        if metadata.get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({metadata.get('name')}) does not match the name on the URL ({name})"
            )
        self._check_precondition(rt, current, metadata.get("resourceVersion"))
        return self._commit(rt, current, body, subresource)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        subresource: str | None = None,
    ) -> Stored:
        current = self.get(rt, namespace, name)
        patched = self._apply_patch(rt, current.raw, patch_type, patch)
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch does not leave an object")
        metadata = patched.get("metadata")
        self._check_precondition(rt, current, metadata.get("resourceVersion") if isinstance(metadata, dict) else None)
        return self._commit(rt, current, patched, subresource)

    def _apply_patch(self, rt: ResourceType, raw: dict[str, Any], patch_type: str, patch: Any) -> Any:
        if patch_type == MERGE_PATCH:
            if not isinstance(patch, dict):
                raise errors.bad_request("a merge patch must be a JSON object")
            return merge_patch(raw, patch)
        if patch_type == JSON_PATCH:
            return json_patch(raw, patch)
        if patch_type == STRATEGIC_MERGE_PATCH:
            if rt.custom:
                raise errors.unsupported_media_type(patch_type)  # as a real API server answers for CRDs
            if not isinstance(patch, dict):
                raise errors.bad_request("a strategic merge patch must be a JSON object")
            return strategic_merge_patch(raw, patch)
        raise errors.unsupported_media_type(patch_type)

    def _check_precondition(self, rt: ResourceType, current: Stored, sent: Any) -> None:
        if sent not in (None, "") and str(sent) != current.raw["metadata"]["resourceVersion"]:
            raise errors.conflict(rt.plural, rt.group, current.raw["metadata"]["name"])

    def _commit(self, rt: ResourceType, current: Stored, body: dict[str, Any], subresource: str | None) -> Stored:
        old = current.raw
        old_metadata = old["metadata"]
        if subresource == "status":
            if not rt.status_subresource:
                raise errors.not_found(f"{rt.plural}/status", rt.group, old_metadata["name"])
            raw = {**old}
            if "status" in body:
                raw["status"] = body["status"]
            else:
                raw.pop("status", None)
            raw["metadata"] = old_metadata
        elif subresource is not None:
            raise errors.method_not_allowed(f"{rt.plural}/{subresource} does not accept updates")
        else:
            metadata = body.get("metadata") or {}
            if not isinstance(metadata, dict):
                raise errors.bad_request("metadata must be an object")
            new_metadata = {
                **{key: value for key, value in metadata.items() if key not in _SERVER_METADATA},
                **{key: old_metadata[key] for key in (*_SERVER_METADATA, "name", "namespace") if key in old_metadata},
            }
            raw = {**body, "apiVersion": rt.api_version, "kind": rt.kind, "metadata": new_metadata}
            if rt.status_subresource:
                if "status" in old:
                    raw["status"] = old["status"]
                else:
                    raw.pop("status", None)
            if _content(raw) != _content(old):
                new_metadata["generation"] = int(old_metadata.get("generation") or 1) + 1
        if _without_rv(raw) == _without_rv(old):
            return current  # nothing changed: no new version, no event
        deleting = raw["metadata"].get("deletionTimestamp") and not raw["metadata"].get("finalizers")
        stored = self.store.put(rt, raw, "MODIFIED", current)
        if deleting:
            return self.store.remove(rt, stored)
        if rt.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions") and subresource is None:
            stored = self._establish(rt, stored)
        return stored

    # -- delete ---------------------------------------------------------------------------------------------

    def delete(self, rt: ResourceType, namespace: str | None, name: str, options: Any = None) -> Stored:
        current = self.get(rt, namespace, name)
        preconditions = options.get("preconditions") if isinstance(options, dict) else None
        if isinstance(preconditions, dict):
            metadata = current.raw["metadata"]
            uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
            if (uid and uid != metadata.get("uid")) or (rv and rv != metadata["resourceVersion"]):
                raise errors.conflict(rt.plural, rt.group, name)
        metadata = current.raw["metadata"]
        if metadata.get("finalizers"):
            if metadata.get("deletionTimestamp"):
                return current
            marked = {
                **current.raw,
                "metadata": {**metadata, "deletionTimestamp": self.now(), "deletionGracePeriodSeconds": 0},
            }
            return self.store.put(rt, marked, "MODIFIED", current)
        if rt.storage_key == _NAMESPACES_KEY:
            self._empty_namespace(name)
        if rt.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._uninstall(current.raw)
        return self.store.remove(rt, current)

    def delete_collection(
        self, rt: ResourceType, namespace: str | None, labels: LabelSelector, fields: FieldSelector
    ) -> list[Stored]:
        listed = self.list_objects(rt, namespace, labels, fields).items
        return [
            self.delete(rt, stored.raw["metadata"].get("namespace"), stored.raw["metadata"]["name"])
            for stored in listed
        ]

    def _empty_namespace(self, namespace: str) -> None:
        by_key = {t.storage_key: t for t in self.registry}
        for storage_key, key in list(self.store.namespaces_in_use(namespace)):
            rt = by_key.get(storage_key)
            stored = self.store.get(rt, *key) if rt is not None else None
            if rt is not None and stored is not None:
                self.store.remove(rt, stored)

    # -- subresources ---------------------------------------------------------------------------------------

    def scale(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        return self._scale_of(rt, self.get(rt, namespace, name))

    def _scale_of(self, rt: ResourceType, stored: Stored) -> dict[str, Any]:
        paths = self._scale_paths(rt, stored.raw["metadata"]["name"])
        raw = stored.raw
        metadata = raw["metadata"]
        status: dict[str, Any] = {"replicas": int(nested(raw, paths.status_replicas) or 0)}
        if paths.label_selector is not None:
            selector = nested(raw, paths.label_selector)
            if selector:
                status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                key: metadata[key]
                for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if key in metadata
            },
            "spec": {"replicas": int(nested(raw, paths.spec_replicas) or 0)},
            "status": status,
        }

    def _scale_paths(self, rt: ResourceType, name: str) -> Any:
        if rt.scale is None:
            raise errors.not_found(f"{rt.plural}/scale", rt.group, name)
        return rt.scale

    def replace_scale(self, rt: ResourceType, namespace: str | None, name: str, body: Any) -> dict[str, Any]:
        current = self.get(rt, namespace, name)
        paths = self._scale_paths(rt, name)
        replicas = nested(body, "spec.replicas") if isinstance(body, dict) else None
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise errors.invalid(
                "Scale", name, f"spec.replicas: Invalid value: {replicas!r}: must be a non-negative integer"
            )
        self._check_precondition(rt, current, nested(body, "metadata.resourceVersion"))
        stored = self._commit(rt, current, with_nested(current.raw, paths.spec_replicas, replicas), None)
        return self._scale_of(rt, stored)

    def patch_scale(
        self, rt: ResourceType, namespace: str | None, name: str, patch_type: str, patch: Any
    ) -> dict[str, Any]:
        scale = self.scale(rt, namespace, name)
        if patch_type == JSON_PATCH:
            patched = json_patch(scale, patch)
        elif isinstance(patch, dict) and patch_type in (MERGE_PATCH, STRATEGIC_MERGE_PATCH):
            patched = merge_patch(scale, patch)  # Scale has no lists: a strategic merge is a merge
        else:
            raise errors.unsupported_media_type(patch_type)
        return self.replace_scale(rt, namespace, name, patched)

    def bind(self, pods: ResourceType, namespace: str | None, name: str, body: Any) -> None:
        current = self.get(pods, namespace, name)
        node = nested(body, "target.name") if isinstance(body, dict) else None
        if not node:
            raise errors.invalid("Binding", name, "target.name: Required value")
        bound = nested(current.raw, "spec.nodeName")
        if bound:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": '
                f'pod {name} is already assigned to node "{bound}"',
            )
        spec = current.raw.get("spec") or {}
        self._commit(pods, current, {**current.raw, "spec": {**spec, "nodeName": node}}, None)

    # -- CRDs created through the API ----------------------------------------------------------------------

    def _establish(self, rt: ResourceType, stored: Stored) -> Stored:
        """Install a CRD object's types (discovery, storage); mark it Established, as the apiextensions server does."""
        try:
            types = resource_types_from_crd(stored.raw, f"CRD {stored.raw['metadata']['name']}")
        except Exception as error:
            self.store.remove(rt, stored)
            raise errors.invalid("CustomResourceDefinition", stored.raw["metadata"]["name"], str(error)) from None
        self.registry.uninstall(types[0].group, types[0].plural)
        for resource_type in types:
            self.registry.install(resource_type)
        conditions = [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "lastTransitionTime": self.now()},
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "lastTransitionTime": self.now(),
            },
        ]
        names = stored.raw["spec"]["names"]
        status = {"conditions": conditions, "acceptedNames": names, "storedVersions": [types[0].version]}
        if stored.raw.get("status") == status:
            return stored
        return self.store.put(rt, {**stored.raw, "status": status}, "MODIFIED", stored)

    def _uninstall(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        group, plural = spec.get("group"), (spec.get("names") or {}).get("plural")
        types = [t for t in self.registry if t.group == group and t.plural == plural]
        if types:
            for stored in self.store.scan(types[0]):
                self.store.remove(types[0], stored)
            self.registry.uninstall(types[0].group, types[0].plural)


def _check_name(rt: ResourceType, name: str) -> None:
    if len(name) > 253 or "/" in name or name in (".", "..") or any(c.isspace() for c in name):
        raise errors.invalid(rt.kind, name, f"metadata.name: Invalid value: {name!r}: not a valid object name")
