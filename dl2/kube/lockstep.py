"""Lock step between a simulated cluster and a controller: the cluster moves to the next slot only once the
controller has reported the current one done (`status.lastSlot` of the SchedulerPolicy).

On a real cluster time does not wait; on a simulated one, stepping in lock step makes a run through the API
reproducible (the controller decides every slot, however slow it is) and comparable with `dl2 simulate` on the
same workload. `dl2 cluster --lockstep` uses it, and so do the tests and benchmarks that run `dl2 serve` as a
separate process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dl2.kube.apiserver.contract import GROUP
from dl2.kube.policy import DEFAULT_NAME, PLURAL, VERSION

POLICIES = f"{GROUP}/{VERSION}/{PLURAL}"


def reported_slot(server: Any, policy_name: str = DEFAULT_NAME) -> int | None:
    """The last slot the controller reported done (None: none yet)."""
    policy = server.objects(POLICIES).get(policy_name) or {}
    slot = (policy.get("status") or {}).get("lastSlot")
    return int(slot) if slot is not None else None


def clock_slot(server: Any, namespace: str = "dl2-system", name: str = "dl2-clock") -> int:
    return int(server.objects("v1/configmaps", namespace)[name]["data"]["slot"])


def controller_done(server: Any, policy_name: str = DEFAULT_NAME) -> bool:
    """Has the controller finished the cluster's current slot?"""
    done = reported_slot(server, policy_name)
    return done is not None and done >= clock_slot(server)


def run_lockstep(
    server: Any,
    cluster: Any,
    slot_timeout_s: float = 60.0,
    poll_s: float = 0.01,
    max_slots: int | None = None,
    waiting: Callable[[int], None] | None = None,
    policy_name: str = DEFAULT_NAME,
) -> int:
    """Advance `cluster` (a `ClusterHandle`) one slot each time the controller reports the slot done, until the
    workload is done or `max_slots`; returns the slots advanced. `waiting(slot)` is called while waiting (a
    test restarts a killed controller there); TimeoutError if a slot takes longer than `slot_timeout_s`."""
    advanced = 0
    while not cluster.done and (max_slots is None or advanced < max_slots):
        slot = clock_slot(server)
        started = time.monotonic()
        while not controller_done(server, policy_name):
            if waiting is not None:
                waiting(slot)
            if time.monotonic() - started > slot_timeout_s:
                raise TimeoutError(f"the controller did not report slot {slot} within {slot_timeout_s:g} s")
            time.sleep(poll_s)
        cluster.advance()
        advanced += 1
    return advanced
