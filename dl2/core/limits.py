"""Domain limits of dl2's inputs, stated once: every loader, configuration and command checks against these.

They are far above anything a real cluster or trace holds, and low enough that a value past them cannot make dl2
allocate gigabytes or run for hours before it fails: a job's tasks and a cluster's nodes become tuples, a time
becomes slots. The data-quality suites (`pipelines.validate`) flag merely implausible values with tighter,
configurable bounds; these are the hard ones.
"""

from __future__ import annotations

MAX_NODES = 100_000
"""Servers in one cluster (the shipped traces: 352 and 1,213; the authors' largest setting: 500)."""
MAX_NODE_CAPACITY = 1_000_000.0
"""Any one resource of one server, in its units (GPUs or the authors' GPU slots, CPU cores or slots, GB)."""
MAX_TASKS_PER_JOB = 10_000
"""Workers (and, separately, parameter servers) of one job; a job's GPUs are also at most its cluster's."""
MAX_JOBS = 1_000_000
"""Jobs of one workload (the shipped traces: 6,391 and 2,852)."""
MAX_TIME_S = 31_536_000.0
"""Submission times, job durations and slot lengths: at most a year, in seconds (the traces span 7 and 17
days); a year of 600-s slots is within the simulator's `max_slots`."""
MAX_EPOCHS = 10_000_000.0
"""Declared and true epochs of one job (the authors' workloads reach 76,800)."""
MAX_SAMPLES_PER_EPOCH = 1e12
"""Throughput units per epoch of one job (the catalogue's: 115 to 780)."""
MAX_FILE_BYTES = 256 * 1024 * 1024
"""Largest input file read whole (traces, workload and configuration files, decision-log segments)."""
MAX_SEEDS = 10_000
"""Seeds of one command (`--seeds N` runs N of them)."""
MAX_PROCESSES = 1_024
"""Worker processes of one command."""
