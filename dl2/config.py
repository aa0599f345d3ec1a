"""One definition per configuration, read alike by the library, the command line and params.yaml.

A configuration is a frozen dataclass made with `@config`: each field carries its default, a docstring under it
(the description `--help` shows) and its checks (`Annotated` bounds, `Literal` choices, and rules across fields
in `__post_init__`), and pydantic validates every construction. `Keys` names a flat view of a nested
configuration: the flags of a command and the keys of a params.yaml section are the same names, so a value that
enters through either meets the same default and the same check, and a bad one is refused with one line naming
the key, the value and what is allowed.

Why pydantic dataclasses: they stay dataclasses (frozen, slotted, `dataclasses.replace`, picklable for worker
processes), while coercion of YAML and command-line text, bounds and unknown-key errors come from a validation
library instead of code of our own.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any, TypeVar

from annotated_types import Ge, Le, Lt
from pydantic import ConfigDict, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass
from typing_extensions import dataclass_transform

from dl2.core import Dl2Error

T = TypeVar("T")

Width = Annotated[int, Ge(1), Le(65_536)]
"""A layer's width."""
Seed = Annotated[int, Ge(0), Lt(2**63)]
Count = Annotated[int, Ge(0), Le(1_000_000)]
Positive = Annotated[int, Ge(1), Le(100_000_000)]
Probability = Annotated[float, Ge(0), Le(1)]

SETTINGS = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=False)
"""Unknown keys are errors (a typo must not be ignored); field docstrings are the descriptions."""


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def config(cls: type[T]) -> type[T]:
    """A frozen, slotted dataclass whose construction validates its fields (one definition per config)."""
    return pydantic_dataclass(frozen=True, slots=True, config=SETTINGS)(cls)  # type: ignore[return-value]


class ConfigError(Dl2Error):
    """A configuration value that is not allowed: one line naming the key, the value and what is allowed."""


def refuse(key: str, value: Any, allowed: str) -> ConfigError:
    """The error of a rule across fields (raised from a `__post_init__`)."""
    return ConfigError(f"{key}: {value!r} is not allowed ({allowed})")


def describe(error: ValidationError, names: Callable[[tuple[str | int, ...]], str] | None = None) -> str:
    """The first problem of a validation error, as `key: value is not allowed (why)`."""
    problem = error.errors()[0]
    location = tuple(problem["loc"])
    key = names(location) if names is not None else ".".join(str(part) for part in location)
    if problem["type"] == "unexpected_keyword_argument" or problem["type"] == "extra_forbidden":
        return f"{key}: unknown key"
    if problem["type"] == "missing_argument" or problem["type"] == "missing":
        return f"{key}: missing"
    cause = problem.get("ctx", {}).get("error")
    reason = str(cause) if isinstance(cause, Dl2Error) else problem["msg"]
    if isinstance(cause, Dl2Error):
        return reason  # a rule across fields names its own key
    return f"{key}: {problem.get('input')!r} is not allowed ({reason[0].lower()}{reason[1:]})"


def build(cls: type[T], values: Mapping[str, Any], where: str = "") -> T:
    """`cls` from a nested mapping (YAML, JSON), validated; ConfigError in one line otherwise."""
    try:
        return cls(**dict(values))
    except ValidationError as error:
        raise ConfigError(_prefix(where, describe(error))) from None
    except TypeError as error:  # not a mapping of keyword arguments
        raise ConfigError(_prefix(where, str(error))) from None
    except ConfigError as error:
        raise ConfigError(_prefix(where, str(error))) from None


def _prefix(where: str, message: str) -> str:
    return f"{where}: {message}" if where else message


def field_info(cls: type, name: str) -> Any:
    """pydantic's FieldInfo of `cls.name` (annotation, default, description)."""
    return cls.__pydantic_fields__[name]  # type: ignore[attr-defined]


def default_of(cls: type, name: str) -> Any:
    info = field_info(cls, name)
    return info.get_default(call_default_factory=True)


