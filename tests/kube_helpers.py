"""Shared pieces of the Kubernetes tests: clients of a local API server, manifests, and a watch in a thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

from dl2.kube.apiserver import LocalApiServer

NS = "team-a"
PJ = ("kubeflow.org", "v1", "pytorchjobs")
VJ = ("batch.volcano.sh", "v1alpha1", "jobs")


def api_client(server: LocalApiServer, user_agent: str = "dl2-test") -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = server.url
    api = client.ApiClient(configuration)
    api.user_agent = user_agent
    return api


def namespace(api: client.ApiClient, name: str = NS) -> None:
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name, "labels": {"dl2.io/managed": "true"}}})


def pod(name: str, labels: dict[str, str] | None = None, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "trainer", "image": "trainer:1"}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def pytorchjob(name: str, workers: int = 2, max_workers: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": max_workers, "rdzvBackend": "c10d"},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]}},
                }
            },
        },
    }


def volcano_job(name: str, ps: int = 1, workers: int = 2) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "minAvailable": 2,
            "schedulerName": "volcano",
            "tasks": [
                {"name": "ps", "replicas": ps, "template": template},
                {"name": "worker", "replicas": workers, "template": template},
            ],
        },
    }


class WatchThread:
    """Runs `watch.Watch().stream(function, **kwargs)` in a daemon thread and keeps (type, name, rv) per event."""

    def __init__(self, function: Callable[..., Any], stop_after: int | None = None, **kwargs: Any) -> None:
        self.events: list[tuple[str, str | None, str]] = []
        self.error: BaseException | None = None
        self.watch = watch.Watch()
        self.arrived = threading.Condition()
        self._stop_after = stop_after
        self._thread = threading.Thread(target=self._run, args=(function, kwargs), daemon=True)
        self._thread.start()

    def _run(self, function: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        try:
            for event in self.watch.stream(function, **kwargs):
                metadata = event["raw_object"].get("metadata") or {}
                with self.arrived:
                    self.events.append((event["type"], metadata.get("name"), metadata.get("resourceVersion")))
                    self.arrived.notify_all()
                if self._stop_after is not None and len(self.events) >= self._stop_after:
                    self.watch.stop()
                    return
        except BaseException as error:  # reported to the test
            self.error = error
        finally:
            with self.arrived:
                self.arrived.notify_all()

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[tuple[str, str | None, str]]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.events) >= count or not self._thread.is_alive(), timeout_s)
        return list(self.events)

    def join(self, timeout_s: float = 10.0) -> None:
        self._thread.join(timeout_s)

    def stop(self) -> None:
        self.watch.stop()
