"""What every test shares: the real control plane's fixtures (`kube_fixtures`), Hypothesis's profiles and the
order of collection. Hand-made jobs and workloads are in `builders.py`."""

from __future__ import annotations

import os

from hypothesis import settings

pytest_plugins = ["tests.kube_fixtures"]

# property tests draw the same examples on every run (CI passes or fails on the code, not on the draw);
# HYPOTHESIS_PROFILE=explore draws afresh, to look for new counterexamples
settings.register_profile("deterministic", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


def pytest_collection_modifyitems(config, items):
    """The files that hold a test marked `slow` come first, so that spread over processes (`make test`) the longest
    start at once rather than last."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)
