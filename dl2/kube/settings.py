"""The settings of `dl2 serve`, defined once: the controller's and the Lease's, whose fields are the command's flags
(`SERVE_KEYS`, `LEASE_KEYS`) with their defaults, bounds and help. A module of its own, with no client library,
so that building the command line loads no Kubernetes or Prometheus code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, Lt

from dl2.config import Keys, config, refuse
from dl2.core.limits import MAX_TIME_S
from dl2.kube import clock as slot_clock
from dl2.schedulers.registry import check_placer

PLACEHOLDER_BUCKET = "REPLACE-WITH-YOUR-BUCKET"
"""The bucket name the manifests ship with (k8s/configmap.yaml, the chart's records.url): refused, not looped on."""


@config
class ControllerConfig:
    """How `dl2 serve` runs: where it records, its slots, its incumbent's placement, its API requests."""

    identity: str
    """This replica's name (the Lease holder identity; `$POD_NAME` in the Deployment)."""
    policy_name: str = "default"
    """The SchedulerPolicy object (cluster-scoped)."""
    decision_log: str | Path = Path("work/decisions")
    """Root of the decision logs: a folder, or object storage shared by the replicas (s3://bucket/prefix;
    credentials and endpoint from the AWS_* variables or workload identity); this cluster's records go to
    `<decision_log>/<cluster_name>/`."""
    cluster_name: str = "dl2-local"
    """Name of this cluster in the records (its log folder)."""
    clock: Literal["wall", "cluster"] = "wall"
    """Where slots come from: the wall clock, or a simulated cluster's dl2-system/dl2-clock ConfigMap."""
    slot_s: Annotated[float, Gt(0), Le(MAX_TIME_S)] = 600.0
    """Slot length on the wall clock (seconds)."""
    clock_namespace: str = slot_clock.NAMESPACE
    clock_name: str = slot_clock.NAME
    placer: str = "load-balance"
    """How the incumbent places tasks when it decides (the cluster's scheduler does the real placement)."""
    request_timeout_s: Annotated[float, Gt(0), Le(86_400)] = 10.0
    """Timeout of each API request (seconds)."""
    parallel_writes: Annotated[int, Ge(1), Le(256)] = 8
    """Resizes in flight at once."""
    cache_timeout_s: Annotated[float, Gt(0), Le(86_400)] = 30.0
    """On the simulated clock: how long a slot waits for its caches to reach the clock's barrier."""
    seed: Annotated[int, Ge(0), Lt(2**63)] = 0
    """Seed of the retry jitter."""
    prometheus_url: str | None = None
    """Prometheus answering the jobs' dl2.io/progress-query annotations (progress from the metrics a job exports;
    without it, progress is the dl2.io/progress-epochs annotation only)."""
    crash_at: tuple[tuple[str, int], ...] = ()
    """Test hook: SIGKILL this process at the first of these (point, slot) it reaches; see `CRASH_POINTS`."""

    def __post_init__(self) -> None:
        check_placer("placer", self.placer)
        if PLACEHOLDER_BUCKET in str(self.decision_log):
            raise refuse(
                "decision_log",
                str(self.decision_log),
                "the shipped placeholder: set your bucket, DL2_DECISION_LOG in the ConfigMap dl2-scheduler-config "
                "(k8s/configmap.yaml) or the chart's records.url",
            )


SERVE_KEYS = Keys(
    ControllerConfig,
    [
        "policy_name", "decision_log", "cluster_name", "clock", "slot_s", "placer", "request_timeout_s",
        "parallel_writes", "seed", "prometheus_url",
    ],
)  # fmt: skip
"""`dl2 serve`'s flags of the controller (the identity, the crash hook and the clock's object are set apart)."""


@config
class LeaseConfig:
    """Leader election over a coordination.k8s.io Lease, with client-go's timing rules."""

    name: str = "dl2-scheduler"
    """The Lease (in the lease namespace)."""
    namespace: str = "dl2-system"
    """Namespace of the Lease."""
    lease_s: Annotated[float, Gt(0), Le(86_400)] = 15.0
    """How long a holder that stopped renewing keeps the Lease, as other candidates count it (seconds)."""
    renew_deadline_s: Annotated[float, Gt(0), Le(86_400)] = 10.0
    """How long the holder keeps acting without a successful renewal (seconds)."""
    retry_s: Annotated[float, Gt(0), Le(86_400)] = 2.0
    """Interval of renewals and acquisition attempts (seconds)."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_s < self.renew_deadline_s < self.lease_s:
            raise refuse(
                "retry_s",
                self.retry_s,
                f"need 0 < retry ({self.retry_s}) < renew deadline ({self.renew_deadline_s}) < lease "
                f"({self.lease_s}) seconds",
            )


LEASE_KEYS = Keys(
    LeaseConfig,
    {
        "lease_name": "name",
        "lease_namespace": "namespace",
        "lease_s": "lease_s",
        "renew_deadline_s": "renew_deadline_s",
        "retry_s": "retry_s",
    },
)
"""`dl2 serve`'s flags of the Lease (`--lease-name`, `--lease-s`, ...)."""
