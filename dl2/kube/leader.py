"""Leader election with a `coordination.k8s.io/v1` Lease: only the holder writes.

The holder renews the Lease every `retry_s`; another candidate takes it over once it has seen the same
holder and renew time for `lease_s` by its own clock (as client-go does: no trust in other machines' clocks).
Every write path of the controller asks `is_leader()` first, which is False as soon as the holder has failed to
renew for `renew_deadline_s` (< `lease_s`), so a replica that loses the Lease stops writing at once, before
anyone else may take it. Updates carry the Lease's resourceVersion: two candidates racing for it get one
success and one 409.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from dl2.kube.settings import LeaseConfig


def _now() -> datetime:
    return datetime.now(UTC)


class LeaseElector:
    def __init__(
        self,
        api: Any,
        identity: str,
        config: LeaseConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        from kubernetes import client

        self.coordination = client.CoordinationV1Api(api)
        self.identity = identity
        self.config = config or LeaseConfig()
        self.clock = clock
        self.on_change = on_change
        self._renewed_at: float | None = None
        """Local time of this replica's last successful acquire or renew."""
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._was_leader = False
        self._answered_at = clock()
        """Local time of the last attempt the API server answered (a refusal, a conflict included)."""
        self.unanswered = ""
        """Why the last attempt got no answer ("": it got one)."""

    def unreachable(self) -> str | None:
        """Why this replica can neither lead nor take over, once the API server has not answered for a renew
        deadline (what a leader may go without renewing); else None."""
        silent_s = self.clock() - self._answered_at
        if not self.unanswered or silent_s < self.config.renew_deadline_s:
            return None
        return f"the API server has not answered for {silent_s:.0f} s: {self.unanswered}"

    def _answered(self, answered: bool, error: Exception | None = None) -> None:
        if answered:
            self._answered_at, self.unanswered = self.clock(), ""
        else:
            self.unanswered = f"{type(error).__name__}: {error}"

    def is_leader(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self.clock() - renewed < self.config.renew_deadline_s

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True if this replica holds the Lease afterwards."""
        from kubernetes.client.exceptions import ApiException

        config = self.config
        try:
            lease = self.coordination.read_namespaced_lease(config.name, config.namespace)
            self._answered(True)
        except ApiException as error:
            self._answered(True)
            if error.status != 404:
                return self._result(False)
            return self._result(self._create())
        except Exception as error:  # the API is unreachable: no renewal this time
            self._answered(False, error)
            return self._result(False)
        from kubernetes import client

        spec = lease.spec or client.V1LeaseSpec()
        lease.spec = spec
        holder = spec.holder_identity or ""
        observed = (holder, str(spec.renew_time))
        now = self.clock()
        if observed != self._observed:
            self._observed, self._observed_at = observed, now
        duration = spec.lease_duration_seconds or config.lease_s
        if holder and holder != self.identity and now - self._observed_at < duration:
            return self._result(False)
        stamp = _now()
        if holder != self.identity:
            spec.acquire_time = stamp
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity = self.identity
        spec.renew_time = stamp
        spec.lease_duration_seconds = max(1, math.ceil(config.lease_s))
        try:
            self.coordination.replace_namespaced_lease(config.name, config.namespace, lease)
        except Exception:  # 409: someone else renewed or took it first; or the API failed
            return self._result(False)
        self._renewed_at = now
        return self._result(True)

    def _create(self) -> bool:
        from kubernetes import client

        config = self.config
        stamp = _now()
        body = client.V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=client.V1ObjectMeta(name=config.name, namespace=config.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=max(1, math.ceil(config.lease_s)),
                acquire_time=stamp,
                renew_time=stamp,
                lease_transitions=0,
            ),
        )
        try:
            self.coordination.create_namespaced_lease(config.namespace, body)
        except Exception:  # 409: another candidate created it first
            return False
        self._renewed_at = self.clock()
        return True

    def _result(self, holding: bool) -> bool:
        leader = self.is_leader()
        if leader != self._was_leader:
            self._was_leader = leader
            if self.on_change is not None:
                self.on_change(leader)
        return holding and leader

    def release(self) -> None:
        """Give the Lease up at once (a clean shutdown), so that another replica need not wait it out."""
        if not self.is_leader():
            return
        self._renewed_at = None
        try:
            lease = self.coordination.read_namespaced_lease(self.config.name, self.config.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = ""
                lease.spec.lease_duration_seconds = 1
                self.coordination.replace_namespaced_lease(self.config.name, self.config.namespace, lease)
        except Exception:  # best effort: the Lease expires anyway
            pass
        self._result(False)

    def start(self) -> LeaseElector:
        """Try to acquire now, then renew (or try again) every `retry_s` from a daemon thread."""
        self.try_acquire_or_renew()
        self._thread = threading.Thread(target=self._run, name="dl2-lease", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.config.retry_s):
            self.try_acquire_or_renew()

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.config.retry_s + 5)
            self._thread = None
        if release:
            self.release()
