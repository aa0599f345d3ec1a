"""The `SchedulerPolicy` custom resource (`dl2.io/v1alpha1`, cluster-scoped): its spec, parsed and validated.

One object (`default`) configures the controller; everything a promotion changes lives in it:

    spec:
      mode: shadow                      # "off" | shadow | canary | active
      model: {name: dl2-policy, version: "3"}   # a pinned MLflow version, never an alias
      incumbent: drf                    # the heuristic the cluster falls back to (DL2 §7)
      canary: {namespaces: [team-a], jobSelector: {matchLabels: {dl2.io/canary: "true"}}, explore: 0.1}
      guardrails: {minReplicas: 0, maxReplicas: 64, maxStepPerSlot: 4, cooldownSlots: 0, maxJobsChangedPerSlot: 50}

`parse_policy` refuses a malformed spec with `PolicyError`, naming the field (the controller reports it as a
status condition and keeps the last valid spec); the CRD's schema (`k8s/crd-schedulerpolicy.yaml`) says the same
to a real API server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dl2.core.limits import MAX_TASKS_PER_JOB
from dl2.kube.contract import GROUP
from dl2.kube.rest import Resource
from dl2.schedulers.registry import SCHEDULERS

API_VERSION = f"{GROUP}/v1alpha1"
VERSION = "v1alpha1"
PLURAL = "schedulerpolicies"
KIND = "SchedulerPolicy"
DEFAULT_NAME = "default"
DEFAULT_MODEL = "dl2-policy"
POLICIES = Resource(GROUP, VERSION, PLURAL, namespaced=False)


class Mode(StrEnum):
    OFF = "off"
    """Nothing: no decisions, no records, no writes to jobs."""
    SHADOW = "shadow"
    """The policy decides on the real state and every decision is recorded; jobs are never written."""
    CANARY = "canary"
    """Jobs in the canary scope are resized as the policy decides (within the guardrails); the rest as shadow."""
    ACTIVE = "active"
    """Every managed job is resized as the policy decides (within the guardrails)."""


class PolicyError(ValueError):
    """A spec the controller refuses: names the field and what is wrong."""

    def __init__(self, field_path: str, message: str) -> None:
        self.field_path = field_path
        self.message = message
        super().__init__(f"spec.{field_path}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return PolicyError, (self.field_path, self.message)


@dataclass(frozen=True, slots=True)
class Guardrails:
    """Bounds every applied decision stays within, whatever the policy proposes."""

    min_replicas: int = 0
    """Fewest workers (and PS, for a parameter-server job that has any) a resized job keeps."""
    max_replicas: int | None = None
    """Most workers (and PS) of one job; None: the job's own limit only."""
    max_step_per_slot: int | None = None
    """Largest change of one role's count in one slot; None: no limit."""
    cooldown_slots: int = 0
    """Slots a resized job is left alone afterwards (0: it may change every slot)."""
    max_jobs_changed_per_slot: int | None = None
    """Most jobs resized in one slot (the first in workload order); None: no limit."""


