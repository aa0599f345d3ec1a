"""Label and field selectors, with the grammar and semantics of Kubernetes' `labels.Parse` and `fields.ParseSelector`.

Label selectors: comma-separated requirements `key`, `!key`, `key=value`, `key==value`, `key!=value`,
`key in (a,b)`, `key notin (a,b)`, `key>1`, `key<1`; `!=` and `notin` also match objects without the key.
Field selectors: `path=value`, `path==value`, `path!=value` on any dotted path of the object (a real API server
accepts only a few paths per kind: `metadata.name`, `metadata.namespace`, `spec.nodeName`, `status.phase`...;
this one accepts every path), `\\,`, `\\=` and `\\\\` escape those characters in values. A missing field reads
as "".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dl2.kube.apiserver.errors import bad_request

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY_RE = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_VALUE_RE = re.compile(rf"^({_NAME})?$")
_REQUIREMENT_RE = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[^\s!=<>(),]+)\s*"
    r"(?:(?P<setop>notin|in)\s*\((?P<values>[^()]*)\)|(?P<op>==|=|!=|>|<)\s*(?P<value>[^\s,()]*))?\s*$"
)


class Operator(StrEnum):
    EXISTS = "exists"
    NOT_EXISTS = "!"
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    GREATER = ">"
    LESS = "<"


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        have = labels.get(self.key)
        op = self.operator
        if op is Operator.EXISTS:
            return have is not None
        if op is Operator.NOT_EXISTS:
            return have is None
        if op is Operator.EQUALS or op is Operator.IN:
            return have is not None and have in self.values
        if op is Operator.NOT_EQUALS or op is Operator.NOT_IN:
            return have is None or have not in self.values
        try:  # > and <: both sides are integers
            number = int(have) if have is not None else None
        except ValueError:
            return False
        if number is None:
            return False
        bound = int(self.values[0])
        return number > bound if op is Operator.GREATER else number < bound

    def __str__(self) -> str:
        op = self.operator
        if op is Operator.EXISTS:
            return self.key
        if op is Operator.NOT_EXISTS:
            return f"!{self.key}"
        if op in (Operator.IN, Operator.NOT_IN):
            return f"{self.key} {op.value} ({','.join(self.values)})"
        return f"{self.key}{op.value}{self.values[0]}"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[LabelRequirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if not text or not text.strip():
            return cls()
        return cls(tuple(_parse_label_requirement(part) for part in _split_top_level(text)))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(requirement.matches(labels) for requirement in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses (`a in (x,y),b` is two requirements)."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise bad_request(f"unable to parse requirement: unbalanced ')' in {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth:
        raise bad_request(f"unable to parse requirement: unbalanced '(' in {text!r}")
    parts.append(text[start:])
    return parts


def _parse_label_requirement(text: str) -> LabelRequirement:
    match = _REQUIREMENT_RE.match(text)
    if not match:
        raise bad_request(f"unable to parse requirement: {text.strip()!r}")
    key = match["key"]
    if not _KEY_RE.match(key) or len(key) > 317:
        raise bad_request(f"unable to parse requirement: invalid label key {key!r}")
    if match["neg"]:
        if match["setop"] or match["op"]:
            raise bad_request(f"unable to parse requirement: '!' takes a key only, got {text.strip()!r}")
        return LabelRequirement(key, Operator.NOT_EXISTS)
    if match["setop"]:
        values = tuple(value.strip() for value in match["values"].split(","))
        if values == ("",):
            raise bad_request(f"unable to parse requirement: empty set in {text.strip()!r}")
        for value in values:
            _check_value(value)
        return LabelRequirement(key, Operator.IN if match["setop"] == "in" else Operator.NOT_IN, values)
    op = match["op"]
    if op is None:
        return LabelRequirement(key, Operator.EXISTS)
    value = match["value"]
    if op in (">", "<"):
        if not re.fullmatch(r"-?\d+", value):
            raise bad_request(f"unable to parse requirement: {op} needs an integer, got {value!r}")
        return LabelRequirement(key, Operator.GREATER if op == ">" else Operator.LESS, (value,))
    _check_value(value)
    return LabelRequirement(key, Operator.NOT_EQUALS if op == "!=" else Operator.EQUALS, (value,))


def _check_value(value: str) -> None:
    if not _VALUE_RE.match(value):
        raise bad_request(f"unable to parse requirement: invalid label value {value!r}")


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    path: str
    negated: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negated


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        if not text or not text.strip():
            return cls()
        return cls(tuple(_parse_field_requirement(part) for part in _split_unescaped(text, ",")))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(requirement.matches(obj) for requirement in self.requirements)

    def value_of(self, path: str) -> str | None:
        """The value a `path=value` requirement asks for (used to serve `metadata.name=x` from one key)."""
        for requirement in self.requirements:
            if requirement.path == path and not requirement.negated:
                return requirement.value
        return None


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts, current, index = [], [], 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            current.append(text[index : index + 2])
            index += 2
            continue
        if char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _parse_field_requirement(text: str) -> FieldRequirement:
    for op in ("!=", "==", "="):
        position = _find_unescaped(text, op)
        if position >= 0:
            path = text[:position].strip()
            value = _unescape(text[position + len(op) :].strip())
            if not re.fullmatch(r"[A-Za-z0-9_.]+", path):
                raise bad_request(f"invalid field selector: bad field path {path!r}")
            return FieldRequirement(path, op == "!=", value)
    raise bad_request(f"invalid field selector: {text.strip()!r}: expected field=value, field==value or field!=value")


def _find_unescaped(text: str, needle: str) -> int:
    index = 0
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text.startswith(needle, index):
            return index
        index += 1
    return -1


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The field at a dotted path as a selector compares it: "" when absent, 'true'/'false' for booleans."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return ""
        current = current[part]
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


__all__ = ["FieldSelector", "LabelRequirement", "LabelSelector", "Operator", "field_value"]
