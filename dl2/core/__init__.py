"""The one typed data model that every layer of dl2 speaks (frozen, slotted dataclasses)."""

from dl2.core.allocation import EMPTY_JOB_ALLOCATION, Allocation, JobAllocation
from dl2.core.cluster import Accelerator, ClusterSpec, NodeSpec
from dl2.core.decision import JOB_STATE_FIELDS, DecisionRecord
from dl2.core.errors import Dl2Error, InputError, InvalidAllocationError
from dl2.core.job import Architecture, Job, JobSpec
from dl2.core.policy import Attribution, Scheduler, decision_attribution, drawn_propensities
from dl2.core.resources import Resources
from dl2.core.view import ClusterView, JobView
from dl2.core.workload import Workload

__all__ = [
    "EMPTY_JOB_ALLOCATION",
    "JOB_STATE_FIELDS",
    "Accelerator",
    "Allocation",
    "Architecture",
    "Attribution",
    "ClusterSpec",
    "ClusterView",
    "DecisionRecord",
    "Dl2Error",
    "InputError",
    "InvalidAllocationError",
    "Job",
    "JobAllocation",
    "JobSpec",
    "JobView",
    "NodeSpec",
    "Resources",
    "Scheduler",
    "Workload",
    "decision_attribution",
    "drawn_propensities",
]