@dataclass(frozen=True, slots=True)
class CanaryScope:
    """Which jobs canary mode acts on: those in `namespaces`, or whose labels match `match_labels` (either)."""

    namespaces: tuple[str, ...] = ()
    match_labels: Mapping[str, str] = field(default_factory=dict)
    explore: float = 0.0
    """Probability that a canary job's worker count is moved by one around the policy's, for off-policy
    evaluation from the records (`dl2.kube.exploration`); 0: none."""

    def contains(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if namespace in self.namespaces:
            return True
        return bool(self.match_labels) and all(labels.get(k) == v for k, v in self.match_labels.items())


@dataclass(frozen=True, slots=True)
class PolicySpec:
    mode: Mode
    model_name: str
    model_version: str | None
    """The pinned registry version (digits); None only in mode off."""
    incumbent: str
    canary: CanaryScope
    guardrails: Guardrails
    generation: int
    """`metadata.generation` of the object this spec was read from."""

    @property
    def model_ref(self) -> str:
        return f"{self.model_name}/{self.model_version}" if self.model_version is not None else "none"


OFF = PolicySpec(Mode.OFF, DEFAULT_MODEL, None, "drf", CanaryScope(), Guardrails(), 0)
"""What the controller runs before it has read any valid policy."""

MAX_EXPLORE = 0.5
"""The most of canary jobs' decisions exploration may move (the CRD's bound too)."""
_SPEC_FIELDS = {"mode", "model", "incumbent", "canary", "guardrails"}
_GUARDRAIL_FIELDS = {
    "minReplicas": "min_replicas",
    "maxReplicas": "max_replicas",
    "maxStepPerSlot": "max_step_per_slot",
    "cooldownSlots": "cooldown_slots",
    "maxJobsChangedPerSlot": "max_jobs_changed_per_slot",
}


def parse_policy(obj: Mapping[str, Any]) -> PolicySpec:
    """The spec of a SchedulerPolicy object; `PolicyError` names the first thing that is wrong."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise PolicyError("", "missing or not an object")
    unknown = sorted(set(spec) - _SPEC_FIELDS)
    if unknown:
        raise PolicyError(unknown[0], f"unknown field; known: {', '.join(sorted(_SPEC_FIELDS))}")
    raw_mode = spec.get("mode")
    if raw_mode is False:  # YAML 1.1 reads an unquoted `off` as false
        raw_mode = "off"
    try:
        mode = Mode(str(raw_mode)) if isinstance(raw_mode, str) else Mode(None)  # type: ignore[arg-type]
    except ValueError:
        raise PolicyError("mode", f"unknown mode {raw_mode!r}; one of {', '.join(m.value for m in Mode)}") from None
    model = _mapping(spec, "model", {"name", "version"})
    name = model.get("name", DEFAULT_MODEL)
    if not isinstance(name, str) or not name:
        raise PolicyError("model.name", f"expected a registered model's name, got {name!r}")
    version = _version(model.get("version"), required=mode is not Mode.OFF)
    incumbent = spec.get("incumbent", "drf")
    if incumbent not in SCHEDULERS:
        raise PolicyError("incumbent", f"unknown heuristic {incumbent!r}; one of {', '.join(SCHEDULERS)}")
    metadata = obj.get("metadata") or {}
    return PolicySpec(
        mode=mode,
        model_name=name,
        model_version=version,
        incumbent=str(incumbent),
        canary=_canary(spec),
        guardrails=_guardrails(spec),
        generation=int(metadata.get("generation") or 0),
    )


def _mapping(spec: Mapping[str, Any], name: str, known: set[str]) -> Mapping[str, Any]:
    value = spec.get(name, {})
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PolicyError(name, f"expected an object, got {value!r}")
    unknown = sorted(set(value) - known)
    if unknown:
        raise PolicyError(f"{name}.{unknown[0]}", f"unknown field; known: {', '.join(sorted(known))}")
    return value


def _version(value: Any, required: bool) -> str | None:
    if value is None or value == "":
        if required:
            raise PolicyError("model.version", "missing: a pinned version is required unless mode is off")
        return None
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not text.isdigit() or int(text) < 1:
        raise PolicyError("model.version", f"expected a registry version number (1, 2, ...), got {value!r}")
    return str(int(text))


def _count(value: Any, where: str, allow_none: bool) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(where, f"expected a whole number, got {value!r}")
    if value < 0:
        raise PolicyError(where, f"must not be negative, got {value}")
    if value > MAX_TASKS_PER_JOB:
        raise PolicyError(where, f"must be at most {MAX_TASKS_PER_JOB:,}, got {value}")
    return value


def _guardrails(spec: Mapping[str, Any]) -> Guardrails:
    raw = _mapping(spec, "guardrails", set(_GUARDRAIL_FIELDS))
    values: dict[str, int | None] = {}
    for key, attribute in _GUARDRAIL_FIELDS.items():
        if key in raw:
            allow_none = attribute not in ("min_replicas", "cooldown_slots")
            values[attribute] = _count(raw[key], f"guardrails.{key}", allow_none)
    guardrails = Guardrails(**values)  # type: ignore[arg-type]
    if guardrails.max_replicas is not None and guardrails.max_replicas < guardrails.min_replicas:
        raise PolicyError(
            "guardrails.maxReplicas", f"{guardrails.max_replicas} is below minReplicas {guardrails.min_replicas}"
        )
    if guardrails.max_step_per_slot == 0:
        raise PolicyError("guardrails.maxStepPerSlot", "must be at least 1 (use mode shadow to change nothing)")
    return guardrails


def _canary(spec: Mapping[str, Any]) -> CanaryScope:
    raw = _mapping(spec, "canary", {"namespaces", "jobSelector", "explore"})
    namespaces = raw.get("namespaces", [])
    if not isinstance(namespaces, list) or not all(isinstance(n, str) and n for n in namespaces):
        raise PolicyError("canary.namespaces", f"expected a list of namespace names, got {namespaces!r}")
    selector = raw.get("jobSelector") or {}
    if not isinstance(selector, Mapping) or set(selector) - {"matchLabels"}:
        raise PolicyError("canary.jobSelector", "expected {matchLabels: {key: value}} (matchExpressions unsupported)")
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise PolicyError("canary.jobSelector.matchLabels", f"expected string labels, got {labels!r}")
    mode = spec.get("mode")
    if mode == Mode.CANARY and not namespaces and not labels:
        raise PolicyError("canary", "canary mode needs namespaces or a jobSelector")
    explore = raw.get("explore", 0.0)
    if isinstance(explore, bool) or not isinstance(explore, int | float) or not 0 <= explore <= MAX_EXPLORE:
        raise PolicyError("canary.explore", f"expected a probability from 0 to {MAX_EXPLORE}, got {explore!r}")
    return CanaryScope(tuple(namespaces), dict(labels), float(explore))
