"""The promotion handshake: point the SchedulerPolicy at a model version and wait for the controller to confirm.

    result = promote_policy(api, version=7, mode="canary", timeout_s=120)
    result.confirmed, result.detail     # what the gate records (`pipelines.promote`'s confirm hook)

1. read the policy and remember its spec;
2. merge-patch `spec.model.version` (and `spec.mode`, if given): the API server bumps `metadata.generation`;
3. poll the status until the controller has observed that generation (`status.observedGeneration`) and reports
   `loadedModel.version` = the version with `Ready=True`;
4. if it reports a failure for that generation instead (`Ready=False`, reason `LoadFailed` or `InvalidSpec`), or
   nothing within `timeout_s`, put the previous spec back (one JSON patch of `/spec`) and report why.

It needs only `get` and `patch` on the one SchedulerPolicy object (the `dl2-policy-promoter` ClusterRole).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from dl2.kube.contract import GROUP
from dl2.kube.policy import DEFAULT_NAME, PLURAL, VERSION, Mode

FAILED_REASONS = ("LoadFailed", "InvalidSpec")


@dataclass(frozen=True, slots=True)
class PromotionResult:
    confirmed: bool
    detail: str
    version: str
    mode: str | None
    """The mode the promotion asked for (None: unchanged)."""
    previous_version: str | None
    generation: int
    """`metadata.generation` after the patch."""
    restored: bool
    """The previous spec was put back."""
    waited_s: float

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "confirmed": self.confirmed,
            "detail": self.detail,
            "version": self.version,
            "mode": self.mode,
            "previous_version": self.previous_version,
            "generation": self.generation,
            "restored": self.restored,
            "waited_s": round(self.waited_s, 3),
        }


def _ready(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})


def verdict(status: dict[str, Any], generation: int, version: str) -> tuple[bool | None, str]:
    """(True, why) once the controller confirms `version` at `generation`, (False, why) once it reports a failure
    for it, (None, what it says) while it has not answered yet."""
    observed = int(status.get("observedGeneration") or 0)
    if observed < generation:
        return None, f"the controller has observed generation {observed}, not {generation} yet"
    ready = _ready(status)
    loaded = str((status.get("loadedModel") or {}).get("version") or "")
    if ready.get("status") == "True" and loaded == version:
        return True, f"the controller runs v{version} (generation {generation}, Ready)"
    if ready.get("status") == "False" and ready.get("reason") in FAILED_REASONS:
        return False, f"{ready.get('reason')}: {ready.get('message', '')}"
    return None, f"loaded v{loaded or '-'}, Ready={ready.get('status', '-')} ({ready.get('reason', '')})"


def promote_policy(
    api: Any,
    version: int | str,
    mode: str | Mode | None = None,
    name: str = DEFAULT_NAME,
    timeout_s: float = 120.0,
    poll_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> PromotionResult:
    """Patch the SchedulerPolicy to `version` (and `mode`), wait for the controller, restore on failure."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    wanted = str(int(version))
    wanted_mode = Mode(mode).value if mode is not None else None
    before = cast(dict[str, Any], custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))
    previous_spec = before.get("spec") or {}
    previous_version = (previous_spec.get("model") or {}).get("version")
    patch: dict[str, Any] = {"spec": {"model": {"version": wanted}}}
    if wanted_mode is not None:
        patch["spec"]["mode"] = wanted_mode
    started = time.monotonic()
    after = cast(dict[str, Any], custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, patch))
    generation = int((after.get("metadata") or {}).get("generation") or 0)
    answer, detail = None, "no status yet"
    while answer is None and time.monotonic() - started < timeout_s:
        sleep(poll_s)
        current = cast(dict[str, Any], custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))
        answer, detail = verdict(current.get("status") or {}, generation, wanted)
    waited = time.monotonic() - started
    if answer:
        return PromotionResult(True, detail, wanted, wanted_mode, _text(previous_version), generation, False, waited)
    if answer is None:
        detail = f"timed out after {timeout_s:g} s: {detail}"
    restore = [{"op": "replace", "path": "/spec", "value": previous_spec}]
    custom.patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, name, restore, _content_type="application/json-patch+json"
    )
    return PromotionResult(False, detail, wanted, wanted_mode, _text(previous_version), generation, True, waited)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def confirm_hook(
    api: Any, mode: str | Mode | None = None, name: str = DEFAULT_NAME, poll_s: float = 0.5
) -> Callable[[int, Any, float], tuple[bool, str]]:
    """The promotion gate's confirmation (`pipelines.promote.run(confirmation=...)`: (version, gate settings,
    timeout_s) -> (confirmed, detail)) as this handshake on a cluster; the gate's settings are not needed."""

    def confirm(version: int, gate: Any, timeout_s: float) -> tuple[bool, str]:
        result = promote_policy(api, version, mode, name, timeout_s, poll_s)
        return result.confirmed, result.detail + (" (previous spec restored)" if result.restored else "")

    return confirm
