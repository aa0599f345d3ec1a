"""A local Prometheus scraping training jobs' own metrics: what `dl2 serve --prometheus-url` queries for the
progress of jobs that export their epoch instead of running `dl2.report` (`dl2.kube.progress_metrics`).

Built from the Go module proxy (`make prometheus`) like the control plane; the tests start one that scrapes a
metrics endpoint standing for a training job's exporter every second, and one that scrapes `dl2 serve` and
evaluates the shipped alert rules (`k8s/monitoring/prometheusrule.yaml`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from testbed.controlplane.assets import PROMETHEUS
from testbed.controlplane.processes import Component, free_port, http_ok, wait_until


@contextmanager
def prometheus(
    folder: Path,
    targets: Sequence[str],
    scrape_interval_s: float = 1.0,
    labels: Mapping[str, str] | None = None,
    rule_groups: Sequence[dict[str, object]] = (),
) -> Iterator[str]:
    """Prometheus scraping `targets` (host:port of /metrics endpoints) until the block ends; its base URL.
    `labels`: added to every series scraped (as a ServiceMonitor adds `namespace` and `pod`); `rule_groups`:
    recording and alerting rule groups (a PrometheusRule's `spec.groups`), evaluated at the scrape interval."""
    folder.mkdir(parents=True, exist_ok=True)
    interval = f"{max(int(scrape_interval_s * 1000), 100)}ms"
    static = {"targets": list(targets), "labels": dict(labels or {})}
    config: dict[str, object] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{"job_name": "training", "static_configs": [static]}],
    }
    if rule_groups:
        (folder / "rules.yml").write_text(json.dumps({"groups": list(rule_groups)}))
        config["rule_files"] = [str(folder / "rules.yml")]
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