def is_config(annotation: Any) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "__pydantic_fields__")


@dataclasses.dataclass(frozen=True, slots=True)
class Key:
    """One flat key of a configuration: its name and the path of attributes to its field."""

    name: str
    path: tuple[str, ...]
    owner: type
    """The (nested) configuration class that holds the field."""

    @property
    def field(self) -> str:
        return self.path[-1]

    @property
    def info(self) -> Any:
        return field_info(self.owner, self.field)

    @property
    def default(self) -> Any:
        return default_of(self.owner, self.field)

    @property
    def annotation(self) -> Any:
        return _resolve(self.owner, self.field)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _resolve(owner: type, name: str) -> Any:
    """A field's type with postponed annotations evaluated."""
    return typing.get_type_hints(owner, include_extras=True)[name]


class Keys:
    """A flat view of a configuration class: flat name -> field path (`"learning_rate": "supervised.learning_rate"`).

    `build` turns flat values into the configuration (over the defaults, or over a `base` instance);
    `add_arguments` makes command-line flags of them, each with the field's default and docstring."""

    def __init__(self, root: type, paths: Mapping[str, str] | Iterable[str]) -> None:
        self.root = root
        named = paths.items() if isinstance(paths, Mapping) else ((p.rpartition(".")[2], p) for p in paths)
        self.keys: dict[str, Key] = {}
        for name, dotted in named:
            path = tuple(dotted.split("."))
            owner = root
            for part in path[:-1]:
                owner = _resolve(owner, part)
                assert is_config(owner), f"{root.__name__}.{dotted}: {part} is not a configuration"
            assert path[-1] in owner.__pydantic_fields__, f"{root.__name__} has no field {dotted}"  # type: ignore[attr-defined]
            self.keys[name] = Key(name, path, owner)

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys.values())

    def __contains__(self, name: object) -> bool:
        return name in self.keys

    def names(self) -> list[str]:
        return list(self.keys)

    def without(self, *names: str) -> Keys:
        """The same view less some keys (e.g. those another section sets)."""
        kept = {key.name: ".".join(key.path) for key in self.keys.values() if key.name not in names}
        return Keys(self.root, kept)

    def name_of(self, location: tuple[str | int, ...], spelling: Callable[[Key], str] = lambda key: key.name) -> str:
        """The flat key a validation error's location points at (its dotted path when none does)."""
        path = tuple(str(part) for part in location)
        for key in self.keys.values():
            if path[: len(key.path)] == key.path:
                return spelling(key) + "".join(f"[{part}]" for part in path[len(key.path) :])
        return ".".join(path)

    def nest(self, values: Mapping[str, Any], where: str = "") -> dict[str, Any]:
        """Flat values as the nested mapping the configuration takes (unknown flat keys are errors)."""
        nested: dict[str, Any] = {}
        for name, value in values.items():
            if name not in self.keys:
                known = ", ".join(sorted(self.keys))
                raise ConfigError(_prefix(where, f"{name}: unknown key; known: {known}"))
            node = nested
            for part in self.keys[name].path[:-1]:
                node = node.setdefault(part, {})
            node[self.keys[name].field] = value
        return nested

    def build(
        self,
        values: Mapping[str, Any],
        where: str = "",
        base: Any = None,
        spelling: Callable[[Key], str] = lambda key: key.name,
    ) -> Any:
        """The configuration with `values` (flat) over `base` (default: the class's defaults), validated."""
        nested = self.nest(values, where)
        start = _as_mapping(base) if base is not None else {}
        try:
            return self.root(**merge(start, nested))
        except ValidationError as error:
            raise ConfigError(_prefix(where, describe(error, lambda loc: self.name_of(loc, spelling)))) from None
        except ConfigError as error:
            raise ConfigError(_prefix(where, _respell(str(error), self, spelling))) from None

    def values(self, instance: Any) -> dict[str, Any]:
        """The flat values of a configuration instance."""
        result = {}
        for key in self.keys.values():
            node = instance
            for part in key.path:
                node = getattr(node, part)
            result[key.name] = node
        return result

    # -- the command line ----------------------------------------------------------------------------------

    def add_arguments(
        self, parser: argparse.ArgumentParser | Any, defaults: Mapping[str, Any] | None = None, fill: Iterable[str] = ()
    ) -> None:
        """A flag per key, `--name-with-dashes`: its help is the field's docstring and shows the default (from
        the definition, or `defaults` where a command starts from another base, e.g. a simulator mode's). A flag
        not given is absent from the parsed arguments (the definition's default applies when the configuration is
        built), except those in `fill`, which a command reads before building (e.g. `--mode`)."""
        filled = set(fill)
        for key in self.keys.values():
            default = (defaults or {}).get(key.name, key.default)
            description = (key.info.description or "").split("\n\n")[0].replace("%", "%%")
            text = f"{description} (default: {_shown(default)})" if description else f"(default: {_shown(default)})"
            choices = _choices(key.annotation)
            given = _plain(default) if key.name in filled else argparse.SUPPRESS
            if _base_type(key.annotation) is bool:
                action = argparse.BooleanOptionalAction
                parser.add_argument(key.flag, dest=key.name, action=action, default=given, help=text)
            else:
                metavar = None if choices is None else "{" + ",".join(choices) + "}"
                parser.add_argument(key.flag, dest=key.name, default=given, metavar=metavar, help=text)

    def from_args(self, args: argparse.Namespace) -> dict[str, Any]:
        """The flat values given on the command line (flags not given are absent: the definition's defaults
        apply); sequences are comma-separated."""
        given = {}
        for key in self.keys.values():
            if hasattr(args, key.name):
                value = getattr(args, key.name)
                if isinstance(value, str) and _is_sequence(key.annotation):
                    value = [part.strip() for part in value.split(",") if part.strip()]
                given[key.name] = value
        return given

    def build_from_args(self, args: argparse.Namespace, base: Any = None) -> Any:
        return self.build(self.from_args(args), "", base, spelling=lambda key: key.flag)


