"""Kubernetes: the controller that runs dl2's policies in a cluster, and a local API server to test it."""
