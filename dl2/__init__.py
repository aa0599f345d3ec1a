"""dl2: a learned scheduler for deep-learning training clusters, with its whole model lifecycle.

Layers (arrows = may import): cli -> rl/placement -> env -> sim -> workload -> core.
The core library (core, workload, sim, schedulers) imports no torch, Airflow or MLflow.
"""

__version__ = "0.1.0"
