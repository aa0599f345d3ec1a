"""Workloads: job catalogue, speed models, interference, trace loaders and synthetic generators."""
