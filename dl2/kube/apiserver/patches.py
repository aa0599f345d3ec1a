"""The three patch formats of the Kubernetes API: JSON merge patch, JSON patch and strategic merge patch.

- `merge_patch`: RFC 7386 (`application/merge-patch+json`). It never modifies its arguments and shares the
  target's unchanged branches with the result (stored objects are never mutated, so sharing is safe).
- `json_patch`: RFC 6902 (`application/json-patch+json`): add, remove, replace, move, copy and test, with JSON
  pointers (RFC 6901) into objects and lists (`/spec/tasks/1/replicas`, `-` appends). It works on a copy.
- `strategic_merge_patch` (`application/strategic-merge-patch+json`, what the official client sends for core
  kinds): a merge patch in which the lists Kubernetes merges by a key are merged element by element (containers,
  volumes, env and the like by `name`, ports by `containerPort`, conditions by `type`, owner references by `uid`,
  finalizers as a set), with the `$patch: replace|delete` and `$deleteFromPrimitiveList/<field>` directives. A
  real API server reads the merge keys from each kind's Go types; this one knows them by field name, which covers
  the core kinds a controller patches. Other lists are replaced, as in a merge patch.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from dl2.kube.apiserver.errors import ApiError, bad_request

MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
"""List fields merged element by element in a strategic merge patch, and the key that identifies an element."""
SET_LISTS = frozenset({"finalizers"})
"""Lists of strings merged as sets in a strategic merge patch."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes a key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# -- RFC 6902 ---------------------------------------------------------------------------------------------


def _tokens(pointer: Any) -> list[str]:
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise bad_request(f"invalid JSON pointer {pointer!r}: must be empty or start with '/'")
    if not pointer:
        return []
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def _index(token: str, length: int, pointer: str, allow_end: bool) -> int:
    if allow_end and token == "-":
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise _does_not_apply(f"{pointer}: {token!r} is not a list index")
    index = int(token)
    if index > length or (index == length and not allow_end):
        raise _does_not_apply(f"{pointer}: index {index} is out of range (the list has {length} elements)")
    return index


def _does_not_apply(message: str) -> ApiError:
    return ApiError(422, "Invalid", f"the JSON patch does not apply: {message}")


def _container(doc: Any, tokens: list[str], pointer: str) -> Any:
    current = doc
    for token in tokens:
        if isinstance(current, dict):
            if token not in current:
                raise _does_not_apply(f"{pointer}: missing {token!r}")
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(token, len(current), pointer, allow_end=False)]
        else:
            raise _does_not_apply(f"{pointer}: {token!r} is inside a value that is neither an object nor a list")
    return current


def _get(doc: Any, pointer: str) -> Any:
    return _container(doc, _tokens(pointer), pointer)


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        return value
    parent = _container(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), pointer, allow_end=True), value)
    else:
        raise _does_not_apply(f"{pointer}: the parent is neither an object nor a list")
    return doc


def _remove(doc: Any, pointer: str) -> tuple[Any, Any]:
    tokens = _tokens(pointer)
    if not tokens:
        raise _does_not_apply("cannot remove the whole document")
    parent = _container(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _does_not_apply(f"{pointer}: missing {last!r}")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(last, len(parent), pointer, allow_end=False))
    raise _does_not_apply(f"{pointer}: the parent is neither an object nor a list")


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, but booleans are not numbers (Python's True == 1 is not JSON's)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 applied to a deep copy of `doc` (the argument is left as it is)."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    result = copy.deepcopy(doc)
    for number, operation in enumerate(operations):
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request(f"JSON patch operation {number} needs 'op' and 'path'")
        op, path = operation["op"], operation["path"]
        if op in ("add", "replace", "test") and "value" not in operation:
            raise bad_request(f"JSON patch operation {number} ({op}) needs 'value'")
        if op in ("move", "copy") and "from" not in operation:
            raise bad_request(f"JSON patch operation {number} ({op}) needs 'from'")
        if op == "add":
            result = _add(result, path, copy.deepcopy(operation["value"]))
        elif op == "remove":
            result, _ = _remove(result, path)
        elif op == "replace":
            _get(result, path)  # the target must exist
            if path:
                result, _ = _remove(result, path)
            result = _add(result, path, copy.deepcopy(operation["value"]))
        elif op == "move":
            source = operation["from"]
            if path != source and path.startswith(source + "/"):
                raise _does_not_apply(f"cannot move {source} into its own child {path}")
            result, value = _remove(result, source)
            result = _add(result, path, value)
        elif op == "copy":
            result = _add(result, path, copy.deepcopy(_get(result, operation["from"])))
        elif op == "test":
            if not json_equal(_get(result, path), operation["value"]):
                raise _does_not_apply(f"test of {path} failed")
        else:
            raise bad_request(f"JSON patch operation {number}: unknown op {op!r}")
    return result


# -- strategic merge --------------------------------------------------------------------------------------


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A merge patch with Kubernetes' list-merge semantics for the fields of `MERGE_KEYS` and `SET_LISTS`."""
    if not isinstance(patch, Mapping):
        return patch
    directive = patch.get("$patch")
    if directive == "replace":
        return {key: value for key, value in patch.items() if key != "$patch"}
    if directive == "delete":
        return None
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            remove = set(value or [])
            result[field] = [item for item in result.get(field) or [] if item not in remove]
            continue
        if value is None:
            result.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list):
            result[key] = _merge_keyed_list(result.get(key), value, MERGE_KEYS[key])
        elif key in SET_LISTS and isinstance(value, list):
            current = list(result.get(key) or [])
            result[key] = current + [item for item in value if item not in current]
        else:
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def _merge_keyed_list(target: Any, patch: list[Any], merge_key: str) -> list[Any]:
    items = list(target) if isinstance(target, list) else []
    for element in patch:
        if not isinstance(element, Mapping) or merge_key not in element:
            return list(patch)  # not a keyed list after all: replace, as a merge patch would
        position = next(
            (
                i
                for i, item in enumerate(items)
                if isinstance(item, Mapping) and item.get(merge_key) == element[merge_key]
            ),
            None,
        )
        if element.get("$patch") == "delete":
            if position is not None:
                items.pop(position)
        elif position is None:
            items.append({key: value for key, value in element.items() if key != "$patch"})
        else:
            items[position] = strategic_merge_patch(items[position], element)
    return items
