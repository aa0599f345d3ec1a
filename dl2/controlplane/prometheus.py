"""A local Prometheus scraping training jobs' own metrics: what `dl2 serve --prometheus-url` queries for the
progress of jobs that export their epoch instead of running `dl2.report` (`dl2.kube.progress_metrics`).

Built from the Go module proxy (`make prometheus`) like the control plane; the tests start one that scrapes a
metrics endpoint standing for a training job's exporter every second.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from dl2.controlplane.assets import PROMETHEUS
from dl2.controlplane.processes import Component, free_port, http_ok, wait_until


@contextmanager
def prometheus(folder: Path, targets: Sequence[str], scrape_interval_s: float = 1.0) -> Iterator[str]:
    """Prometheus scraping `targets` (host:port of /metrics endpoints) until the block ends; its base URL."""
    folder.mkdir(parents=True, exist_ok=True)
    interval = f"{max(int(scrape_interval_s * 1000), 100)}ms"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{"job_name": "training", "static_configs": [{"targets": list(targets)}]}],
    }
    (folder / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    command = [
        PROMETHEUS.path(),
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    server = Component("prometheus", command, folder / "logs").start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: http_ok(f"{url}/-/ready"), 60.0, "prometheus ready", [server])
        yield url
    finally:
        server.stop()
