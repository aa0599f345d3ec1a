"""Lock step between the cluster twin and a controller: the twin moves to the next slot only once the controller
has reported the current one done (`status.lastSlot` of the SchedulerPolicy).

On a real cluster time does not wait; on the twin, stepping in lock step makes a run through the API reproducible
(the controller decides every slot, however slow it is) and comparable with `dl2 simulate` on the same workload.
`dl2 cluster --lockstep` uses it, and so do the tests and benchmarks that run `dl2 serve` as a separate process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dl2.kube import clock as slot_clock
from dl2.kube.contract import GROUP
from dl2.kube.policy import DEFAULT_NAME, PLURAL, VERSION
from dl2.kube.rest import CONFIGMAPS, Resource, Rest

POLICIES = Resource(GROUP, VERSION, PLURAL, namespaced=False)


def reported_slot(rest: Rest, policy_name: str = DEFAULT_NAME) -> int | None:
    """The last slot the controller reported done (None: none yet, or no policy)."""
    from kubernetes.client.exceptions import ApiException

    try:
        policy = rest.get(POLICIES, None, policy_name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    slot = (policy.get("status") or {}).get("lastSlot")
    return int(slot) if slot is not None else None


def clock_slot(rest: Rest, namespace: str = slot_clock.NAMESPACE, name: str = slot_clock.NAME) -> int:
    clock = slot_clock.parse_clock(rest.get(CONFIGMAPS, namespace, name).get("data"))
    if clock is None:
        raise RuntimeError(f"the clock {namespace}/{name} has no slot yet")
    return clock.slot


def controller_done(rest: Rest, policy_name: str = DEFAULT_NAME) -> bool:
    """Has the controller finished the twin's current slot?"""
    done = reported_slot(rest, policy_name)
    return done is not None and done >= clock_slot(rest)


def run_lockstep(
    twin: Any,
    slot_timeout_s: float = 60.0,
    poll_s: float = 0.01,
    max_slots: int | None = None,
    waiting: Callable[[int], None] | None = None,
    policy_name: str = DEFAULT_NAME,
) -> int:
    """Advance `twin` (a `ClusterTwin`) one slot each time the controller reports the slot done, until the workload
    is done or `max_slots`; returns the slots advanced. `waiting(slot)` is called while waiting (a test restarts a
    killed controller there); TimeoutError if a slot takes longer than `slot_timeout_s`."""
    rest: Rest = twin.rest
    advanced = 0
    while not twin.done and (max_slots is None or advanced < max_slots):
        slot = clock_slot(rest)
        started = time.monotonic()
        while not controller_done(rest, policy_name):
            if waiting is not None:
                waiting(slot)
            if time.monotonic() - started > slot_timeout_s:
                raise TimeoutError(f"the controller did not report slot {slot} within {slot_timeout_s:g} s")
            time.sleep(poll_s)
        twin.advance()
        advanced += 1
    return advanced
