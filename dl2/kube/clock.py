"""The simulated clock: how a cluster twin tells the controller which slot it is (`dl2 serve --clock cluster`).

The twin publishes the ConfigMap `dl2-system/dl2-clock` after it has written everything of a slot:

    data:
      slot: "42"                       time_s: "50400.0"          slot_s: "1200.0"
      resourceVersions: '{"pods": "8812", "pytorchjobs.kubeflow.org": "8790", ...}'
      ... (job counts, done)

`resourceVersions` names, per resource the controller watches, the resourceVersion of the twin's last write of it.
Watches of different resources are not ordered with each other, so a controller that reads its informer caches
when the clock moves waits until each cache has seen at least that version (`SlotClock.wait_for`): the state it
decides on is then the slot's, exactly, as a list per resource at the boundary would give. On a real cluster there
is no such ConfigMap: slots come from the wall clock and the caches are as fresh as their watches.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

NAMESPACE = "dl2-system"
NAME = "dl2-clock"
RESOURCE_VERSIONS = "resourceVersions"


@dataclass(frozen=True, slots=True)
class SlotClock:
    slot: int
    time_s: float
    slot_s: float
    resource_versions: Mapping[str, int] = field(default_factory=dict)
    """Resource (`pods`, `pytorchjobs.kubeflow.org`) -> the version a cache must have seen for this slot."""


def parse_clock(data: Mapping[str, str] | None) -> SlotClock | None:
    """The clock in a ConfigMap's data (None before the twin has published a slot)."""
    if not data or "slot" not in data:
        return None
    versions = json.loads(data.get(RESOURCE_VERSIONS) or "{}")
    return SlotClock(
        int(data["slot"]),
        float(data["time_s"]),
        float(data["slot_s"]),
        {str(resource): int(version) for resource, version in versions.items()},
    )


def clock_data(slot: int, time_s: float, slot_s: float, resource_versions: Mapping[str, int]) -> dict[str, str]:
    return {
        "slot": str(slot),
        "time_s": repr(float(time_s)),
        "slot_s": repr(float(slot_s)),
        RESOURCE_VERSIONS: json.dumps(dict(sorted(resource_versions.items()))),
    }
