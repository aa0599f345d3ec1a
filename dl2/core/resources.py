"""Resource vectors: GPUs, CPUs and memory.

In compatibility mode the units are the DL2 authors' "slots" (a server has 8 CPU and 8 GPU slots; one GPU is
4 slots); in realistic mode they are whole GPUs, CPU cores and GB of memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Resources:
    """A non-negative amount of each resource type."""

    gpu: float = 0.0
    """GPUs (or GPU slots in compatibility mode)."""
    cpu: float = 0.0
    """CPU cores (or CPU slots in compatibility mode)."""
    mem_gb: float = 0.0
    """Memory in GB (unused in compatibility mode)."""
    _tuple: tuple[float, float, float] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # schedulers read demands as plain tuples in their inner loops; build it once
        object.__setattr__(self, "_tuple", (self.gpu, self.cpu, self.mem_gb))

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.gpu + other.gpu, self.cpu + other.cpu, self.mem_gb + other.mem_gb)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.gpu - other.gpu, self.cpu - other.cpu, self.mem_gb - other.mem_gb)

    def scaled(self, factor: float) -> Resources:
        return Resources(self.gpu * factor, self.cpu * factor, self.mem_gb * factor)

    def fits_in(self, capacity: Resources, tolerance: float = 1e-9) -> bool:
        return (
            self.gpu <= capacity.gpu + tolerance
            and self.cpu <= capacity.cpu + tolerance
            and self.mem_gb <= capacity.mem_gb + tolerance
        )

    def as_tuple(self) -> tuple[float, float, float]:
        return self._tuple

    def dominant_share(self, total: Resources) -> float:
        """max over resource types of self / total (DRF's dominant share); types with zero total are skipped."""
        shares = [mine / whole for mine, whole in zip(self.as_tuple(), total.as_tuple(), strict=True) if whole > 0]
        return max(shares, default=0.0)