def _respell(message: str, keys: Keys, spelling: Callable[[Key], str]) -> str:
    """A rule's message names fields by their dotted path; say them as this view spells them."""
    for key in sorted(keys, key=lambda k: -len(".".join(k.path))):
        dotted = ".".join(key.path)
        if message.startswith(f"{dotted}:"):
            return spelling(key) + message[len(dotted) :]
    return message


def _as_mapping(instance: Any) -> dict[str, Any]:
    """A configuration instance as the nested mapping of its fields (nested configs as mappings too)."""
    return {
        field.name: _as_mapping(value) if is_config(type(value)) else value
        for field in dataclasses.fields(instance)
        for value in [getattr(instance, field.name)]
    }


def merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `top` laid over it, section by section: a mapping in both is merged, anything else replaced."""
    merged = dict(base)
    for name, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(name), Mapping):
            merged[name] = merge(dict(merged[name]), value)
        else:
            merged[name] = value
    return merged


def _base_type(annotation: Any) -> Any:
    """The type under `Annotated[...]` and `X | None`."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and arguments:
        return _base_type(arguments[0])
    return annotation


def _is_sequence(annotation: Any) -> bool:
    return typing.get_origin(_base_type(annotation)) in (tuple, list)


def _choices(annotation: Any) -> Sequence[str] | None:
    base = _base_type(annotation)
    if typing.get_origin(base) is typing.Literal:
        return [str(value) for value in typing.get_args(base)]
    if isinstance(base, type) and issubclass(base, str) and hasattr(base, "__members__"):
        return [str(member.value) for member in base.__members__.values()]
    return None


def _plain(value: Any) -> Any:
    """An enum as its value (what a user would type)."""
    return value.value if hasattr(value, "value") and isinstance(value.value, str) else value


def _shown(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value) or "none"
    if hasattr(value, "value") and isinstance(value.value, str):  # an enum
        return str(value.value)
    return str(value)
