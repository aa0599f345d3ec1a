"""Heuristic schedulers and placers behind the `Scheduler` protocol; one policy per module."""
