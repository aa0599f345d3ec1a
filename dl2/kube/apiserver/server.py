"""`LocalApiServer`: the Kubernetes API on loopback, in a background thread or in the caller's event loop.

    with LocalApiServer(crd_files=THIRD_PARTY_CRDS) as server:
        server.write_kubeconfig(path)        # for kubectl and kubernetes.config.load_kube_config
        server.add_fault(Fault(FaultKind.ERROR, code=409, verb="patch", resource="pytorchjobs/scale", count=1))
        ...                                   # any client, over HTTP
        server.records()                      # every request, in RBAC terms

All state lives on the server's event loop; the methods here are safe to call from any thread (they run their
work on the loop and wait for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import kmock
import yaml

from dl2.kube.apiserver.admin import AdminEndpoints, AdminState, ClusterControl
from dl2.kube.apiserver.errors import ApiError
from dl2.kube.apiserver.faults import Fault, FaultInjector
from dl2.kube.apiserver.handler import ApiHandler
from dl2.kube.apiserver.recording import RequestRecord, RequestRecorder
from dl2.kube.apiserver.resources import ResourceRegistry, ResourceType, load_crd_manifests
from dl2.kube.apiserver.store import ObjectStore
from dl2.kube.apiserver.verbs import Verbs
from dl2.paths import REPO_ROOT

T = TypeVar("T")

THIRD_PARTY_CRDS = (
    REPO_ROOT / "k8s" / "third-party" / "kubeflow.org_pytorchjobs.yaml",
    REPO_ROOT / "k8s" / "third-party" / "batch.volcano.sh_jobs.yaml",
)
"""The real CRDs of the job kinds dl2 resizes (Kubeflow PyTorchJob, Volcano Job), shipped unmodified."""
BOOTSTRAP_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
CONTEXT = "dl2-local"


class LocalApiServer:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        crd_files: Iterable[Path] = (),
        record_path: Path | None = None,
        seed: int = 0,
        history: int = 1000,
        bookmark_interval_s: float = 60.0,
    ) -> None:
        """`port` 0 picks a free one; `record_path` appends every request to a JSONL file; `history` is how many
        changes per resource a watch can resume across; `seed` draws uids, generated names and fault
        probabilities."""
        self.host = host
        self.port = port
        self.bookmark_interval_s = bookmark_interval_s
        self.registry = ResourceRegistry()
        self.store = ObjectStore(history)
        self.verbs = Verbs(self.registry, self.store, seed)
        self.recorder = RequestRecorder(record_path)
        self.faults = FaultInjector(seed)
        self.admin_state = AdminState(self.store, self.recorder, self.faults, self._drop_watches)
        self.handler: ApiHandler | None = None
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        namespaces = self._type("v1/namespaces")
        for name in BOOTSTRAP_NAMESPACES:
            self.verbs.create(namespaces, None, {"metadata": {"name": name}})
        for path in crd_files:
            self.install_crd_file(path)

    # -- running --------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[LocalApiServer]:
        """Serve on the running event loop for the duration of the block."""
        self._loop = asyncio.get_running_loop()
        handler = ApiHandler(
            verbs=self.verbs,
            recorder=self.recorder,
            faults=self.faults,
            bookmark_interval_s=self.bookmark_interval_s,
            admin=AdminEndpoints(self.admin_state),
        )
        async with handler, kmock.Server(handler, host=self.host, port=self.port or None) as server:
            self.port = server.port
            self.url = f"http://{self.host}:{server.port}"
            handler.server_address = f"{self.host}:{server.port}"
            self.handler = handler
            try:
                yield self
            finally:
                for task in list(self._tasks):
                    task.cancel()
                handler.drop_watches()  # open watch streams end, so the server can close at once
                await asyncio.sleep(0)

    def start(self, timeout_s: float = 15.0) -> LocalApiServer:
        """Serve from a background thread (daemon); returns once the port is open."""
        if self._thread is not None:
            raise RuntimeError("the server is already running")
        self._thread = threading.Thread(target=self._run, name="dl2-apiserver", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise RuntimeError(f"the API server did not start within {timeout_s} s")
        if self._failure is not None:
            raise RuntimeError(f"the API server failed to start: {self._failure}") from self._failure
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported to start() and stop()
            self._failure = error
            self._ready.set()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with self.serving():
            self._ready.set()
            await self._stop.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)
        self._thread = None
        self.recorder.close()

    def __enter__(self) -> LocalApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """Run `function(*args)` on the server's loop and return its result (its exceptions are raised here)."""
        loop = self._loop
        if loop is None or not loop.is_running() or self._in_loop():
            return function(*args)

        async def run() -> T:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(run(), loop).result(600)

    def _in_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def every(self, interval_s: float, function: Callable[[], bool]) -> None:
        """Call `function` on the loop every `interval_s` seconds until it returns False (the simulated clock)."""

        async def tick() -> None:
            while True:
                await asyncio.sleep(interval_s)
                if not function():
                    return

        def schedule() -> None:
            task = asyncio.get_running_loop().create_task(tick())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        if self._loop is None:
            raise RuntimeError("start the server before scheduling work on it")
        self._loop.call_soon_threadsafe(schedule)

    # -- clients --------------------------------------------------------------------------------------------

    def kubeconfig(self, namespace: str = "default") -> dict[str, Any]:
        """A kubeconfig for this server (the token is not checked: the server has no authentication)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "current-context": CONTEXT,
            "clusters": [{"name": CONTEXT, "cluster": {"server": self.url}}],
            "users": [{"name": CONTEXT, "user": {"token": CONTEXT}}],
            "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace}}],
        }

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """Write the kubeconfig atomically (a temporary file renamed into place), readable by its owner only."""
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w") as stream:
                yaml.safe_dump(self.kubeconfig(namespace), stream, sort_keys=False)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return path

    # -- resources and objects ------------------------------------------------------------------------------

    def _type(self, resource: str) -> ResourceType:
        """`v1/pods`, `kubeflow.org/v1/pytorchjobs`."""
        group_version, _, plural = resource.rpartition("/")
        group, _, version = group_version.rpartition("/")
        found = self.registry.lookup(group, version, plural)
        if found is None:
            served = sorted(f"{t.api_version}/{t.plural}" for t in self.registry)
            raise KeyError(f"resource {resource!r} is not served; served: {', '.join(served)}")
        return found

    def install_crd(self, manifest: dict[str, Any]) -> None:
        """Install a CustomResourceDefinition (as `kubectl apply` would: create it, or replace the one there)."""
        crds = self._type("apiextensions.k8s.io/v1/customresourcedefinitions")

        def install() -> None:
            name = manifest["metadata"]["name"]
            if self.store.get(crds, "", name) is None:
                self.verbs.create(crds, None, manifest)
            else:
                self.verbs.replace(crds, None, name, manifest)

        self.call(install)

    def install_crd_file(self, path: Path) -> None:
        for manifest in load_crd_manifests(path):
            self.install_crd(manifest)

    def objects(self, resource: str, namespace: str | None = None) -> dict[str, dict[str, Any]]:
        """Current objects of a resource (`kubeflow.org/v1/pytorchjobs`), name -> a copy, for assertions."""
        rt = self._type(resource)
        return self.call(
            lambda: {
                stored.raw["metadata"]["name"]: json.loads(stored.body)
                for stored in self.store.scan(rt, namespace if rt.namespaced else None)
            }
        )

    def create(self, resource: str, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """Create an object in-process (same semantics and events as over HTTP, but not recorded)."""
        rt = self._type(resource)
        return self.call(lambda: json.loads(self.verbs.create(rt, namespace, body).body))

    # -- faults, records, watches ---------------------------------------------------------------------------

    def records(self) -> list[RequestRecord]:
        return self.call(lambda: list(self.recorder.records))

    def clear_records(self) -> None:
        self.call(self.recorder.clear)

    def add_fault(self, fault: Fault) -> int:
        return self.call(self.faults.add, fault)

    def remove_fault(self, fault_id: int) -> bool:
        return self.call(self.faults.remove, fault_id)

    def clear_faults(self) -> None:
        self.call(self.faults.clear)

    def drop_watches(self, resource: str | None = None) -> int:
        """Close open watches (all, or of one resource: `pods`, `pytorchjobs.kubeflow.org`); returns how many."""
        return self.call(self._drop_watches, resource)

    def _drop_watches(self, resource: str | None = None) -> int:
        return self.handler.drop_watches(resource) if self.handler is not None else 0

    def compact(self) -> int:
        """Forget the watch history (as an etcd compaction): watching from an older version gets 410. Returns the
        current resource version."""

        def compact() -> int:
            self.store.compact()
            return self.store.rv

        return self.call(compact)

    def attach_cluster(self, cluster: ClusterControl) -> None:
        """Publish a simulated cluster through the admin endpoints (`/dl2/cluster`)."""
        self.admin_state.cluster = cluster


__all__ = ["THIRD_PARTY_CRDS", "ApiError", "FaultInjector", "LocalApiServer"]
